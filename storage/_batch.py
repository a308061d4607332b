"""The few record batch (magic v2) header fields storage needs, read with struct.

Byte layout of the 61-byte header (big-endian); the batch is ``12 + batchLength`` bytes long:

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes after this field
        12     4  partitionLeaderEpoch
        16     1  magic                  = 2
        17     4  crc                    CRC-32C of bytes 21 .. end of batch
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount

Records are never parsed.
"""

from __future__ import annotations

import os
import struct
from typing import Iterator, NamedTuple

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
CRC_START = 21  # the CRC covers attributes .. end
LAST_OFFSET_DELTA_OFFSET = 23
MAX_TIMESTAMP_OFFSET = 35
MAGIC_V2 = 2

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc
PREFIX = struct.Struct(">qiibI")
LAST_OFFSET_DELTA = struct.Struct(">i")
MAX_TIMESTAMP = struct.Struct(">q")

# Scanning reads this much at a time when batches are small; after a large batch it reads just
# the next header, so skipping big batches does not read their data.
SCAN_CHUNK = 16 * 1024


class BatchInfo(NamedTuple):
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class BadBatch(Exception):
    """A header that cannot be a stored v2 batch (or runs past the end of the data)."""


def iter_batches(fd: int, position: int, end: int, headers: bool = False) -> Iterator:
    """Batches in file ``fd`` from ``position`` (a batch boundary) up to ``end``.

    Yields BatchInfo, or (BatchInfo, 61-byte header) when ``headers`` is true. Trusts sizes and
    does not check CRCs (that is recovery's job); raises BadBatch when a header is impossible
    or a batch runs past ``end``.
    """
    buf = b""
    buf_pos = position  # file position of buf[0]
    read_size = SCAN_CHUNK
    while position < end:
        i = position - buf_pos
        if i + HEADER_SIZE > len(buf):
            if position + HEADER_SIZE > end:
                raise BadBatch(f"torn header at position {position}")
            buf = os.pread(fd, max(HEADER_SIZE, min(read_size, end - position)), position)
            buf_pos = position
            i = 0
            if len(buf) < HEADER_SIZE:
                raise BadBatch(f"short read at position {position}")
        base, length, _epoch, magic, _crc = PREFIX.unpack_from(buf, i)
        size = LOG_OVERHEAD + length
        if size < HEADER_SIZE or magic != MAGIC_V2 or position + size > end:
            raise BadBatch(f"bad batch header at position {position}")
        last = base + LAST_OFFSET_DELTA.unpack_from(buf, i + LAST_OFFSET_DELTA_OFFSET)[0]
        max_ts = MAX_TIMESTAMP.unpack_from(buf, i + MAX_TIMESTAMP_OFFSET)[0]
        info = BatchInfo(position, size, base, last, max_ts)
        yield (info, bytes(buf[i:i + HEADER_SIZE])) if headers else info
        position += size
        read_size = HEADER_SIZE if size >= SCAN_CHUNK // 2 else SCAN_CHUNK
