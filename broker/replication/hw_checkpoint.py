"""The high watermarks of a broker's replicas across restarts: Kafka's
``replication-offset-checkpoint``, one file per data directory (cluster mode).

How this works
--------------
The file has Kafka's layout: a version line ``0``, a count line, then one line per partition,
``<topic> <partition> <high watermark>``. It is written whole (temporary file, fsync, rename,
directory fsync: a reader sees the old table or the new one) in a worker thread, every
``replica.high.watermark.checkpoint.interval.ms`` while the broker runs and once at a clean
stop, with the high watermark each replica knows (``known``): a leader alone in its ISR, its
log end; any other leader or a follower, the high watermark it has (a follower learns it from
its leader's fetch answers); a replica that knows none since it started (no entry read, no
fetch answered yet) keeps the entry read at start.

At start the file is read once (``read``); a replica's high watermark starts at its entry
(capped at its log end), or at 0 without one, before it gets a role: a restarted leader
then exposes to consumers only what the ISR had, and its high watermark moves up as its
followers fetch again, instead of jumping to its own log end (which may hold records no
follower has, never acknowledged to acks=all producers); a restarted follower that finds no
common leader epoch with its leader truncates to it. An unreadable file is logged and
ignored (every replica starts at 0: safe, the followers' fetches move it up again).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from headrace.storage import replace_file

log = logging.getLogger("headrace.replicas")

FILE_NAME = "replication-offset-checkpoint"
VERSION = 0
MAX_FILE_BYTES = 64 << 20  # a larger file is not one this broker wrote

Key = tuple[str, int]
_writing = threading.Lock()  # one write at a time (the periodic one and the last one)


def read(data_dir: Path) -> dict[Key, int]:
    """(In a worker thread.) The entries of ``data_dir``'s file ({} when there is none)."""
    path = Path(data_dir) / FILE_NAME
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError("too large")
        lines = path.read_text().split("\n")
        if lines[0].strip() != str(VERSION):
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        body = [line.split() for line in lines[2:] if line.strip()]
        if len(body) != count:
            raise ValueError(f"{count} entries announced, {len(body)} found")
        found: dict[Key, int] = {}
        for fields in body:
            topic, partition, hw = fields  # ValueError unless three
            if int(partition) < 0 or int(hw) < 0:
                raise ValueError(f"bad entry {fields}")
            found[(topic, int(partition))] = int(hw)
        return found
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, IndexError, UnicodeDecodeError) as e:
        log.warning("ignoring %s: %s", path, e)
        return {}


def write(data_dir: Path, entries: dict[Key, int]) -> None:
    """(In a worker thread.) Replace ``data_dir``'s file with ``entries``."""
    path = Path(data_dir) / FILE_NAME
    text = f"{VERSION}\n{len(entries)}\n" + "".join(
        f"{t} {p} {hw}\n" for (t, p), hw in sorted(entries.items())
    )
    with _writing:
        replace_file(path, text.encode())


def known(partition) -> int | None:
    """The high watermark a replica knows now; None when it has learnt none."""
    end = partition.log.log_end_offset
    ls = partition.leader_state
    if ls is not None and ls.solo:
        return end
    if partition.hw >= 0:
        return min(partition.hw, end)
    return None
