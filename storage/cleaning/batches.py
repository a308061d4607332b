"""What the cleaner reads of a record batch: header fields, and the batches of a segment.

Batches are opaque bytes to the rest of storage; the cleaner reads a few header fields (v2
layout, big-endian) and walks the records of a data batch (_records.py) to find keys.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from headrace.record_format import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    INT16,
    INT32,
    INT64,
    RECORDS_COUNT_OFFSET,
)

from .._batch import BadBatch, iter_batches
from .._records import walk_records

_log = logging.getLogger(__name__)

# (codec id, data) -> data: the caller's compressor, and its decompressor (given a view)
Codec = Callable[[int, bytes], bytes]
Decompressor = Callable[[int, bytes | memoryview], bytes]

_READ_PER_PIN = 1 << 20


def read_batches(file, size: int):
    """(BatchInfo, batch bytes) of a segment file (a CachedFile), up to ``size``. The file is
    pinned while about a MiB of batches is read, not while the caller works on them."""
    position = 0
    while position < size:
        chunk = []
        read = 0
        with file.use() as fd:
            for info in iter_batches(fd, position, size):
                data = os.pread(fd, info.size, info.position)
                if len(data) != info.size:
                    raise BadBatch(f"short read at {info.position}")
                chunk.append((info, data))
                read += info.size
                if read >= _READ_PER_PIN:
                    break
        if not chunk:
            return
        yield from chunk
        last = chunk[-1][0]
        position = last.position + last.size


def data_records(data: bytes, decompress: Decompressor | None) -> tuple[memoryview, list] | None:
    """(records section, walked records) of a data batch, or None to treat it as opaque."""
    attributes = INT16.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    if attributes & ATTR_CONTROL:
        return None
    count = INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    payload = memoryview(data)[BATCH_HEADER_SIZE:]
    codec = attributes & ATTR_COMPRESSION_MASK
    try:
        if codec:
            if decompress is None:
                return None
            payload = memoryview(decompress(codec, payload))
        return payload, list(walk_records(payload, count))
    except Exception as e:  # codec libraries raise their own types; BadRecords
        _log.warning(
            "compaction keeps an unreadable batch at offset %d as it is: %s",
            INT64.unpack_from(data, 0)[0],
            e,
        )
        return None
