"""Scanning a segment file's record batches by their headers, with ``os.pread``.

The batch layout is documented (and its constants and structs defined) in
``headrace.record_format``. Records are never parsed here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

from headrace.record_format import (
    BATCH_HEADER_SIZE,
    HEADER_PREFIX,
    INT32,
    INT64,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
)

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
    """A header that cannot be a stored v2 batch (or runs past the end of the data), at
    file position ``position``."""

    def __init__(self, message: str, position: int = -1) -> None:
        super().__init__(message)
        self.position = position


def header_info(buf, i: int, position: int, end: int) -> BatchInfo | None:
    """The batch whose header is at ``buf[i:]`` (file position ``position``); None when the
    header cannot be a stored v2 batch or the batch runs past ``end``. The one reading of a
    header that the scan here and recovery's walk share."""
    base, length, _epoch, magic, _crc = HEADER_PREFIX.unpack_from(buf, i)
    size = LOG_OVERHEAD + length
    if size < BATCH_HEADER_SIZE or magic != MAGIC or position + size > end:
        return None
    last = base + INT32.unpack_from(buf, i + LAST_OFFSET_DELTA_OFFSET)[0]
    max_ts = INT64.unpack_from(buf, i + MAX_TIMESTAMP_OFFSET)[0]
    return BatchInfo(position, size, base, last, max_ts)


def iter_batches(
    fd: int, position: int, end: int, headers: bool = False, pread=os.pread
) -> Iterator:
    """Batches in file ``fd`` from ``position`` (a batch boundary) up to ``end``.

    Yields BatchInfo, or (BatchInfo, 61-byte header) when ``headers`` is true. Trusts sizes and
    does not check CRCs (that is recovery's job); raises BadBatch when a header is impossible
    or a batch runs past ``end``. ``pread``: how to read (``io.pread_nowait`` for a scan that
    must not wait for the disk).
    """
    buf = b""
    buf_pos = position  # file position of buf[0]
    read_size = SCAN_CHUNK
    while position < end:
        i = position - buf_pos
        if i + BATCH_HEADER_SIZE > len(buf):
            if position + BATCH_HEADER_SIZE > end:
                raise BadBatch(f"torn header at position {position}", position)
            buf = pread(fd, max(BATCH_HEADER_SIZE, min(read_size, end - position)), position)
            buf_pos = position
            i = 0
            if len(buf) < BATCH_HEADER_SIZE:
                raise BadBatch(f"short read at position {position}", position)
        info = header_info(buf, i, position, end)
        if info is None:
            raise BadBatch(f"bad batch header at position {position}", position)
        yield (info, bytes(buf[i : i + BATCH_HEADER_SIZE])) if headers else info
        position += info.size
        read_size = BATCH_HEADER_SIZE if info.size >= SCAN_CHUNK // 2 else SCAN_CHUNK
