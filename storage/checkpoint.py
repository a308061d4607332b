"""Offsets checkpoints: one file per data directory, ``partition-offsets-checkpoint``.

How this works
--------------
Every log's offsets that must survive a restart are kept in one table per data directory
(``OffsetCheckpoints``), written as one file in Kafka's checkpoint layout (a version line,
a count line, then one line per partition) with more columns:

    0
    <count>
    <partition directory> <recovery point> <log start offset> <cleaner offset> \
        <end offset> <end segment> <end size>

    recovery point      everything below it was fsynced
    log start offset
    cleaner offset      offsets below it were compacted (first dirty offset); -1: none
    end offset          only after a clean close (-1 otherwise): the log end offset, and the
    end segment         base offset and byte size of the active segment at that moment, so a
    end size            clean open needs no scan (ignored when the files differ)

The file is written to a temporary file, fsynced and renamed over the old one, then the data
directory is fsynced, so a reader sees the old or the new table, never a mix: two fsyncs per
data directory however many partitions it holds. Writes are grouped: a log changes its entry
in memory (``set``) and asks for a write (``write``, or ``write_if_due``: at most once per
``interval_s``); a writer writes every change made before it started, so concurrent callers
share one write. Inside ``deferred()`` (the broker opens or closes all its logs) writes wait
for the end of the block, which writes once.

A missing entry (or file, or an unreadable line) means "no recovery point": the log is
checked from its first segment. An entry is kept until ``forget`` (the log's directory is
removed). An entry left for a directory that no longer exists is ignored when a log is made
there (see recovery.load) and replaced by the new log's own entry at once (``Log.open``; the
broker writes the table before it lists the new partition). Entries are named by the
partition directory (one word: topic names have no spaces).

Upgrade: earlier versions kept one file per partition, ``log-offsets-checkpoint`` in the
partition directory (``key value`` lines, see ``read_partition_checkpoint``). When the table
has no entry for a partition, that file is read instead; once the table holding the entry is
written, the old file is removed.

Threads: any thread may call any method; ``_lock`` guards the table, ``_write_lock``
serialises writes (the file work happens outside ``_lock``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import _files

_log = logging.getLogger(__name__)

VERSION = 0
MAX_FILE_BYTES = 1 << 30  # a larger file is not a checkpoint this broker wrote


@dataclass(frozen=True, slots=True)
class Checkpoint:
    recovery_point: int
    log_start_offset: int
    end_offset: int | None = None
    end_segment: int | None = None
    end_size: int | None = None
    cleaner_offset: int | None = None


def still_true(on_disk: Checkpoint | None, now: Checkpoint) -> bool:
    """Whether the checkpoint ``on_disk`` says what is true of the log now (``now``, with the
    clean-close fields): then a log recovered without finding anything new keeps it rather
    than rewriting it. Clean-close fields may stay only if they describe the files."""
    if on_disk is None:
        return False
    same = (on_disk.recovery_point, on_disk.log_start_offset, on_disk.cleaner_offset) == (
        now.recovery_point,
        now.log_start_offset,
        now.cleaner_offset,
    )
    return same and (on_disk.end_offset is None or on_disk == now)


def _opt(value: int | None) -> int:
    return -1 if value is None else value


def _line(name: str, cp: Checkpoint) -> str:
    return (
        f"{name} {cp.recovery_point} {cp.log_start_offset} {_opt(cp.cleaner_offset)} "
        f"{_opt(cp.end_offset)} {_opt(cp.end_segment)} {_opt(cp.end_size)}\n"
    )


def _parse_line(line: str) -> tuple[str, Checkpoint]:
    name, *fields = line.split()
    rp, start, cleaner, end, seg, size = map(int, fields)  # ValueError unless 6
    if rp < 0 or start < 0 or name in (".", "..") or os.sep in name:
        raise ValueError(line)
    if end < 0:
        return name, Checkpoint(rp, start, cleaner_offset=cleaner if cleaner >= 0 else None)
    if seg < 0 or size < 0:
        raise ValueError(line)
    return name, Checkpoint(rp, start, end, seg, size, cleaner if cleaner >= 0 else None)


def _split(text: str) -> dict[str, str]:
    """A checkpoint file's lines by name (each checked when its entry is read); ValueError
    when the text is not a checkpoint file."""
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError("unknown checkpoint version")
    count = int(lines[1])
    body = [line for line in lines[2:] if line.strip()]
    if count != len(body):
        raise ValueError(f"checkpoint says {count} entries but holds {len(body)}")
    return {line.split(None, 1)[0]: line + "\n" for line in body}


def parse(text: str) -> dict[str, Checkpoint]:
    """The entries of a checkpoint file's text; ValueError when it is not one."""
    return dict(_parse_line(line) for line in _split(text).values())


