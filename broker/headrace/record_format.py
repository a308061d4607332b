"""Kafka's record format (record batch magic v2): byte layout, header parse, CRC, varints.

The one module both ``headrace.protocol`` and ``headrace.storage`` may import; it imports
nothing from the project.

Batch header
------------
A batch is a fixed 61-byte header followed by its records section (compressed or not). All
fields are big-endian::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes after this field: the batch is 12 + batchLength
        12     4  partitionLeaderEpoch
        16     1  magic                  = 2
        17     4  crc                    CRC-32C of bytes 21 .. end of the batch
        21     2  attributes             bits 0-2 compression, 3 timestamp type (1: log append
                                         time), 4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount

The CRC does not cover baseOffset, batchLength or partitionLeaderEpoch, so a broker can assign
offsets by rewriting baseOffset in place.

Records
-------
Each record in the (uncompressed) records section::

    length          varint   bytes after this field
    attributes      int8     unused
    timestampDelta  varlong  added to the batch's baseTimestamp
    offsetDelta     varint   added to the batch's baseOffset
    keyLength       varint   -1: null key
    key             bytes
    valueLength     varint   -1: null value (a tombstone)
    value           bytes
    headerCount     varint, then per header: keyLength varint, key (UTF-8),
                    valueLength varint (-1 null), value

Varints here are zigzag-encoded signed integers, 7 bits per byte, least significant group
first (at most 5 bytes for a varint, 10 for a varlong). The request/response codec's unsigned
varints (``read_uvarint``, ``uvarint_bytes``) are the same groups without zigzag, at most 5 bytes.
"""

from __future__ import annotations

import struct
import sys
from typing import NamedTuple

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

CRC_START = ATTRIBUTES_OFFSET  # the CRC covers attributes .. end of batch
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

HEADER = struct.Struct(">qiibIhiqqqhii")  # every header field, in order
HEADER_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, leader epoch, magic, crc
assert HEADER.size == BATCH_HEADER_SIZE
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")


class CorruptRecordError(ValueError):
    """Bytes that break the record format (a batch, a record or a varint). ``pos`` is where
    the bad batch starts; ``truncated`` is True when the only problem is that the input ends
    inside it (a torn tail)."""

    def __init__(self, message: str, pos: int = 0, truncated: bool = False):
        super().__init__(message)
        self.pos = pos
        self.truncated = truncated


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
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

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
            pos,
            truncated=True,
        )
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


# -- CRC-32C -----------------------------------------------------------------------------------


def _crc32c(data) -> int:
    """CRC-32C by the ``crc32c`` package, loaded on first use."""
    global _crc32c
    _crc32c = _crc32c_function()
    return _crc32c(data)


def _crc32c_function():
    """The ``crc32c`` package's C function. Its C module (``crc32c._crc32c``) is loaded alone:
    the package's ``__init__`` reads the package's version with ``importlib.metadata``, some
    14 ms of a broker's first produce, against 0.4 ms for the C module."""
    from importlib.machinery import PathFinder
    from importlib.util import find_spec, module_from_spec

    package = find_spec("crc32c")
    spec = package and PathFinder.find_spec("crc32c._crc32c", package.submodule_search_locations)
    if spec is None or spec.loader is None or "crc32c._crc32c" in sys.modules:
        from crc32c import crc32c  # laid out otherwise, or already imported

        return crc32c
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.crc32c


def compute_crc(batch_view) -> int:
    """CRC-32C of the batch's bytes from attributes to the end."""
    return _crc32c(memoryview(batch_view)[CRC_START:])


def crc_matches(batch_view) -> bool:
    """Whether the stored CRC of the batch (exactly one batch) matches its contents."""
    mv = memoryview(batch_view)
    if len(mv) < BATCH_HEADER_SIZE:
        return False
    (stored,) = UINT32.unpack_from(mv, CRC_OFFSET)
    return _crc32c(mv[CRC_START:]) == stored


def set_crc(batch) -> None:
    """Compute and store the CRC of ``batch`` (exactly one writable batch), in place."""
    UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch))


# -- varints -----------------------------------------------------------------------------------


def read_varint(buf, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at ``buf[pos:end]``, at most ``max_bytes``
    long (5 for a varint, 10 for a varlong)."""
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


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """(value, next position) of the unsigned varint (at most 5 bytes) at ``buf[pos:]``."""
    value = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError("truncated unsigned varint", truncated=True)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise CorruptRecordError("unsigned varint longer than 5 bytes")


def uvarint_bytes(n: int) -> bytes:
    """``n`` (>= 0) as an unsigned varint."""
    if n < 0:
        raise ValueError(f"negative varint {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
