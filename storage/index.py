"""Sparse offset and time indexes, one of each per segment.

Index files are append-only: an entry is written with one ``os.write`` when it is added, so the
number of valid entries is always ``file size // entry size`` (a torn trailing entry is
dropped), and nothing needs trimming on roll or close. The active segment's indexes are
mirrored in a bytearray; an inactive segment's index is memory-mapped read-only the first time
it is searched, so old indexes live in the page cache rather than in the Python heap.

Entries are never rewritten in place: a rebuilt index is written to a temporary file and
renamed over the old one, so an existing mapping never sees its file shrink. Index files carry
no checksum; they are hints, sanity-checked when loaded and rebuilt from the segment when in
doubt.

Callers (LogSegment, under the log's lock) keep the in-memory side consistent: ``write_entry``
touches only the file, ``add_entry`` only memory.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Self

from . import _files
from ._fd import FileRef


class _SparseIndex:
    ENTRY: struct.Struct
    ENTRY_SIZE: int

    __slots__ = ("path", "base_offset", "_buf", "_ref", "torn")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._buf: bytearray | mmap.mmap | bytes | None = None  # None: not loaded
        self._ref: FileRef | None = None  # write handle while active
        self.torn = False  # the file ended in a partial entry when loaded

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str, base_offset: int) -> Self:
        """A new, empty, active index (an existing file is truncated)."""
        index = cls(path, base_offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        index._ref = FileRef(fd)
        index._buf = bytearray()
        return index

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def load(self) -> bytearray | mmap.mmap | bytes:
        """The entries: an inactive index's file is mapped first (raises FileNotFoundError
        when missing)."""
        buf = self._buf
        if buf is not None:
            return buf
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = size // self.ENTRY_SIZE
            self.torn = size % self.ENTRY_SIZE != 0
            if n == 0:
                buf = b""
            else:
                buf = mmap.mmap(f.fileno(), n * self.ENTRY_SIZE, access=mmap.ACCESS_READ)
        self._buf = buf
        return buf

    def activate(self) -> None:
        """Load the file into memory and open it for appending (the segment became active)."""
        if self._ref is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        ref = FileRef(fd)
        size = os.fstat(fd).st_size
        whole = size - size % self.ENTRY_SIZE
        self.torn = whole != size
        data = bytearray(os.pread(fd, whole, 0)) if whole else bytearray()
        if whole != size:
            os.ftruncate(fd, whole)
        os.lseek(fd, whole, os.SEEK_SET)
        self._buf = data
        self._ref = ref

    def deactivate(self) -> None:
        """Drop the in-memory copy and the write handle (reloaded by mapping on demand)."""
        self._ref = None
        self._buf = None

    @property
    def active(self) -> bool:
        return self._ref is not None

    @property
    def write_ref(self) -> FileRef | None:
        return self._ref

    # -- entries ------------------------------------------------------------------------------

    def full(self, max_entries: int) -> bool:
        buf = self._buf
        return buf is not None and len(buf) >= max_entries * self.ENTRY_SIZE

    def __len__(self) -> int:
        return len(self.load()) // self.ENTRY_SIZE

    def entry(self, i: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self.load(), i * self.ENTRY_SIZE)

    def last_entry(self) -> tuple[int, int] | None:
        n = len(self)
        return self.entry(n - 1) if n else None

    def _floor(self, value: int, field: int) -> int:
        """Greatest i whose field ``field`` (0 or 1) is <= value, or -1."""
        buf = self.load()
        size = self.ENTRY_SIZE
        unpack = self.ENTRY.unpack_from
        lo, hi = 0, len(buf) // size
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(buf, mid * size)[field] <= value:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def raw(self) -> bytes:
        return bytes(self.load())

    # -- changes (active index only) -------------------------------------------------------------

    def pack(self, a: int, b: int) -> bytes:
        return self.ENTRY.pack(a, b)

    def write_entry(self, data: bytes) -> None:
        """Append one packed entry to the file (one write)."""
        ref = self._ref
        assert ref is not None, "the index is not active"
        os.write(ref.fd, data)

    def add_entry(self, data: bytes) -> None:
        """Append one packed entry to the in-memory copy."""
        buf = self._buf
        assert isinstance(buf, bytearray), "the index is not active"
        buf += data

    def resync_file(self) -> None:
        """Cut the file back to the in-memory entries (after a failed or partial write)."""
        if self._ref is None or self._buf is None:
            return
        keep = len(self._buf)
        if os.fstat(self._ref.fd).st_size != keep:
            os.ftruncate(self._ref.fd, keep)
        os.lseek(self._ref.fd, keep, os.SEEK_SET)

    def truncate_entries(self, n: int) -> None:
        """Keep the first n entries (active index only)."""
        buf, ref = self._buf, self._ref
        assert isinstance(buf, bytearray) and ref is not None, "the index is not active"
        keep = n * self.ENTRY_SIZE
        if keep < len(buf):
            del buf[keep:]
            os.ftruncate(ref.fd, keep)
            os.lseek(ref.fd, keep, os.SEEK_SET)

    def replace(self, data: bytes) -> None:
        """Replace the whole file with ``data`` (temp file + rename), keeping active/inactive."""
        was_active = self.active
        tmp = _files.temp_path(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self._ref = None
        self._buf = None
        self.torn = False
        if was_active:
            self.activate()

    def fsync(self) -> None:
        ref = self._ref
        if ref is not None:
            os.fsync(ref.fd)

    def delete(self) -> None:
        """Unlink the file; a mapping or copy already loaded stays usable."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        ref, self._ref = self._ref, None
        self._buf = None
        if ref is not None:
            ref.close()


