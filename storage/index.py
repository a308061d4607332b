"""Sparse offset and time indexes, one of each per segment.

Index files are append-only, so the number of valid entries is always ``file size // entry
size`` (a torn trailing entry is dropped), and nothing needs trimming on roll or close. The
active segment's indexes are mirrored in a bytearray, which searches read; its entries reach
the file ``WRITE_BYTES`` at a time (one ``pwrite`` for many batches instead of one per batch),
and all of them when the segment rolls or the log closes (``write_out``). So after a crash the
active index's file may lack its last entries: recovery rebuilds the indexes of every segment
from the one holding the recovery point on, which includes the active one, and a clean close
leaves them whole. An inactive segment's index is memory-mapped read-only the first time it is
searched, so old indexes live in the page cache rather than in the Python heap.

Descriptors come from the log's OpenFiles budget (open_files.py): the active index's write
descriptor is opened when an entry is written (at the end of the file, by position, so a
reopened descriptor writes in the right place), and a mapping of an inactive index counts as
an open file that may be unmapped when unused and mapped again on the next search. Every
search of a mapped index pins the mapping for the length of the search.

Entries are never rewritten in place: a rebuilt index is written to a temporary file and
renamed over the old one (skipped when the file already holds exactly those entries), so an
existing mapping never sees its file shrink. Index files carry no checksum; they are hints,
sanity-checked when loaded and rebuilt from the segment when in doubt.

Callers (LogSegment, under the log's lock) keep the in-memory side consistent: ``write_entry``
and ``write_out`` touch only the file (an entry goes to the file no earlier than with the
batch it indexes, so a failed append can be undone: ``resync_file``), ``add_entry`` only
memory.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, Self, TypeVar

from . import _files
from .errors import WouldBlock
from .open_files import CachedFile, MappedFile, OpenFiles

try:
    from ._pages import resident as _resident  # type: ignore[import-not-found]
except ImportError:
    _resident = None

_T = TypeVar("_T")

WRITE_BYTES = 4096  # an active index's entries go to its file this many bytes at a time


class _SparseIndex:
    ENTRY: struct.Struct
    ENTRY_SIZE: int

    __slots__ = ("path", "base_offset", "files", "_buf", "_mapped", "_writer", "_file_len", "torn")

    def __init__(self, path: str, base_offset: int, files: OpenFiles | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self.files = files or OpenFiles.shared()
        # the entries in memory: the active index's mirror, or b"" for an empty file; None:
        # not loaded, or mapped (``_mapped``)
        self._buf: bytearray | bytes | None = None
        self._mapped: MappedFile | None = None
        self._writer: CachedFile | None = None  # write descriptor while active
        self._file_len = 0  # bytes in the file while active
        self.torn = False  # the file ended in a partial entry when loaded

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str, base_offset: int, files: OpenFiles | None = None) -> Self:
        """A new, empty, active index (an existing file is truncated)."""
        index = cls(path, base_offset, files)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        index._buf = bytearray()
        index._writer = index.files.file(path, os.O_WRONLY | os.O_CREAT)
        return index

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def _call(self, fn: Callable[[Any], _T], nowait: bool = False) -> _T:
        """``fn(entries)``: the in-memory entries, or the mapping pinned for the call (an
        inactive index is mapped first; raises FileNotFoundError when the file is missing).
        ``nowait``: raise WouldBlock instead of mapping the file, or when a page of the
        mapping is not in memory (where that cannot be checked, whenever it is mapped)."""
        buf = self._buf
        if buf is None:
            mapped = self._mapped
            if mapped is None:
                if nowait:
                    raise WouldBlock
                mapped = self._map()
                buf = self._buf
            if mapped is not None:
                view = mapped.acquire(nowait)
                try:
                    if nowait and (_resident is None or not _resident(view)):
                        raise WouldBlock
                    return fn(view)
                finally:
                    mapped.release()
        return fn(buf)

    def _map(self) -> MappedFile | None:
        size = os.stat(self.path).st_size
        n = size // self.ENTRY_SIZE
        self.torn = size % self.ENTRY_SIZE != 0
        if n == 0:
            self._buf = b""
            return None
        self._mapped = self.files.mapped(self.path, n * self.ENTRY_SIZE)
        return self._mapped

    def _unload(self) -> None:
        mapped, self._mapped = self._mapped, None
        if mapped is not None:
            mapped.retire()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.retire()
        self._buf = None

    def activate(self) -> bool:
        """Load the file into memory for appending (the segment became active); whether the
        file was there (it is created empty if not)."""
        if self._writer is not None:
            return True
        self._unload()
        found = True
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            found = False
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            whole = size - size % self.ENTRY_SIZE
            self.torn = whole != size
            data = bytearray(os.pread(fd, whole, 0)) if whole else bytearray()
            if whole != size:
                os.ftruncate(fd, whole)
        finally:
            os.close(fd)
        self._buf = data
        self._file_len = whole
        self._writer = self.files.file(self.path, os.O_WRONLY | os.O_CREAT)
        return found

    def deactivate(self) -> None:
        """Drop the in-memory copy and the write descriptor (mapped again on demand)."""
        self._unload()

    @property
    def active(self) -> bool:
        return self._writer is not None

    @property
    def writer(self) -> CachedFile | None:
        return self._writer

    # -- entries ------------------------------------------------------------------------------

    def full(self, max_entries: int) -> bool:
        buf = self._buf
        return buf is not None and len(buf) >= max_entries * self.ENTRY_SIZE

    def __len__(self) -> int:
        return self._call(len) // self.ENTRY_SIZE

    def entry(self, i: int) -> tuple[int, int]:
        return self._call(lambda buf: self.ENTRY.unpack_from(buf, i * self.ENTRY_SIZE))

    def last_entry(self) -> tuple[int, int] | None:
        def last(buf):
            n = len(buf) // self.ENTRY_SIZE
            return self.ENTRY.unpack_from(buf, (n - 1) * self.ENTRY_SIZE) if n else None

        return self._call(last)

    def _floor(self, buf, value: int, field: int) -> int:
        """Greatest i whose field ``field`` (0 or 1) is <= value, or -1."""
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
        return self._call(bytes)

    # -- changes (active index only) -------------------------------------------------------------

    def pack(self, a: int, b: int) -> bytes:
        return self.ENTRY.pack(a, b)

    def write_entry(self, data: bytes) -> None:
        """Append one packed entry (not yet added) to the file: with the entries waiting before
        it once ``WRITE_BYTES`` are waiting, else later."""
        buf = self._buf
        assert isinstance(buf, bytearray), "the index is not active"
        if len(buf) - self._file_len + len(data) >= WRITE_BYTES:
            self.write_out(data)

    def write_out(self, data: bytes = b"") -> None:
        """Write the added entries the file lacks, then ``data`` (an entry not yet added), now
        (one write)."""
        buf, writer = self._buf, self._writer
        assert isinstance(buf, bytearray) and writer is not None, "the index is not active"
        if len(buf) > self._file_len:
            data = bytes(buf[self._file_len :]) + data
        if not data:
            return
        with writer.use(wrote=True) as fd:
            if os.pwrite(fd, data, self._file_len) != len(data):
                raise OSError("short write to an index")
        self._file_len += len(data)

    def add_entry(self, data: bytes) -> None:
        """Append one packed entry to the in-memory copy."""
        buf = self._buf
        assert isinstance(buf, bytearray), "the index is not active"
        buf += data

    def resync_file(self) -> None:
        """Cut the file back to the added entries it holds (after a failed or partial write,
        or a write of an entry whose batch was then undone)."""
        if self._writer is None or self._buf is None:
            return
        keep = min(self._file_len, len(self._buf))
        with self._writer.use(wrote=True) as fd:
            if os.fstat(fd).st_size != keep:
                os.ftruncate(fd, keep)
        self._file_len = keep

    def truncate_entries(self, n: int) -> None:
        """Keep the first n entries (active index only)."""
        buf, writer = self._buf, self._writer
        assert isinstance(buf, bytearray) and writer is not None, "the index is not active"
        keep = n * self.ENTRY_SIZE
        if keep < len(buf):
            del buf[keep:]
        if keep < self._file_len:
            with writer.use(wrote=True) as fd:
                os.ftruncate(fd, keep)
            self._file_len = keep

    def replace(self, data: bytes) -> bool:
        """Replace the whole file with ``data`` (temp file + rename), keeping active/inactive.

        A file that already holds exactly ``data`` is left as it is (recovery rebuilds every
        index it checks; most come out unchanged). Returns whether the file was rewritten."""
        was_active = self.active
        rewrite = not _holds(self.path, data)
        if rewrite:
            _files.replace_file(self.path, data, durable=False)
        self._unload()
        self.torn = False
        if was_active:
            self.activate()
        return rewrite

    def fsync(self) -> None:
        writer = self._writer
        if writer is not None:
            self.files.sync([writer])

    def delete(self) -> None:
        """Unlink the file; a search that pinned the mapping before finishes."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._unload()

    def close(self) -> None:
        self._unload()


