"""Record batches, magic v2: header views over memoryviews, plus a builder and a decoder.

How this works
--------------
A ``records`` field is a sequence of record batches. Each batch starts with a fixed 61-byte
header (offsets below, all big-endian), followed by the records, possibly compressed::

    @0  baseOffset int64         @23 lastOffsetDelta int32   @51 producerEpoch int16
    @8  batchLength int32        @27 baseTimestamp int64     @53 baseSequence int32
    @12 partitionLeaderEpoch i32 @35 maxTimestamp int64      @57 recordsCount int32
    @16 magic int8 (= 2)         @43 producerId int64
    @17 crc uint32               (CRC-32C of bytes @21 to the end of the batch)
    @21 attributes int16: bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control,
                          6 delete horizon

``batchLength`` counts the bytes after itself, so a batch occupies ``batchLength + 12``
bytes. The CRC does not cover baseOffset, batchLength or partitionLeaderEpoch: the broker
rewrites ``baseOffset`` in place (``set_base_offset``) without recomputing it.

The hot path (``iter_batches``, ``read_batch_header``, ``crc_matches``, ``set_base_offset``)
reads only headers and never copies records. ``build_batch`` and ``decode_records`` handle
individual records (varint layout below) for tests, control batches and compaction::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint (-1 null), key, valueLength varint (-1 null), value,
    headerCount varint, then per header: keyLength varint, key (UTF-8),
    valueLength varint (-1 null), value

(varints are zigzag-encoded signed integers, 7 bits per byte, little-endian groups.)
Compression codecs other than gzip are imported on first use: zstandard, lz4.frame,
cramjam or python-snappy (Kafka's snappy is xerial-framed; raw snappy is accepted on read).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

__all__ = [
    "BatchHeader", "CorruptRecordError", "UnsupportedCompressionError", "Record",
    "read_batch_header", "iter_batches", "crc_matches", "compute_crc", "set_base_offset",
    "set_log_append_time",
    "build_batch", "decode_records", "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "MIN_BATCH_LENGTH",
    "COMPRESSION_NONE", "COMPRESSION_GZIP", "COMPRESSION_SNAPPY", "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD", "available_compressions", "compress", "decompress",
]

# Byte offsets of the header fields.
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
BATCH_HEADER_SIZE = 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC = 2

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_ATTR_COMPRESSION_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


class CorruptRecordError(ValueError):
    """A record batch is malformed. ``pos`` is where the bad batch starts; ``truncated`` is True
    when the only problem is that the input ends inside it (a torn tail)."""

    def __init__(self, message: str, pos: int = 0, truncated: bool = False):
        super().__init__(message)
        self.pos = pos
        self.truncated = truncated


class UnsupportedCompressionError(ValueError):
    """The compression codec is unknown or its module is not installed."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & _ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & _ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at 2^31-1), or -1 without a producer sequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_batch_header(buf, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``buf[pos:]``; CorruptRecordError if fewer than 61 bytes."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"{len(buf) - pos} bytes left at {pos}, a batch header needs {BATCH_HEADER_SIZE}",
            pos, truncated=True,
        )
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def iter_batches(records, start: int = 0) -> Iterator[tuple[int, int, BatchHeader]]:
    """Yield ``(pos, size, header)`` for each batch in ``records`` (bytes-like).

    Raises CorruptRecordError for magic != 2, a batchLength below the minimum, or a batch
    (or header) running past the end. CRCs are not checked here (see ``crc_matches``).
    """
    end = len(records)
    pos = start
    unpack = _HEADER.unpack_from
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"{end - pos} bytes left at {pos}, less than a batch header", pos, truncated=True
            )
        h = BatchHeader._make(unpack(records, pos))
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


def _crc32c_fn(data) -> int:
    """CRC-32C via the ``crc32c`` package, imported on first use (it is slow to import)."""
    global _crc32c_fn
    from crc32c import crc32c

    _crc32c_fn = crc32c
    return crc32c(data)


def compute_crc(batch_view) -> int:
    """CRC-32C of the batch's bytes from attributes to the end."""
    return _crc32c_fn(memoryview(batch_view)[ATTRIBUTES_OFFSET:])


def crc_matches(batch_view) -> bool:
    """Whether the stored CRC of the batch (exactly one batch) matches its contents."""
    mv = memoryview(batch_view)
    if len(mv) < BATCH_HEADER_SIZE:
        return False
    (stored,) = _UINT32.unpack_from(mv, CRC_OFFSET)
    return _crc32c_fn(mv[ATTRIBUTES_OFFSET:]) == stored


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Write ``base_offset`` into the batch at ``buf[pos:]`` in place (bytearray/memoryview)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_log_append_time(buf, pos: int, size: int, timestamp: int) -> None:
    """Mark the batch at ``buf[pos:pos+size]`` as log-append time with ``timestamp`` as its
    max timestamp (readers take it as every record's timestamp), in place; the CRC is
    recomputed, as both fields are covered by it."""
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | _ATTR_TIMESTAMP_TYPE)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(memoryview(buf)[pos : pos + size]))


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


