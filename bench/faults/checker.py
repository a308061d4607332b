"""The fault suite's judge: what the clients were told against what the topic holds.

``check(load, read)`` takes ``load.json`` and ``read.json`` of ``bench/faults/workload.py``
(as dicts) and counts, over the idempotent producers' records:

* ``acked``: acknowledged records; ``lost``: acknowledged, never read; ``duplicated``: read
  more than once (each extra copy counts); ``offset_mismatch``: read at another offset than the
  acknowledgement gave; ``reordered``: a producer's record read after one it wrote later;
  and, not an anomaly, ``acked_without_offset``: acknowledgements that came without an offset,
  so there is none to check (the record must still be read, once);

and over the transactions (``t<j>:<k>:<p>`` on every partition ``p``):

* ``aborted_visible``: records of aborted transactions that were read; ``committed_missing``:
  records of committed transactions that were not; ``partly_visible``: transactions (whatever
  their outcome, ``unknown`` included) of which some records but not all were read;
  ``txn_duplicated``: transaction records read more than once.

``anomalies(result)`` is the sum of every count above but ``acked`` (0: safe).

``gaps(load, partitions, events)``: liveness. For each event ``(name, start, end)`` (a fault
from when it was made to when it was healed, then from the heal to the next event), per
partition, the longest time without an acknowledgement of an idempotent producer, counted from
the event's start: the time to the first acknowledgement after it, and every gap between two
acknowledgements up to the event's end (one that spans the end counts up to the end: the
heal ends a fault's window, the next fault a heal's).

``txn_rate(load, start, end)``: transactions that ended (committed or aborted, known) per
minute in a window; ``commit_times(load)``: the commits' own times, seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

COUNTS = (
    "lost",
    "duplicated",
    "offset_mismatch",
    "reordered",
    "aborted_visible",
    "committed_missing",
    "partly_visible",
    "txn_duplicated",
)


def check(load: dict, read: dict) -> dict:
    # what was read: value -> the offsets it was read at, and each producer's order
    read_at: dict[str, list[int]] = {}
    order: dict[int, list[int]] = {}
    for _, records in sorted(read["records"].items(), key=lambda x: int(x[0])):
        for offset, value in records:
            read_at.setdefault(value, []).append(offset)
            if value.startswith("p"):
                producer, n = value[1:].split(":")
                order.setdefault(int(producer), []).append(int(n))
    out = dict.fromkeys(("acked", "acked_without_offset", *COUNTS), 0)
    examples: list[str] = []
    for i, p in enumerate(load["producers"]):
        acked = p["acked"]
        for n, (_, offset, _) in acked.items():
            out["acked"] += 1
            where = read_at.get(f"p{i}:{n}", [])
            if not where:
                out["lost"] += 1
                _note(examples, f"lost p{i}:{n} (acked at {offset})")
            else:
                if len(where) > 1:
                    out["duplicated"] += len(where) - 1
                    _note(examples, f"p{i}:{n} read at {where}, acked at {offset}")
                if offset is None:
                    out["acked_without_offset"] += 1
                elif offset not in where:
                    out["offset_mismatch"] += 1
                    _note(examples, f"p{i}:{n} read at {where}, acked at {offset}")
        seen = order.get(i, [])
        for x, y in zip(seen, seen[1:]):
            if y < x and str(y) in acked:
                out["reordered"] += 1
                _note(examples, f"p{i}: {y} read after {x}")
    partitions = len(read["records"])
    for t in load["txns"]:
        j, k = t["producer"], t["k"]
        found = [read_at.get(f"t{j}:{k}:{p}", []) for p in range(partitions)]
        visible = sum(1 for f in found if f)
        copies = sum(len(f) - 1 for f in found if len(f) > 1)
        if copies:
            out["txn_duplicated"] += copies
            _note(examples, f"t{j}:{k}: {copies} extra copies read")
        if t["outcome"] == "abort" and visible:
            out["aborted_visible"] += visible
            _note(examples, f"aborted t{j}:{k} visible in {visible} partitions")
        elif t["outcome"] == "commit" and visible < partitions:
            out["committed_missing"] += partitions - visible
            _note(examples, f"committed t{j}:{k} missing in {partitions - visible} partitions")
        if 0 < visible < partitions:
            out["partly_visible"] += 1
            _note(examples, f"t{j}:{k} ({t['outcome']}) visible in {visible} of {partitions}")
    out["examples"] = examples
    out["read_complete"] = bool(read.get("complete"))
    return out


def _note(examples: list[str], text: str) -> None:
    if len(examples) < 10:
        examples.append(text)


def anomalies(result: dict) -> int:
    return sum(result[k] for k in COUNTS)


def ack_times(load: dict) -> dict[int, list[float]]:
    """Per partition, the sorted times of the idempotent producers' acknowledgements."""
    times: dict[int, list[float]] = {}
    for p in load["producers"]:
        for partition, _, t in p["acked"].values():
            times.setdefault(partition, []).append(t)
    for ts in times.values():
        ts.sort()
    return times


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without an acknowledgement from ``start`` (see the module doc)."""
    i = bisect.bisect_right(times, start)
    last, worst = start, 0.0
    while i < len(times) and times[i] <= end:
        worst = max(worst, times[i] - last)
        last = times[i]
        i += 1
    return max(worst, end - last)  # (a gap that spans the end counts up to it)


def gaps(
    load: dict, partitions: Iterable[int], events: list[tuple[str, float, float]]
) -> list[dict[int, float]]:
    times = ack_times(load)
    return [
        {p: round(longest_gap(times.get(p, []), start, end), 3) for p in partitions}
        for _, start, end in events
    ]


def txn_rate(load: dict, start: float, end: float) -> float:
    done = [t for t in load["txns"] if t["outcome"] != "unknown" and start <= t["end"] <= end]
    minutes = max(end - start, 1e-9) / 60
    return len(done) / minutes


def commit_times(load: dict, start: float = 0.0, end: float = float("inf")) -> list[float]:
    return sorted(
        t["commit_s"] for t in load["txns"] if "commit_s" in t and start <= t["start"] <= end
    )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]