class OffsetCheckpoints:
    """The offsets checkpoint of the logs in one data directory (see the module docstring)."""

    _shared: dict[str, OffsetCheckpoints] = {}
    _shared_lock = threading.Lock()

    def __init__(self, data_dir, interval_s: float = 1.0) -> None:
        self.directory = os.fspath(data_dir)
        self.path = os.path.join(self.directory, _files.OFFSETS_CHECKPOINT_NAME)
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        # each entry as its line in the file (what it costs in memory); None: not read yet
        self._lines: dict[str, str] | None = None
        self._migrated: set[str] = set()  # entries read from per-partition files
        self._version = 0  # bumped by every change
        self._written = 0  # the version the file holds
        self._last_write = time.monotonic()
        self._deferred = 0

    @classmethod
    def of(cls, data_dir) -> OffsetCheckpoints:
        """The process-wide table of ``data_dir`` (what ``Log.open`` uses unless given one)."""
        key = os.path.realpath(os.fspath(data_dir))
        with cls._shared_lock:
            table = cls._shared.get(key)
            if table is None:
                table = cls._shared[key] = cls(key)
            return table

    # -- reading -----------------------------------------------------------------------------

    def _load(self) -> dict[str, str]:
        """The table, read from the file on first use (lock held)."""
        if self._lines is None:
            self._lines = self._read_file()
        return self._lines

    def _read_file(self) -> dict[str, str]:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        try:
            if len(data) > MAX_FILE_BYTES:
                raise ValueError("too large")
            return _split(data.decode("ascii"))
        except (ValueError, UnicodeDecodeError) as e:
            _log.warning("%s is unreadable (%s): logs are checked from their start", self.path, e)
            return {}

    def get(self, name: str) -> Checkpoint | None:
        """The entry of partition directory ``name`` (in this data directory), or None (also
        for an unreadable line: that log is checked from its start)."""
        with self._lock:
            line = self._load().get(name)
        if line is None:
            return self._migrate(name)
        try:
            return _parse_line(line)[1]
        except ValueError:
            _log.warning("%s: unreadable entry %r", self.path, line)
            return None

    def _migrate(self, name: str) -> Checkpoint | None:
        """The checkpoint an earlier version kept in the partition directory, taken into the
        table (its file is removed once the table is written)."""
        legacy = read_partition_checkpoint(os.path.join(self.directory, name))
        if legacy is not None:
            with self._lock:
                lines = self._load()
                if name in lines:  # set meanwhile
                    return None
                lines[name] = _line(name, legacy)
                self._migrated.add(name)
                self._version += 1
        return legacy

    def names(self) -> list[str]:
        with self._lock:
            return list(self._load())

    # -- changing ----------------------------------------------------------------------------

    def set(self, name: str, cp: Checkpoint) -> None:
        """Change the entry of ``name`` in memory (written by the next write). A name must
        be one word (partition directories are: topic names have no spaces)."""
        if not name or len(name.split()) != 1 or name != name.strip():
            raise ValueError(f"a checkpoint entry needs a one-word name, not {name!r}")
        line = _line(name, cp)
        with self._lock:
            lines = self._load()
            if lines.get(name) != line:
                lines[name] = line
                self._version += 1

    def forget(self, name: str) -> None:
        """Drop the entry of ``name`` (its directory is being removed)."""
        with self._lock:
            if self._load().pop(name, None) is not None:
                self._version += 1
            self._migrated.discard(name)

    # -- writing -----------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return self._version != self._written

    def write_if_due(self) -> None:
        """``write`` if the file was last written ``interval_s`` ago or more."""
        if self.dirty and time.monotonic() - self._last_write >= self.interval_s:
            self.write()

    def write(self) -> None:
        """Make every change made before the call durable (unless inside ``deferred``).
        Raises OSError when the file cannot be written."""
        if self._deferred:
            return
        self._write()

    def _write(self) -> None:
        with self._write_lock:
            with self._lock:
                if self._version == self._written:
                    return
                version = self._version
                lines = list(self._load().values())
                migrated = list(self._migrated)
            data = (f"{VERSION}\n{len(lines)}\n" + "".join(lines)).encode("ascii")
            _files.replace_file(self.path, data)
            with self._lock:
                self._written = version
                self._last_write = time.monotonic()
                self._migrated.difference_update(migrated)
        for name in migrated:  # the table now holds what these said
            try:
                os.unlink(_files.checkpoint_path(os.path.join(self.directory, name)))
            except OSError:
                pass

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold writes until the end of the block, which writes once if anything changed
        (also when the block raises; a write failure then raises OSError)."""
        with self._lock:
            self._deferred += 1
        try:
            yield
        finally:
            with self._lock:
                self._deferred -= 1
                last = self._deferred == 0
            if last:
                self._write()


def read_partition_checkpoint(directory: str) -> Checkpoint | None:
    """The checkpoint an earlier version kept in a partition directory
    (``log-offsets-checkpoint``: ``version 0`` then ``key value`` lines), or None when it is
    missing or unreadable."""
    try:
        with open(_files.checkpoint_path(directory), encoding="ascii") as f:
            text = f.read(4096)
    except (OSError, UnicodeDecodeError):
        return None
    values: dict[str, int] = {}
    try:
        for line in text.splitlines():
            if not line.strip():
                continue
            key, value = line.split()
            values[key] = int(value)
        if values.get("version") != VERSION:
            return None
        return Checkpoint(
            recovery_point=values["recovery_point"],
            log_start_offset=values["log_start_offset"],
            end_offset=values.get("end_offset"),
            end_segment=values.get("end_segment"),
            end_size=values.get("end_size"),
            cleaner_offset=values.get("cleaner_offset"),
        )
    except (KeyError, ValueError):
        return None
