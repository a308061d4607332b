"""Builds valid record batches (magic v2) for the storage tests, without the protocol package."""

from __future__ import annotations

import random
import struct

import crc32c

_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (bytes 21..60)


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def make_batch(base_offset: int, count: int = 1, *, timestamp: int = 1_000,
               max_timestamp: int | None = None, value_size: int = 10,
               rng: random.Random | None = None) -> bytes:
    """A v2 batch of ``count`` records with base offset ``base_offset`` and a correct CRC."""
    rng = rng or random.Random(base_offset)
    if max_timestamp is None:
        max_timestamp = timestamp + count - 1
    records = bytearray()
    for i in range(count):
        value = rng.randbytes(value_size)
        body = (b"\x00" + _varint(min(i, max_timestamp - timestamp)) + _varint(i)
                + _varint(-1) + _varint(len(value)) + value + _varint(0))
        records += _varint(len(body)) + body
    tail = _TAIL.pack(0, count - 1, timestamp, max_timestamp, -1, -1, -1, count) + records
    crc = crc32c.crc32c(tail)
    batch_length = 4 + 1 + 4 + len(tail)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + tail


def last_offset(batch: bytes) -> int:
    base = struct.unpack_from(">q", batch, 0)[0]
    return base + struct.unpack_from(">i", batch, 23)[0]


def max_ts(batch: bytes) -> int:
    return struct.unpack_from(">q", batch, 35)[0]


def split_batches(data: bytes) -> list[bytes]:
    """Cut concatenated stored batches into single batches."""
    out = []
    pos = 0
    while pos < len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        out.append(bytes(data[pos:pos + size]))
        pos += size
    assert pos == len(data), "data does not end on a batch boundary"
    return out


class Writer:
    """Appends generated batches to a Log and remembers them (the reference model)."""

    def __init__(self, log, seed: int = 0) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.batches: list[bytes] = []  # in offset order

    def append(self, count: int | None = None, value_size: int | None = None,
               timestamp: int | None = None) -> bytes:
        rng = self.rng
        count = count or rng.randint(1, 5)
        value_size = rng.randint(0, 200) if value_size is None else value_size
        base = self.log.log_end_offset
        ts = timestamp if timestamp is not None else 1_000 + base
        b = make_batch(base, count, timestamp=ts, value_size=value_size, rng=rng)
        self.log.append(b, base, base + count - 1, max_ts(b))
        self.batches.append(b)
        return b

    def append_many(self, n: int, **kw) -> None:
        for _ in range(n):
            self.append(**kw)


def make_keyed_batch(base_offset: int, records, *, base_timestamp: int = 1_000,
                     compression: int = 0, compress=None, producer_id: int = -1,
                     producer_epoch: int = -1, base_sequence: int = -1,
                     transactional: bool = False, control: bool = False) -> bytes:
    """A v2 batch of ``records``: (key or None, value or None, timestamp) triples.

    ``compression`` sets the attribute bits; ``compress(data)`` compresses the records.
    """
    body = bytearray()
    for i, (key, value, ts) in enumerate(records):
        rec = bytearray(b"\x00") + _varint(ts - base_timestamp) + _varint(i)
        for part in (key, value):
            if part is None:
                rec += _varint(-1)
            else:
                rec += _varint(len(part)) + part
        rec += _varint(0)
        body += _varint(len(rec)) + rec
    payload = compress(bytes(body)) if compression else bytes(body)
    max_timestamp = max(ts for _, _, ts in records)
    attributes = compression | (0x10 if transactional else 0) | (0x20 if control else 0)
    tail = _TAIL.pack(attributes, len(records) - 1, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, len(records)) + payload
    crc = crc32c.crc32c(tail)
    return struct.pack(">qiibI", base_offset, 9 + len(tail), 0, 2, crc) + tail


def make_marker(base_offset: int, producer_id: int, epoch: int, commit: bool,
                timestamp: int = 1_000) -> bytes:
    """A transaction marker (control batch): key int16 version, int16 type (0 abort, 1 commit);
    value int16 version, int32 coordinator epoch."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return make_keyed_batch(base_offset, [(key, value, timestamp)], base_timestamp=timestamp,
                            producer_id=producer_id, producer_epoch=epoch, transactional=True,
                            control=True)