def _holds(path: str, data: bytes) -> bool:
    """Whether the file at ``path`` holds exactly ``data``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return os.fstat(fd).st_size == len(data) and os.pread(fd, len(data) + 1, 0) == data
    finally:
        os.close(fd)


class OffsetIndex(_SparseIndex):
    """Offset index (``.index``): maps offsets to file positions in the segment.

    Entry layout, 8 bytes, big-endian:

        offset  size  field
             0     4  relativeOffset   last offset of a batch minus the segment's base offset
             4     4  position         file position of that batch in the .log file

    Both fields strictly increase. As in Kafka, an entry is keyed by its batch's last offset;
    files written by earlier Headrace versions key it by the base offset. Every search below
    holds for any key between the batch's base and last offsets: ``lookup`` finds the greatest
    entry <= the target, whose batch starts at or before the batch holding the target, and a
    reader then scans batch headers forward from that position.
    """

    ENTRY = struct.Struct(">ii")
    ENTRY_SIZE = 8
    __slots__ = ()

    def lookup(self, offset: int, nowait: bool = False) -> tuple[int, int]:
        """(offset, position) of the greatest entry whose offset is <= ``offset``.

        Returns (base_offset, 0) when there is none: the segment's start is always a boundary.
        ``nowait``: see ``_call``.
        """

        def find(buf) -> tuple[int, int]:
            i = self._floor(buf, offset - self.base_offset, 0)
            if i < 0:
                return self.base_offset, 0
            rel, pos = self.ENTRY.unpack_from(buf, i * self.ENTRY_SIZE)
            return self.base_offset + rel, pos

        return self._call(find, nowait)

    def boundary_at_or_before(self, position: int, max_offset: int, nowait: bool = False) -> int:
        """The greatest indexed position <= ``position`` whose entry's offset <= max_offset
        (so its batch's base offset is <= max_offset too). ``nowait``: see ``_call``."""

        def find(buf) -> int:
            rel = max_offset - self.base_offset
            i = min(self._floor(buf, position, 1), self._floor(buf, rel, 0))
            return self.ENTRY.unpack_from(buf, i * self.ENTRY_SIZE)[1] if i >= 0 else 0

        return self._call(find, nowait)

    def entries_before_position(self, position: int) -> int:
        """How many entries point below ``position``."""
        return self._call(lambda buf: self._floor(buf, position - 1, 1) + 1)

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

        def find(buf) -> int | None:
            i = self._floor(buf, timestamp - 1, 0)
            if i < 0:
                return None
            return self.base_offset + self.ENTRY.unpack_from(buf, i * self.ENTRY_SIZE)[1]

        return self._call(find)

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
