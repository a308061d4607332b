"""Checking segments after an unclean stop.

How this works
--------------
``Log.open(recover=True)`` calls ``recover_segment`` for the segment holding the recovery
point and each later one, in order. The walk reads the segment in large chunks and accepts a
batch only if

  * at least a 61-byte header remains and the declared size fits in the file (else: torn tail),
  * the size is at least a header, magic is 2 and the CRC-32C of bytes 21..end matches,
  * its base offset is above the previous batch's last offset (and at or above the segment's
    base offset), lastOffsetDelta >= 0, and its last offset fits the index's int32 relative
    offset.

The file is truncated after the last accepted batch and both indexes are rebuilt from the
accepted batches; aborted-transaction entries whose markers are gone are dropped. The caller deletes every later segment when a segment was cut short.
"""

from __future__ import annotations

import os
from typing import Iterator

import crc32c

from ._batch import (
    CRC_START,
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_TIMESTAMP,
    MAX_TIMESTAMP_OFFSET,
    PREFIX,
    BatchInfo,
)
from .segment import INT32_MAX, LogSegment

READ_CHUNK = 1 << 20


def iter_valid_batches(fd: int, size: int, segment_base: int,
                       next_offset: int) -> Iterator[BatchInfo]:
    """The batches of a segment file up to the first torn or invalid one."""
    pos = 0
    buf = memoryview(b"")
    buf_pos = 0
    while pos + HEADER_SIZE <= size:
        if pos + HEADER_SIZE > buf_pos + len(buf):
            buf = memoryview(os.pread(fd, min(READ_CHUNK, size - pos), pos))
            buf_pos = pos
            if len(buf) < HEADER_SIZE:
                return
        i = pos - buf_pos
        base, length, _epoch, magic, crc = PREFIX.unpack_from(buf, i)
        bsize = LOG_OVERHEAD + length
        if bsize < HEADER_SIZE or magic != MAGIC_V2 or pos + bsize > size:
            return
        if i + bsize > len(buf):
            buf = memoryview(os.pread(fd, max(bsize, min(READ_CHUNK, size - pos)), pos))
            buf_pos, i = pos, 0
            if len(buf) < bsize:
                return
        if crc32c.crc32c(buf[i + CRC_START:i + bsize]) != crc:
            return
        delta = LAST_OFFSET_DELTA.unpack_from(buf, i + LAST_OFFSET_DELTA_OFFSET)[0]
        last = base + delta
        if base < next_offset or delta < 0 or last - segment_base > INT32_MAX:
            return
        max_ts = MAX_TIMESTAMP.unpack_from(buf, i + MAX_TIMESTAMP_OFFSET)[0]
        yield BatchInfo(pos, bsize, base, last, max_ts)
        next_offset = last + 1
        pos += bsize


def recover_segment(seg: LogSegment, next_offset: int) -> tuple[int | None, bool]:
    """Check one segment, truncate it after its last valid batch and rebuild its indexes.

    ``next_offset`` is the lowest base offset the first batch may have. Returns (the last
    valid offset or None if no batch is valid, whether the segment was cut short).
    """
    state = [0, None]  # end of the last valid batch, its last offset

    def walk() -> Iterator[BatchInfo]:
        for b in iter_valid_batches(seg.log_ref.fd, seg.size, seg.base_offset,
                                    max(next_offset, seg.base_offset)):
            state[0] = b.position + b.size
            state[1] = b.last_offset
            yield b

    seg.write_indexes(walk())
    end, last = state
    cut = end < seg.size
    if cut:
        os.ftruncate(seg.log_ref.fd, end)
        seg.size = end
    # aborted transactions whose markers did not survive (the broker re-adds lost ones)
    seg.txn_index.truncate_from(seg.base_offset if last is None else last + 1)
    return last, cut
