"""Record batches, magic v2: the produce/fetch hot path over headers, a builder, a decoder.

How this works
--------------
The byte layout of a batch and of its records is documented once, in
``headrace.record_format``, which also holds the header parse (``read_batch_header``,
``BatchHeader``) and the CRC-32C checks; they are re-exported here.

The hot path (``iter_batches``, ``crc_matches``, ``set_base_offset``) reads only headers and
never copies records. The CRC does not cover baseOffset, so the broker rewrites it in place
(``set_base_offset``) without recomputing it. ``build_batch`` and ``decode_records`` handle
individual records for tests, control batches and compaction; compressed records sections go
through ``headrace.protocol.compression``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from headrace.record_format import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_HEADER_SIZE,
    HEADER,
    INT16,
    INT64,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    compute_crc,
    crc_matches,
    read_batch_header,
    read_varint,
    set_crc,
)

from .compression import COMPRESSION_NONE, UnsupportedCompressionError, compress, decompress

__all__ = [
    "BatchHeader",
    "CorruptRecordError",
    "Record",
    "read_batch_header",
    "iter_batches",
    "crc_matches",
    "compute_crc",
    "set_base_offset",
    "set_log_append_time",
    "build_batch",
    "decode_records",
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
]

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

# Bound here once: a method call on an imported name is compiled as an attribute load that
# builds a bound method on every call.
_pack_int64 = INT64.pack_into


def iter_batches(records, start: int = 0) -> Iterator[tuple[int, int, BatchHeader]]:
    """Yield ``(pos, size, header)`` for each batch in ``records`` (bytes-like).

    Raises CorruptRecordError for magic != 2, a batchLength below the minimum, or a batch
    (or header) running past the end. CRCs are not checked here (see ``crc_matches``).
    """
    end = len(records)
    pos = start
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"{end - pos} bytes left at {pos}, less than a batch header", pos, truncated=True
            )
        h = make(unpack(records, pos))
        if h.magic != MAGIC:
            raise CorruptRecordError(f"batch at {pos} has magic {h.magic}, expected 2", pos)
        if h.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at {pos} has batchLength {h.batch_length} < {MIN_BATCH_LENGTH}", pos
            )
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptRecordError(
                f"batch at {pos} of {size} bytes runs past the end ({end})", pos, truncated=True
            )
        yield pos, size, h
        pos += size


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Write ``base_offset`` into the batch at ``buf[pos:]`` in place (bytearray/memoryview)."""
    _pack_int64(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_log_append_time(buf, pos: int, size: int, timestamp: int) -> None:
    """Mark the batch at ``buf[pos:pos+size]`` as log-append time with ``timestamp`` as its
    max timestamp (readers take it as every record's timestamp), in place; the CRC is
    recomputed, as both fields are covered by it."""
    (attributes,) = INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | ATTR_TIMESTAMP_TYPE)
    INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    set_crc(memoryview(buf)[pos : pos + size])


# -- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a user sees it. ``timestamp`` None means "now" when building."""

    key: bytes | None = None
    value: bytes | None = None
    headers: tuple | list = field(default_factory=tuple)
    timestamp: int | None = None


def _zigzag_varint(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)
    z &= 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _encode_record(out: bytearray, offset_delta: int, ts_delta: int, r: Record) -> None:
    body = bytearray()
    body.append(0)  # record attributes, unused
    _zigzag_varint(body, ts_delta)
    _zigzag_varint(body, offset_delta)
    for part in (r.key, r.value):
        if part is None:
            _zigzag_varint(body, -1)
        else:
            _zigzag_varint(body, len(part))
            body += part
    _zigzag_varint(body, len(r.headers))
    for hk, hv in r.headers:
        hkb = hk.encode("utf-8")
        _zigzag_varint(body, len(hkb))
        body += hkb
        if hv is None:
            _zigzag_varint(body, -1)
        else:
            _zigzag_varint(body, len(hv))
            body += hv
    _zigzag_varint(out, len(body))
    out += body


def build_batch(
    records,
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
) -> bytes:
    """Encode ``records`` (``Record`` instances, at least one) as one v2 batch."""
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    now = int(time.time() * 1000)
    stamps = [now if r.timestamp is None else r.timestamp for r in records]
    base_ts = stamps[0]
    body = bytearray()
    for i, (r, ts) in enumerate(zip(records, stamps)):
        _encode_record(body, i, ts - base_ts, r)
    payload = compress(compression, bytes(body)) if compression else body
    attributes = (
        (compression & ATTR_COMPRESSION_MASK)
        | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
        | (ATTR_TRANSACTIONAL if is_transactional else 0)
        | (ATTR_CONTROL if is_control else 0)
    )
    batch = bytearray(BATCH_HEADER_SIZE)
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        len(records) - 1,
        base_ts,
        max(stamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch += payload
    set_crc(batch)
    return bytes(batch)


def decode_records(batch_view) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Decode one batch into ``(offset, timestamp, key, value, headers)`` tuples.

    ``headers`` is a list of ``(str, bytes | None)``. With log-append time, every record's
    timestamp is the batch's maxTimestamp.
    """
    mv = memoryview(batch_view)
    h = read_batch_header(mv)
    if h.magic != MAGIC:
        raise CorruptRecordError(f"magic {h.magic}, expected 2")
    size = h.batch_length + LOG_OVERHEAD
    if h.batch_length < MIN_BATCH_LENGTH or size > len(mv):
        raise CorruptRecordError(f"batchLength {h.batch_length} does not fit {len(mv)} bytes")
    payload = mv[BATCH_HEADER_SIZE:size]
    if h.compression:
        try:
            payload = memoryview(decompress(h.compression, payload))
        except UnsupportedCompressionError:
            raise
        except Exception as e:  # codec libraries raise their own types
            raise CorruptRecordError(f"cannot decompress batch: {e}") from e
    if h.records_count < 0 or h.records_count > len(payload):
        raise CorruptRecordError(f"records count {h.records_count} does not fit the payload")
    log_append = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    out = []
    pos, end = 0, len(payload)
    for _ in range(h.records_count):
        length, pos = read_varint(payload, pos, end, 5)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError(f"record length {length} runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos, rec_end)
        offset_delta, pos = read_varint(payload, pos, rec_end, 5)
        key, pos = _read_bytes(payload, pos, rec_end)
        value, pos = _read_bytes(payload, pos, rec_end)
        nh, pos = read_varint(payload, pos, rec_end, 5)
        if nh < 0 or nh > rec_end - pos:
            raise CorruptRecordError(f"header count {nh} does not fit the record")
        headers = []
        for _ in range(nh):
            hk, pos = _read_bytes(payload, pos, rec_end)
            if hk is None:
                raise CorruptRecordError("null header key")
            hv, pos = _read_bytes(payload, pos, rec_end)
            try:
                headers.append((hk.decode("utf-8"), hv))
            except UnicodeDecodeError as e:
                raise CorruptRecordError(f"header key is not UTF-8: {e}") from None
        if pos != rec_end:
            raise CorruptRecordError("record length does not match its contents")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append((h.base_offset + offset_delta, ts, key, value, headers))
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last record")
    return out


def _read_bytes(buf, pos: int, end: int):
    n, pos = read_varint(buf, pos, end, 5)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(f"length {n} runs past the record")
    return bytes(buf[pos : pos + n]), pos + n
