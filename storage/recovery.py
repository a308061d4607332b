"""Opening a log: loading its segments, and checking them after an unclean stop.

How this works
--------------
``load`` lists the partition directory once; a compaction swap left by a crash (swap.py) is
finished first when the listing shows one. It looks up the log's entry in the data
directory's offsets checkpoint (checkpoint.py). After a clean close (the checkpoint's end
offset, active segment and size match the files) no segment data is read, also after a crash
(recovery checks only what lies beyond the recovery point, which is the end offset then).
Otherwise the segments are recovered: ``recover_segment`` runs for the segment holding the
recovery point and each later one, in order. The walk reads the segment in large chunks and
accepts a batch only if

  * at least a 61-byte header remains and the declared size fits in the file (else: torn tail),
  * the size is at least a header, magic is 2 and the CRC-32C of bytes 21..end matches,
  * its base offset is above the previous batch's last offset (and at or above the segment's
    base offset), lastOffsetDelta >= 0, and its last offset fits the index's int32 relative
    offset.

The file is truncated after the last accepted batch and both indexes are rebuilt from the
accepted batches (an index file that already holds exactly those entries is left alone);
aborted-transaction entries whose markers are gone are dropped. When a segment was cut short
every later segment is deleted. The recovered files are fsynced and the recovery point
becomes the new log end offset. When nothing lies beyond the recovery point and nothing was
cut, there is nothing new to make durable: no fsync (and ``Log.open`` keeps the checkpoint
file when it still says the same), so recovering many idle partitions costs reads only; the
directory is fsynced only when segments were cut or deleted or rolled since the last flush.

Descriptors: segments are opened under the log's OpenFiles budget (``open_existing`` only
stats the file); a recovered segment's file is pinned while it is checked.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from headrace.record_format import BATCH_HEADER_SIZE, crc_matches

from . import _files, swap
from ._batch import BatchInfo, header_info
from .checkpoint import Checkpoint
from .open_files import OpenFiles
from .segment import INT32_MAX, LogSegment

_log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


class LoadedLog(NamedTuple):
    """What ``load`` found: the state a Log starts from."""

    segments: list[LogSegment]  # the last one active (indexes in memory)
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    cleaner_offset: int | None  # from the checkpoint, clamped to the log's offsets
    clean: bool  # opened without recovery (nothing to checkpoint)
    checkpoint: Checkpoint | None  # the checkpoint entry as read
    other_files: list[str]  # names in the directory that are not the log's


def load(
    directory: str,
    index_interval_bytes: int,
    recover: bool,
    files: OpenFiles,
    checkpoint: Callable[[], Checkpoint | None],
) -> LoadedLog:
    """Open (or create) the segments in ``directory``; recover them unless cleanly closed.
    ``checkpoint()``: the log's checkpoint entry (not asked when the directory is new: an
    entry left by a removed directory of that name says nothing about this one)."""
    interval = index_interval_bytes
    try:
        bases, others, swap_pending = _files.remove_temp_files_and_list(directory)
        if swap_pending:
            swap.complete_pending_swap(directory)
            bases, others, _ = _files.remove_temp_files_and_list(directory)
        cp = checkpoint()
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        bases, others, cp = [], [], None
    if not bases:
        base = cp.log_start_offset if cp else 0
        seg = LogSegment.create(directory, base, interval, files)
        _files.fsync_directory(directory)
        return LoadedLog([seg], base, base, base, None, True, None, others)

    segs = [LogSegment.open_existing(directory, b, interval, files) for b in bases]
    active = segs[-1]
    # Unchanged since a clean close (whose recovery point is its end): nothing lies beyond
    # the recovery point, so even after a crash there is nothing to check.
    clean = (
        cp is not None
        and cp.end_offset is not None
        and cp.end_segment == active.base_offset
        and cp.end_size == active.size
        and cp.end_offset >= active.base_offset
        and (not recover or cp.recovery_point >= cp.end_offset)
    )
    if clean:
        assert cp is not None and cp.end_offset is not None  # as ``clean`` checked
        leo = cp.end_offset
        recovery_point = min(cp.recovery_point, leo)
        # the active segment's indexes are loaded at the log's first write (Log._appendable)
    else:
        if not recover:
            _log.warning("%s: no clean-close checkpoint matches the files; recovering", directory)
        start = cp.recovery_point if cp else bases[0]
        segs, leo = _recover(directory, segs, start)
        active = segs[-1]
        active.activate()
        recovery_point = leo
    log_start = bases[0] if cp is None else max(cp.log_start_offset, segs[0].base_offset)
    log_start = min(log_start, leo)
    cleaner_offset = None
    if cp is not None and cp.cleaner_offset is not None:
        cleaner_offset = max(log_start, min(cp.cleaner_offset, leo))
    return LoadedLog(segs, log_start, leo, recovery_point, cleaner_offset, clean, cp, others)


def _recover(
    directory: str, segs: list[LogSegment], recovery_point: int
) -> tuple[list[LogSegment], int]:
    bases = [s.base_offset for s in segs]
    first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
    next_offset = segs[first].base_offset
    leo = next_offset
    cut = False
    for i in range(first, len(segs)):
        seg = segs[i]
        last, cut, _rewrote = recover_segment(seg, next_offset)
        if last is not None:
            next_offset = last + 1
        leo = next_offset if last is not None else seg.base_offset
        if cut:
            _log.warning(
                "%s: truncated segment %d at byte %d (offset %d)",
                directory,
                seg.base_offset,
                seg.size,
                leo,
            )
            for doomed in segs[i + 1 :]:
                doomed.delete()
                doomed.close()
            del segs[i + 1 :]
            break
    # Durable before the recovery point moves: the data beyond it, a truncation, and the
    # directory entries of segments rolled since the last flush or deleted here. A rebuilt
    # index needs neither: indexes are hints, checked when loaded.
    new_data = leo > recovery_point
    if cut or new_data:
        for seg in segs[first:]:
            with seg.log_file.use() as fd:
                os.fsync(fd)
    if cut or (new_data and len(segs) > first + 1):
        _files.fsync_directory(directory)
    for seg in segs[first:]:
        seg.flushed_size = seg.size
        seg.log_file.close_if_idle()  # opened for the check only: the log holds no descriptor
    return segs, leo


def iter_valid_batches(
    fd: int, size: int, segment_base: int, next_offset: int
) -> Iterator[BatchInfo]:
    """The batches of a segment file up to the first torn or invalid one."""
    pos = 0
    buf = memoryview(b"")
    buf_pos = 0
    while pos + BATCH_HEADER_SIZE <= size:
        if pos + BATCH_HEADER_SIZE > buf_pos + len(buf):
            buf = memoryview(os.pread(fd, min(READ_CHUNK, size - pos), pos))
            buf_pos = pos
            if len(buf) < BATCH_HEADER_SIZE:
                return
        i = pos - buf_pos
        info = header_info(buf, i, pos, size)
        if info is None:
            return
        bsize = info.size
        if i + bsize > len(buf):
            buf = memoryview(os.pread(fd, max(bsize, min(READ_CHUNK, size - pos)), pos))
            buf_pos, i = pos, 0
            if len(buf) < bsize:
                return
        if not crc_matches(buf[i : i + bsize]):
            return
        base, last = info.base_offset, info.last_offset
        if base < next_offset or last < base or last - segment_base > INT32_MAX:
            return
        yield info
        next_offset = last + 1
        pos += bsize


def recover_segment(seg: LogSegment, next_offset: int) -> tuple[int | None, bool, bool]:
    """Check one segment, truncate it after its last valid batch and rebuild its indexes.

    ``next_offset`` is the lowest base offset the first batch may have. Returns (the last
    valid offset or None if no batch is valid, whether the segment was cut short, whether an
    index file was rewritten).
    """
    end = 0  # end of the last valid batch
    last: int | None = None  # its last offset

    fd = seg.log_file.acquire()
    cut = False

    def walk() -> Iterator[BatchInfo]:
        nonlocal end, last
        for b in iter_valid_batches(
            fd, seg.size, seg.base_offset, max(next_offset, seg.base_offset)
        ):
            end = b.position + b.size
            last = b.last_offset
            yield b

    try:
        rewrote = seg.write_indexes(walk())
        cut = end < seg.size
        if cut:
            os.ftruncate(fd, end)
            seg.size = end
    finally:
        seg.log_file.release(wrote=cut)
    # aborted transactions whose markers did not survive (the broker re-adds lost ones)
    if seg.txn_index.truncate_from(seg.base_offset if last is None else last + 1):
        rewrote = True
    return last, cut, rewrote