class OffsetIndex(_SparseIndex):
    """Offset index (``.index``): maps offsets to file positions in the segment.

    Entry layout, 8 bytes, big-endian:

        offset  size  field
             0     4  relativeOffset   base offset of a batch minus the segment's base offset
             4     4  position         file position of that batch in the .log file

    Both fields strictly increase. ``lookup`` finds the greatest entry <= the target; a reader
    then scans batch headers forward from that position.
    """

    ENTRY = struct.Struct(">ii")
    ENTRY_SIZE = 8
    __slots__ = ()

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry whose offset is <= ``offset``.

        Returns (base_offset, 0) when there is none: the segment's start is always a boundary.
        """
        i = self._floor(offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self.entry(i)
        return self.base_offset + rel, pos

    def boundary_at_or_before(self, position: int, max_offset: int) -> int:
        """The greatest indexed position <= ``position`` whose batch's base offset <= max_offset."""
        i = min(self._floor(position, 1), self._floor(max_offset - self.base_offset, 0))
        return self.entry(i)[1] if i >= 0 else 0

    def entries_before_position(self, position: int) -> int:
        """How many entries point below ``position``."""
        return self._floor(position - 1, 1) + 1

    def check(self, segment_size: int, next_base: int | None) -> bool:
        """Cheap consistency test of an index against its segment."""
        n = len(self)
        if self.torn:
            return False
        if n == 0:
            return True
        first_rel, first_pos = self.entry(0)
        last_rel, last_pos = self.entry(n - 1)
        if first_rel < 0 or first_pos < 0 or last_pos >= max(segment_size, 1):
            return False
        if next_base is not None and self.base_offset + last_rel >= next_base:
            return False
        prev_rel = prev_pos = -1
        for rel, pos in self.ENTRY.iter_unpack(self.raw()):
            if rel <= prev_rel or pos <= prev_pos:
                return False
            prev_rel, prev_pos = rel, pos
        return True


class TimeIndex(_SparseIndex):
    """Time index (``.timeindex``): maps timestamps to offsets in the segment.

    Entry layout, 12 bytes, big-endian:

        offset  size  field
             0     8  timestamp        the largest maxTimestamp seen in the segment so far
             8     4  relativeOffset   last offset of the batch that first reached it, minus
                                       the segment's base offset

    Timestamps strictly increase (an entry is only added when the maximum grows). The last
    entry holds the segment's largest timestamp once the segment is no longer active (it is
    written on roll and on close).
    """

    ENTRY = struct.Struct(">qi")
    ENTRY_SIZE = 12
    __slots__ = ()

    def offset_before(self, timestamp: int) -> int | None:
        """Offset of the greatest entry whose timestamp is < ``timestamp``, or None.

        Every batch up to and including that offset has maxTimestamp < ``timestamp``, so a
        search for the first batch with maxTimestamp >= ``timestamp`` may start there.
        """
        i = self._floor(timestamp - 1, 0)
        if i < 0:
            return None
        return self.base_offset + self.entry(i)[1]

    def check(self, next_base: int | None) -> bool:
        n = len(self)
        if self.torn:
            return False
        if n == 0:
            return True
        if self.entry(0)[1] < 0:
            return False
        if next_base is not None and self.base_offset + self.entry(n - 1)[1] >= next_base:
            return False
        prev_ts, prev_rel = None, -1
        for ts, rel in self.ENTRY.iter_unpack(self.raw()):
            if (prev_ts is not None and ts <= prev_ts) or rel < prev_rel:
                return False
            prev_ts, prev_rel = ts, rel
        return True
