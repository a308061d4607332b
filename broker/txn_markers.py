"""Transaction markers (control batches) and the per-partition aborted-transactions index.

Control batch (what the coordinator appends to every partition of a finished transaction):
attributes transactional | control, the transaction's producer id and epoch, baseSequence -1,
one record whose key and value are::

    key:   int16 version (0), int16 type (0 abort, 1 commit)
    value: int16 version (0), int32 coordinator epoch

Aborted-transactions index (``transactions.index`` in the partition directory): one entry per
aborted transaction, in marker-offset order, 34 bytes each, big-endian::

    int16 version (0), int64 producer id, int64 first offset, int64 last offset (the abort
    marker), int64 last stable offset when the marker was written

A ``read_committed`` fetch returns the entries whose range overlaps the fetched offsets, and
the client drops the aborted producer's batches itself (the broker never filters records).
Entries are appended on the event loop (page cache, like log appends); ``sync`` runs in a
thread before a producer-state snapshot is written, so entries below a snapshot's offset are
durable and those above it are rebuilt from the log after a crash.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

from headrace.protocol.records import (
    BATCH_HEADER_SIZE,
    Record,
    build_batch,
    decode_records,
)

ABORT, COMMIT = 0, 1
INDEX_FILE = "transactions.index"

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_ENTRY = struct.Struct(">hqqqq")


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int | None = None) -> bytearray:
    """A writable control batch (base offset 0: set it before appending)."""
    record = Record(key=_KEY.pack(0, COMMIT if commit else ABORT),
                    value=_VALUE.pack(0, coordinator_epoch), timestamp=timestamp)
    return bytearray(build_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=-1, is_transactional=True, is_control=True))


def control_type(batch) -> int:
    """ABORT or COMMIT for the control batch starting at ``batch[0]``; -1 if unreadable."""
    try:
        for _, _, key, _, _ in decode_records(memoryview(batch)):
            if key is None or len(key) < _KEY.size:
                return -1
            return _KEY.unpack_from(key)[1]
    except ValueError:
        return -1
    return -1


CONTROL_READ_BYTES = BATCH_HEADER_SIZE + 64  # a control batch is about 80 bytes


class AbortedIndex:
    """The aborted transactions of one partition: in memory (sorted by last offset) and in
    ``transactions.index``."""

    __slots__ = ("path", "entries", "_lasts", "_fd")

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / INDEX_FILE
        self.entries: list[tuple[int, int, int, int]] = []  # (pid, first, last, lso)
        self._lasts: list[int] = []
        self._fd: int | None = None

    @classmethod
    def load(cls, directory: Path, keep_below: int) -> AbortedIndex:
        """Read the file, keeping entries whose marker is below ``keep_below`` (the ones at or
        above it are rebuilt by replaying the log); the file is cut to match."""
        index = cls(directory)
        try:
            data = index.path.read_bytes()
        except FileNotFoundError:
            data = b""
        kept = 0
        for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != 0 or last >= keep_below or (index._lasts and last < index._lasts[-1]):
                break
            index.entries.append((pid, first, last, lso))
            index._lasts.append(last)
            kept = pos + _ENTRY.size
        if kept != len(data):
            with open(index.path, "r+b" if data else "wb") as f:
                f.truncate(kept)
        return index

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def add(self, pid: int, first: int, last: int, lso: int, write: bool = True) -> None:
        self.entries.append((pid, first, last, lso))
        self._lasts.append(last)
        if write:
            os.write(self._file(), _ENTRY.pack(0, pid, first, last, lso))

    def overlapping(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions with a record in [start, end)."""
        i = bisect.bisect_left(self._lasts, start)
        return [(pid, first) for pid, first, _, _ in self.entries[i:] if first < end]

    def truncate(self, end_offset: int) -> None:
        """Forget entries whose marker is at or above ``end_offset`` (log truncation)."""
        i = bisect.bisect_left(self._lasts, end_offset)
        if i < len(self.entries):
            del self.entries[i:], self._lasts[i:]
            with open(self.path, "r+b") as f:
                f.truncate(i * _ENTRY.size)

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
