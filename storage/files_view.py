"""A log's files as another process reads them: ``Log.files_view()`` (in the log's process,
under its lock) notes each segment's paths, base offset and published size, and the
``LogFilesView`` it returns (a frozen, picklable value) reads whole batches and aborted
transactions from those files in any process, as ``Log.read`` and ``Log.aborted_txns`` do.

It never looks past the sizes the snapshot published, so it never sees a partial append. A
segment that retention or the cleaner removed after the snapshot is either still readable
through its open descriptor or gone (``StorageError``: the caller takes a new view and reads
again); a segment the cleaner replaced is read as the new file (the same offsets, fewer
records) or fails on its CRC or sizes, never as records under other offsets: batch headers
carry their offsets. The offset index is a hint here as in the log: the greatest entry at or
below an offset gives a batch boundary to scan from (an active segment's index file may lack
its last entries; that only makes the scan longer).
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from dataclasses import dataclass

from ._batch import BadBatch, iter_batches
from .errors import OffsetOutOfRange, StorageError
from .txn_index import AbortedTxn, aborted_between
from .txn_index import _read as _read_txn_index

_INDEX_ENTRY = struct.Struct(">ii")  # (relative offset, position): index.OffsetIndex's layout


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    base_offset: int
    size: int  # published bytes when the view was taken: never read past
    log_path: str
    index_path: str
    txn_index_path: str


@dataclass(frozen=True, slots=True)
class LogFilesView:
    """A log's segments as of ``Log.files_view()``; ``read``, ``aborted_txns`` and
    ``log_start_offset`` as a ``Log`` has them (what ``read_committed`` readers use)."""

    directory: str
    log_start_offset: int
    log_end_offset: int
    segments: tuple[SegmentFiles, ...]

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """What ``Log.read`` returns: whole batches from the one holding ``offset``, at most
        ``max_bytes`` (but the first, whole), below ``max_offset``, one segment at most."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        hw = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        bases = [s.base_offset for s in self.segments]
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        while i < len(self.segments) and offset < self.log_end_offset:
            seg = self.segments[i]
            try:
                fd = os.open(seg.log_path, os.O_RDONLY)
                try:
                    found = _read_segment(seg, fd, offset, max_bytes, hw)
                finally:
                    os.close(fd)
            except (OSError, BadBatch) as e:
                raise StorageError(f"read of {self.directory} at {offset} failed: {e}") from e
            if found is not None:
                return found
            i += 1  # no batch holds ``offset`` in its segment (a gap): the next segment's
            if i < len(self.segments):
                offset = self.segments[i].base_offset
        return b""

    def aborted_txns(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with a record in [start, end) (``Log.aborted_txns``)."""
        bases = [s.base_offset for s in self.segments]
        i = max(0, bisect.bisect_right(bases, start) - 1)
        try:
            return aborted_between(
                (_read_txn_index(s.txn_index_path) for s in self.segments[i:]), start, end
            )
        except OSError as e:
            raise StorageError(f"transaction index of {self.directory}: {e}") from e


def _read_segment(seg: SegmentFiles, fd: int, offset: int, max_bytes: int, hw: int):
    """The bytes to return from this segment; None: no batch holds ``offset`` here."""
    first = None
    for b in iter_batches(fd, _indexed_position(seg, offset), seg.size):
        if b.last_offset >= offset:
            first = b
            break
    if first is None:
        return None
    if first.base_offset >= hw:
        return b""
    start, end = first.position, first.position + first.size
    target = min(start + max_bytes, seg.size)
    if end < target:
        for b in iter_batches(fd, end, seg.size):
            if b.base_offset >= hw or b.position + b.size > target:
                break
            end = b.position + b.size
    data = os.pread(fd, end - start, start)
    if len(data) != end - start:
        raise StorageError(f"short read in segment {seg.base_offset}")
    return data


def _indexed_position(seg: SegmentFiles, offset: int) -> int:
    """The position of the greatest index entry at or below ``offset`` (0: none, or no
    usable index)."""
    try:
        with open(seg.index_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size // _INDEX_ENTRY.size * _INDEX_ENTRY.size
            if not size:
                return 0
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as buf:
                rel = offset - seg.base_offset
                lo, hi = 0, size // _INDEX_ENTRY.size
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if _INDEX_ENTRY.unpack_from(buf, mid * _INDEX_ENTRY.size)[0] <= rel:
                        lo = mid + 1
                    else:
                        hi = mid
                if not lo:
                    return 0
                position = _INDEX_ENTRY.unpack_from(buf, (lo - 1) * _INDEX_ENTRY.size)[1]
    except (OSError, ValueError):
        return 0
    return position if 0 <= position < seg.size else 0