def _read_varint(buf, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    z = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError("truncated varint in record")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    raise CorruptRecordError("varint too long in record")


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
        (compression & _ATTR_COMPRESSION_MASK)
        | (_ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
        | (_ATTR_TRANSACTIONAL if is_transactional else 0)
        | (_ATTR_CONTROL if is_control else 0)
    )
    batch = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        batch, 0, base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch, MAGIC, 0, attributes, len(records) - 1, base_ts, max(stamps),
        producer_id, producer_epoch, base_sequence, len(records),
    )
    batch += payload
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch))
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
        length, pos = _read_varint(payload, pos, end, 5)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError(f"record length {length} runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(payload, pos, rec_end)
        offset_delta, pos = _read_varint(payload, pos, rec_end, 5)
        key, pos = _read_bytes(payload, pos, rec_end)
        value, pos = _read_bytes(payload, pos, rec_end)
        nh, pos = _read_varint(payload, pos, rec_end, 5)
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
    n, pos = _read_varint(buf, pos, end, 5)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(f"length {n} runs past the record")
    return bytes(buf[pos : pos + n]), pos + n


# -- compression ------------------------------------------------------------------------------

DECOMPRESSED_MAX = 64 * 1024 * 1024  # the most a batch's records may decompress to
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_raw():
    try:
        import cramjam

        return (
            lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
            lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
        )
    except ImportError:
        pass
    try:
        import snappy

        return snappy.compress, snappy.decompress
    except ImportError:
        raise UnsupportedCompressionError("snappy needs cramjam or python-snappy") from None


def _snappy_compress(data: bytes) -> bytes:
    compress, _ = _snappy_raw()
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = compress(data[i : i + _XERIAL_BLOCK])
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _too_large(limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"records decompress to more than {limit} bytes")


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (a varint at its start)."""
    value = shift = 0
    for b in block[:5]:
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
    raise CorruptRecordError("snappy block without a valid length")


def _snappy_decompress(data, limit: int) -> bytes:
    _, decompress = _snappy_raw()
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_length(data) > limit:
            raise _too_large(limit)
        return decompress(data)
    pos, out = 16, bytearray()
    while pos < len(data):
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("xerial snappy block runs past the data")
        block = data[pos : pos + n]
        if len(out) + _snappy_length(block) > limit:
            raise _too_large(limit)
        out += decompress(block)
        pos += n
    return bytes(out)


def _gzip():
    import gzip
    import zlib

    def decompress(data, limit: int) -> bytes:
        out, rest = bytearray(), bytes(data)
        while rest:  # a stream may hold several gzip members
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += d.decompress(rest, limit + 1 - len(out))
            if len(out) > limit or d.unconsumed_tail:
                raise _too_large(limit)
            if not d.eof:
                raise CorruptRecordError("gzip data ends early")
            rest = d.unused_data
        return bytes(out)

    return (lambda b: gzip.compress(bytes(b))), decompress


def _lz4():
    try:
        import lz4.frame as f
    except ImportError:
        raise UnsupportedCompressionError("lz4 needs the lz4 package") from None
    def decompress(data, limit: int) -> bytes:
        d = f.LZ4FrameDecompressor()
        out = d.decompress(bytes(data), max_length=limit + 1)
        if len(out) > limit or not d.needs_input:
            raise _too_large(limit)
        return out

    return (
        lambda b: f.compress(
            bytes(b), block_size=f.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, store_size=False,
        ),
        decompress,
    )


def _zstd():
    try:
        import zstandard
    except ImportError:
        raise UnsupportedCompressionError("zstd needs the zstandard package") from None

    def decompress(data, limit: int) -> bytes:
        with zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True) as r:
            out = r.read(limit + 1)
        if len(out) > limit:
            raise _too_large(limit)
        return out

    return (lambda b: zstandard.ZstdCompressor().compress(bytes(b))), decompress


_CODEC_LOADERS = {
    COMPRESSION_GZIP: _gzip,
    COMPRESSION_SNAPPY: lambda: (_snappy_compress, _snappy_decompress),
    COMPRESSION_LZ4: _lz4,
    COMPRESSION_ZSTD: _zstd,
}
_codecs: dict = {}


def _codec(compression: int):
    c = _codecs.get(compression)
    if c is None:
        loader = _CODEC_LOADERS.get(compression)
        if loader is None:
            raise UnsupportedCompressionError(f"unknown compression type {compression}")
        if compression == COMPRESSION_SNAPPY:
            _snappy_raw()  # fail early when no module is installed
        c = _codecs[compression] = loader()
    return c


def compress(compression: int, data: bytes) -> bytes:
    """Compress a batch's records section with Kafka's codec ``compression`` (1-4)."""
    return _codec(compression)[0](data)


def decompress(compression: int, data, limit: int = DECOMPRESSED_MAX) -> bytes:
    """The records section of a batch compressed with codec ``compression`` (1-4).

    Output beyond ``limit`` bytes raises CorruptRecordError before it is produced, so a small
    batch that inflates to gigabytes (a compression bomb) costs no more than ``limit``.
    """
    return _codec(compression)[1](data, limit)


def available_compressions() -> list[int]:
    """Compression types whose modules are importable here (none and gzip always)."""
    out = [COMPRESSION_NONE]
    for c in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        try:
            _codec(c)
        except UnsupportedCompressionError:
            continue
        out.append(c)
    return out
