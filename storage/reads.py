"""Reading a log (part of Log: see log.py); safe from any number of reader threads.

How this works
--------------
A read takes what it needs under the log's lock (the segment holding the offset, its
published size, a pin on its file, the index position to start from, the log's
``_generation``) and reads the file after releasing it, then unpins it. It never looks past a
published size, so it never sees a partial append; a segment deleted meanwhile stays
readable through the pin (the descriptor closes when the read is done). When
``_generation`` changed during the read (truncation, a compaction swap) the result may mix
old and new data, so the read looks again. ``batch_headers`` pins a file for a chunk of
headers at a time, never while its caller holds the generator.

``read_region`` finds the same bytes as ``read`` but does not copy them: it returns a
``FileRegion`` (descriptor, position, length) that keeps the file pinned until released, for
a caller that sends the bytes straight from the page cache (``os.sendfile``). The generation
check covers the search; the bytes are read later from the same file, which deletion and
compaction never change (they retire the file; the pin keeps it readable). Only an in-place
truncation could cut it, and the reader then finds fewer bytes than the region's length.

``read_region(..., nowait=True)`` is the same read for a thread that must not wait (the
broker's event loop): it takes the log's lock only if it is free, uses only descriptors
already open and indexes already loaded (an old segment's mapped index only when its pages are
in memory: ``_pages.resident``), and reads with ``pread_nowait``; where any of these would
wait it raises WouldBlock, having kept nothing, and the caller reads again without ``nowait``
in a thread that may wait.
"""

from __future__ import annotations

import bisect
import enum
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ._batch import BadBatch, iter_batches
from .errors import OffsetOutOfRange, StorageError, WouldBlock
from .io import pread_nowait

if TYPE_CHECKING:
    from .files_view import LogFilesView
from .log_state import LogState
from .segment import LogSegment
from .txn_index import AbortedTxn, aborted_between


class _NoBatch(enum.Enum):
    """What ``_read_segment`` returns when no batch holds the offset in its segment."""

    NO_BATCH = enum.auto()


_NO_BATCH: Final = _NoBatch.NO_BATCH
_HEADERS_PER_PIN = 1024  # batch_headers reads this many headers per use of a file


class FileRegion:
    """``length`` stored bytes at ``position`` of a segment file, through its pinned
    descriptor ``fd`` (``Log.read_region``). ``release()`` unpins the file (once; later calls
    do nothing); ``read()`` copies the bytes out and releases."""

    __slots__ = ("fd", "position", "length", "_file", "_io", "_held")
    _live = 0  # regions held (not yet released), in the whole process
    _live_lock = threading.Lock()

    def __init__(self, file, fd: int, position: int, length: int, io) -> None:
        self._file = file
        self.fd = fd
        self.position = position
        self.length = length
        self._io = io
        self._held = False

    def __len__(self) -> int:
        return self.length

    def read(self, nowait: bool = False) -> bytes:
        """The bytes (a copy), then release. Raises StorageError if they cannot all be read;
        ``nowait``: WouldBlock unless all of them are in the page cache."""
        if not self.length:
            self.release()
            return b""
        path = self._file.path if self._file is not None else "?"
        pread = pread_nowait if nowait else self._io.pread
        try:
            data = pread(self.fd, self.length, self.position)
        except OSError as e:
            raise StorageError(f"read of {path} failed: {e}") from e
        finally:
            self.release()
        if len(data) != self.length:
            raise StorageError(f"short read in {path}")
        return data

    def release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.release()
            if self._held:
                with FileRegion._live_lock:
                    FileRegion._live -= 1

    def _hold(self, limit: int) -> bool:
        """Count this region among the held ones if fewer than ``limit`` are."""
        with FileRegion._live_lock:
            if FileRegion._live >= limit:
                return False
            FileRegion._live += 1
        self._held = True
        return True

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


class TryLock:
    """A lock for a thread that must not wait: entering takes it if it is free and raises
    WouldBlock if not."""

    __slots__ = ("_lock",)

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        if not self._lock.acquire(False):
            raise WouldBlock

    def __exit__(self, *exc) -> None:
        self._lock.release()


