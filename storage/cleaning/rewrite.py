"""Rewriting a group of segments into one cleaned segment.

How this works
--------------
A record survives when it has no key, its key is not in the offset map (key_map.py), or it
is the map's offset for its key; a surviving tombstone (null value) is dropped once its
timestamp is more than ``delete_retention_ms`` old. Records of aborted transactions and spent
markers go by the transaction rules (transactions.py).

A batch whose records all survive is copied byte for byte; one with some survivors is rebuilt
(same base offset, lastOffsetDelta, base timestamp, producer fields and attributes; the
surviving records' bytes copied verbatim, recompressed with the batch's own codec, new length,
count, max timestamp and CRC); one with none is dropped, except the last batch of a producer
that is still active (its header is kept with no records). Without the codecs, compressed
batches are copied unchanged. The new segment's indexes and ``.txnindex`` are written and
everything is fsynced.
"""

from __future__ import annotations

import os

from headrace.record_format import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_HEADER_SIZE,
    INT16,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    set_crc,
)

from .. import _files
from .._batch import BatchInfo
from ..segment import LogSegment
from .batches import data_records, read_batches
from .key_map import digest
from .transactions import filter_marker, is_last_of_producer


class Rules:
    """Everything that decides what survives a pass."""

    __slots__ = (
        "offsets",
        "now_ms",
        "horizon",
        "delete_retention_ms",
        "producers",
        "txns",
        "decompress",
        "compress",
    )

    def __init__(
        self, offsets, now_ms, delete_retention_ms, producers, txns, decompress, compress
    ) -> None:
        self.offsets = offsets
        self.now_ms = now_ms
        self.horizon = now_ms - delete_retention_ms  # tombstones older than this go
        self.delete_retention_ms = delete_retention_ms
        self.producers = producers
        self.txns = txns
        self.decompress = decompress
        self.compress = compress


def rewrite_group(cleaned_dir: str, group: list[tuple], rules: Rules, index_interval: int) -> int:
    """Write one group's surviving batches as a segment in ``cleaned_dir``; records removed."""
    base = group[0][0].base_offset
    out = LogSegment.create(cleaned_dir, base, index_interval, group[0][0].files)
    try:
        with out.log_file.use(wrote=True) as fd:
            return _rewrite(out, fd, group, rules)
    finally:
        out.close()


def _rewrite(out: LogSegment, fd: int, group: list[tuple], rules: Rules) -> int:
    position = 0
    written: list[BatchInfo] = []
    removed = 0
    rules.txns.kept = []
    for _seg, size, ref in group:
        for info, data in read_batches(ref, size):
            new = filter_batch(info, data, rules)
            if new is None:
                removed += INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
                continue
            batch, dropped = new
            removed += dropped
            view = memoryview(batch)
            while view:
                view = view[os.write(fd, view) :]
            max_ts = INT64.unpack_from(batch, MAX_TIMESTAMP_OFFSET)[0]
            written.append(
                BatchInfo(position, len(batch), info.base_offset, info.last_offset, max_ts)
            )
            position += len(batch)
    out.size = position
    out.deactivate()
    out.write_indexes(written)
    out.txn_index.write_all(rules.txns.kept)
    os.fsync(fd)
    for path in (out.offset_index.path, out.time_index.path):
        _files.fsync_path(path)
    return removed


def filter_batch(info: BatchInfo, data: bytes, rules: Rules):
    """(batch bytes, records dropped), or None when nothing of the batch is kept."""
    attributes = INT16.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    pid = INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
    if attributes & ATTR_CONTROL:
        return filter_marker(info, data, attributes, pid, rules)
    aborted = rules.txns.on_batch(pid, bool(attributes & ATTR_TRANSACTIONAL), info.last_offset)
    records: list
    if aborted:
        payload, records = memoryview(b""), []  # nothing kept: returns before payload is used
    else:
        walked = data_records(data, rules.decompress)
        if walked is None:
            return data, 0
        payload, records = walked
    count = INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    base_ts = INT64.unpack_from(data, BASE_TIMESTAMP_OFFSET)[0]
    log_append = attributes & ATTR_TIMESTAMP_TYPE
    batch_max_ts = INT64.unpack_from(data, MAX_TIMESTAMP_OFFSET)[0]
    kept = []
    offsets = rules.offsets
    for r in records:
        if r.key is not None:
            latest = offsets.get(digest(r.key))
            if latest is not None and info.base_offset + r.offset_delta < latest:
                continue
            if r.tombstone:
                ts = batch_max_ts if log_append else base_ts + r.timestamp_delta
                if ts < rules.horizon:
                    continue
        kept.append(r)
    if not aborted and kept and len(kept) == len(records):
        return data, 0
    if not kept:  # (a batch emptied by an earlier pass too)
        if is_last_of_producer(data, info.base_offset, False, rules.producers):
            if count == 0:
                return data, 0
            return with_records(data, b"", 0, None), count  # header kept: its sequence
        return None
    codec = attributes & ATTR_COMPRESSION_MASK
    body = b"".join(bytes(payload[r.start : r.end]) for r in kept)
    if codec:
        if rules.compress is None:
            return data, 0
        body = rules.compress(codec, body)
    max_ts = None if log_append else base_ts + max(r.timestamp_delta for r in kept)
    return with_records(data, body, len(kept), max_ts), count - len(kept)


def with_records(data: bytes, body: bytes, count: int, max_ts: int | None) -> bytes:
    """``data``'s header over a new records section: length, count, max timestamp, CRC."""
    batch = bytearray(data[:BATCH_HEADER_SIZE])
    batch += body
    INT32.pack_into(batch, 8, len(batch) - LOG_OVERHEAD)
    INT32.pack_into(batch, RECORDS_COUNT_OFFSET, count)
    if max_ts is not None:
        INT64.pack_into(batch, MAX_TIMESTAMP_OFFSET, max_ts)
    set_crc(batch)
    return bytes(batch)