class LogReads(LogState):
    """Log's read side: read, batch_headers, offset_for_timestamp, max_timestamp and
    aborted_txns."""

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Stored bytes from the batch holding ``offset``: whole batches, one segment at most.

        At most ``max_bytes``, except that the first batch is returned whole even if larger.
        Stops before a batch whose base offset is >= ``max_offset`` and at the end of the
        segment holding ``offset`` (call again from the next offset to continue). Returns
        b"" at the log end offset (or when the first batch starts at or above ``max_offset``).
        """
        while True:
            span = self._span(offset, max_bytes, max_offset)
            if span is None:
                return b""
            seg, fd, start, end, generation = span
            try:
                data = self._io.pread(fd, end - start, start)
            except OSError as e:
                with self._lock:
                    if generation != self._generation:
                        continue
                raise StorageError(f"read of {self.directory} at {offset} failed: {e}") from e
            finally:
                seg.log_file.release()
            with self._lock:
                if generation != self._generation:
                    continue  # changed while we read: look again
            if len(data) != end - start:
                raise StorageError(f"short read in segment {seg.base_offset}")
            return data

    def read_region(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        copy_below: int = 0,
        nowait: bool = False,
    ) -> FileRegion | bytes:
        """What ``read`` would return, as a region of the segment file, not copied; as bytes
        (what ``read`` returns) when under ``copy_below`` bytes, or when regions already pin
        half of the descriptor budget (``OpenFiles.max_open``), which is kept for the rest.

        The region's file stays pinned (open, and readable even if the segment is deleted or
        replaced meanwhile) until ``region.release()``. A truncation that cuts the segment
        in place (``truncate_to``) before the region is read makes it shorter than
        ``length``: readers must check what they got. ``nowait``: raise WouldBlock rather than
        wait (see the module's docstring).
        """
        lock = self._try_lock if nowait else self._lock
        while True:
            span = self._span(offset, max_bytes, max_offset, nowait)
            if span is None:
                return b""
            seg, fd, start, end, generation = span
            region = FileRegion(seg.log_file, fd, start, end - start, self._io)
            if end - start >= copy_below and region._hold(self._files.max_open // 2):
                return region
            try:
                data = region.read(nowait)
            except StorageError:
                with lock:
                    if generation != self._generation:
                        continue
                raise
            with lock:
                if generation != self._generation:
                    continue  # changed while we read: look again
            return data

    def _span(
        self, offset: int, max_bytes: int, max_offset: int | None, nowait: bool = False
    ) -> tuple[LogSegment, int, int, int, int] | None:
        """(segment, pinned descriptor, start, end, generation) of what ``read`` returns, or
        None when that is nothing; the caller releases ``segment.log_file``."""
        lock = self._try_lock if nowait else self._lock
        while True:
            with lock:
                if offset < self.log_start_offset or offset > self.log_end_offset:
                    raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
                if offset == self.log_end_offset:
                    return None
                hw = (
                    self.log_end_offset
                    if max_offset is None
                    else min(max_offset, self.log_end_offset)
                )
                try:
                    seg, _ = self._locate(offset, nowait)
                    _, position = seg.offset_index.lookup(offset, nowait)
                    fd = seg.log_file.acquire(nowait)
                except OSError as e:
                    raise StorageError(f"read of {self.directory} at {offset}: {e}") from e
                limit = seg.size
                generation = self._generation
            keep = False
            try:
                result = self._read_segment(
                    seg, fd, position, limit, offset, max_bytes, hw, generation, nowait
                )
                if isinstance(result, tuple):
                    with lock:
                        if generation != self._generation:
                            continue  # changed meanwhile: look again
                    keep = True
                    start, end = result
                    return seg, fd, start, end, generation
            except (OSError, BadBatch) as e:
                with lock:
                    if generation != self._generation:
                        continue
                raise StorageError(f"read of {self.directory} at {offset} failed: {e}") from e
            finally:
                if not keep:
                    seg.log_file.release()
            if result is None:
                continue  # truncated meanwhile: look again
            if result is _NO_BATCH:
                # no batch holds ``offset`` in its segment (a gap): go on with the next segment
                with lock:
                    next_base = self._next_base(seg)
                if next_base is None or next_base >= self.log_end_offset:
                    return None
                offset = next_base
                continue
            return None  # the first batch starts at or above max_offset

    def _read_segment(
        self,
        seg: LogSegment,
        fd: int,
        position: int,
        limit: int,
        offset: int,
        max_bytes: int,
        hw: int,
        generation: int,
        nowait: bool,
    ) -> tuple[int, int] | _NoBatch | bool | None:
        """(start, end) of the whole batches to read; False: the first batch is at or above
        ``hw``; _NO_BATCH: none holds ``offset`` here; None: the segment changed."""
        pread = pread_nowait if nowait else os.pread
        first = None
        for b in iter_batches(fd, position, limit, pread=pread):
            if b.last_offset >= offset:
                first = b
                break
        if first is None:
            return None if generation != self._generation else _NO_BATCH
        if first.base_offset >= hw:
            return False
        start = first.position
        end = start + first.size
        target = min(start + max_bytes, limit)
        if end < target:
            with self._try_lock if nowait else self._lock:
                if generation != self._generation:
                    return None
                # a segment deleted meanwhile may have no index left to map: just scan
                jump = (
                    0 if seg.deleted else seg.offset_index.boundary_at_or_before(target, hw, nowait)
                )
            if jump > end:
                end = jump  # an indexed boundary within both limits
            for b in iter_batches(fd, end, limit, pread=pread):
                if b.base_offset >= hw or b.position + b.size > target:
                    break
                end = b.position + b.size
        return start, end

    def batch_headers(self, from_offset: int) -> Iterator[bytes]:
        """The 61-byte header of each batch from the one holding ``from_offset`` to the end."""
        offset = from_offset
        while True:
            with self._lock:
                if offset < self.log_start_offset or offset > self.log_end_offset:
                    if offset != from_offset:
                        return  # the log was truncated or trimmed below where we got to
                    raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
                _, i = self._locate(offset)
                segments = self._segments[i:]
                generation = self._generation
            for seg in segments:
                position = None
                while True:  # a chunk of headers per pin of the file
                    with self._lock:
                        if seg.deleted:
                            break  # removed meanwhile (below the new log start, or truncated)
                        try:
                            if position is None:
                                seg.ensure_indexes(self._next_base(seg))
                                start = max(offset, seg.base_offset)
                                position = seg.offset_index.lookup(start)[1]
                            fd = seg.log_file.acquire()
                        except OSError as e:
                            raise StorageError(f"scan of segment {seg.base_offset}: {e}") from e
                        limit = seg.size
                    chunk = []
                    try:
                        for item in iter_batches(fd, position, limit, headers=True):
                            chunk.append(item)
                            if len(chunk) == _HEADERS_PER_PIN:
                                break
                    except (OSError, BadBatch) as e:
                        with self._lock:
                            changed = generation != self._generation
                        if changed:
                            break  # truncated or replaced under us: look again from ``offset``
                        raise StorageError(f"scan of segment {seg.base_offset} failed: {e}") from e
                    finally:
                        seg.log_file.release()
                    for info, header in chunk:
                        if info.last_offset >= offset:
                            offset = info.last_offset + 1
                            yield header
                    if len(chunk) < _HEADERS_PER_PIN:
                        break  # the end of the segment
                    last = chunk[-1][0]
                    position = last.position + last.size
                with self._lock:
                    if generation != self._generation:
                        break
            else:
                return

    def _next_base(self, seg: LogSegment) -> int | None:
        i = bisect.bisect_right(self._bases, seg.base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, bytes] | None:
        """The first batch whose maxTimestamp >= ``timestamp``: (its base offset, its bytes)."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            with self._lock:
                if seg.size == 0 or seg.deleted:
                    continue
                seg.ensure_indexes(self._next_base(seg))
                if seg.known_max_ts()[0] < timestamp:
                    continue
                try:
                    start_at = seg.time_index.offset_before(timestamp)
                    position = 0 if start_at is None else seg.offset_index.lookup(start_at)[1]
                    fd = seg.log_file.acquire()
                except OSError as e:
                    raise StorageError(f"time lookup in {self.directory}: {e}") from e
                limit = seg.size
                log_start = self.log_start_offset
            try:
                for b in iter_batches(fd, position, limit):
                    if b.max_timestamp >= timestamp and b.last_offset >= log_start:
                        return b.base_offset, os.pread(fd, b.size, b.position)
            except (OSError, BadBatch) as e:
                raise StorageError(f"time lookup in {self.directory} failed: {e}") from e
            finally:
                seg.log_file.release()
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(largest maxTimestamp appended, last offset of that batch); (-1, -1) when empty."""
        with self._lock:
            if self._max_ts is None:
                best = (-1, -1)
                for i in range(len(self._segments)):
                    ts, off = self._segment_max_ts(i)
                    if ts > best[0]:
                        best = (ts, off)
                self._max_ts = best
            return self._max_ts

    def files_view(self) -> LogFilesView:
        """The log's segment files and published sizes now, for a reader in another process
        (files_view.py); cheap: no I/O, a tuple per segment, under the lock."""
        from .files_view import LogFilesView, SegmentFiles

        with self._lock:
            return LogFilesView(
                self.directory,
                self.log_start_offset,
                self.log_end_offset,
                tuple(
                    SegmentFiles(
                        s.base_offset,
                        s.size,
                        s.log_file.path,
                        s.offset_index.path,
                        s.txn_index.path,
                    )
                    for s in self._segments
                ),
            )

    def aborted_txns(self, start: int, end: int, nowait: bool = False) -> list[AbortedTxn]:
        """The aborted transactions with a record in [start, end), for a read_committed read
        (``txn_index.aborted_between``: Kafka's search). Safe from reader threads. ``nowait``:
        WouldBlock when an index it needs is not yet in memory."""
        with self._try_lock if nowait else self._lock:
            if self._closed:
                return []
            i = max(0, bisect.bisect_right(self._bases, start) - 1)
            indexes = [s.txn_index for s in self._segments[i:]]
        try:
            return aborted_between((index.entries(nowait) for index in indexes), start, end)
        except OSError as e:
            raise StorageError(f"transaction index of {self.directory}: {e}") from e
