"""Record batch v2: header views, CRC, iteration, in-place offsets, build/decode per codec."""

import struct

import pytest

from headrace.protocol.compression import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD,
    UnsupportedCompressionError, available_compressions,
)
from headrace.protocol.records import (
    BATCH_HEADER_SIZE, CorruptRecordError, Record, build_batch, compute_crc, crc_matches,
    decode_records, iter_batches, read_batch_header, set_base_offset,
)

RECORDS = [
    Record(b"k1", b"v" * 300, [("h1", b"a"), ("h2", None)], timestamp=1_700_000_000_000),
    Record(None, b"value-2", timestamp=1_700_000_000_250),
    Record(b"k3", None, timestamp=1_699_999_999_000),
    Record(b"", b"", [("", b"")], timestamp=1_700_000_000_001),
]


@pytest.mark.parametrize("compression", available_compressions())
def test_build_decode_round_trip(compression):
    batch = build_batch(RECORDS, base_offset=100, compression=compression, producer_id=7,
                        producer_epoch=2, base_sequence=40, partition_leader_epoch=3)
    h = read_batch_header(batch)
    assert (h.magic, h.compression, h.records_count, h.last_offset_delta) == (2, compression, 4, 3)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (7, 2, 40, 3)
    assert h.base_timestamp == 1_700_000_000_000 and h.max_timestamp == 1_700_000_000_250
    assert h.size == len(batch) and h.last_offset == 103 and h.last_sequence == 43
    assert crc_matches(batch)
    got = decode_records(memoryview(batch))
    assert got == [(100 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(RECORDS)]


def test_required_codecs_available():
    assert {COMPRESSION_NONE, COMPRESSION_GZIP} <= set(available_compressions())


def test_attribute_flags():
    b = build_batch([Record(b"k", b"v", timestamp=5)], is_transactional=True, is_control=True, timestamp_type=1)
    h = read_batch_header(b)
    assert h.is_transactional and h.is_control and h.timestamp_type == 1 and h.compression == 0
    assert decode_records(b)[0][1] == h.max_timestamp


def test_exact_layout():
    b = build_batch([Record(b"k", b"v", timestamp=10)], base_offset=0)
    # one record: length 8 (zigzag 0x10), attributes 0, ts delta 0, offset delta 0, key len 1 'k', value len 1 'v', 0 headers
    record = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + b"\x02" + b"v" + b"\x00"
    assert b[BATCH_HEADER_SIZE:] == record
    assert struct.unpack_from(">i", b, 8)[0] == len(b) - 12
    assert b[16] == 2


def test_crc_detects_flipped_bit():
    b = bytearray(build_batch(RECORDS))
    assert crc_matches(b)
    for pos in (21, 30, 60, len(b) - 1):
        b[pos] ^= 0x01
        assert not crc_matches(b)
        b[pos] ^= 0x01
    assert crc_matches(b)


def test_set_base_offset_keeps_crc_and_updates_header():
    b = bytearray(build_batch(RECORDS) * 2)
    size = len(b) // 2
    set_base_offset(b, size, 12345)
    set_base_offset(memoryview(b), 0, 9)
    assert [h.base_offset for _, _, h in iter_batches(b)] == [9, 12345]
    assert crc_matches(memoryview(b)[:size]) and crc_matches(memoryview(b)[size:])
    assert decode_records(memoryview(b)[size:])[0][0] == 12345


def test_iter_batches_positions():
    one = build_batch(RECORDS)
    two = build_batch([Record(b"x", b"y", timestamp=1)], compression=COMPRESSION_GZIP)
    buf = one + two + one
    assert [(p, s) for p, s, _ in iter_batches(buf)] == [(0, len(one)), (len(one), len(two)),
                                                        (len(one) + len(two), len(one))]
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 11, 60, 61, 100])
def test_iter_batches_truncated(cut):
    one = build_batch(RECORDS)
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(one + one[:cut]))
    assert e.value.truncated and e.value.pos == len(one)


def test_iter_batches_bad_magic_and_length():
    b = bytearray(build_batch(RECORDS))
    b[16] = 1
    with pytest.raises(CorruptRecordError, match="magic") as e:
        list(iter_batches(b))
    assert not e.value.truncated
    b[16] = 2
    struct.pack_into(">i", b, 8, 48)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        list(iter_batches(b))


def test_decode_records_rejects_garbage():
    b = bytearray(build_batch(RECORDS))
    b[BATCH_HEADER_SIZE] = 0x7F  # first record length
    with pytest.raises(CorruptRecordError):
        decode_records(b)
    with pytest.raises(CorruptRecordError):
        decode_records(b[:40])


def test_unknown_compression():
    with pytest.raises(UnsupportedCompressionError):
        build_batch(RECORDS, compression=6)


def test_snappy_reads_raw_blocks_too():
    if COMPRESSION_SNAPPY not in available_compressions():
        pytest.skip("no snappy module")
    from headrace.protocol import compression as r
    compress, _ = r._snappy_raw()
    plain = build_batch(RECORDS)
    body = compress(plain[BATCH_HEADER_SIZE:])
    b = bytearray(plain[:BATCH_HEADER_SIZE]) + body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, COMPRESSION_SNAPPY)
    struct.pack_into(">I", b, 17, compute_crc(b))
    assert [x[3] for x in decode_records(b)] == [x.value for x in RECORDS]


def test_lz4_and_zstd_frames_when_available():
    avail = available_compressions()
    if COMPRESSION_LZ4 in avail:
        import lz4.frame
        b = build_batch(RECORDS, compression=COMPRESSION_LZ4)
        assert b[BATCH_HEADER_SIZE:BATCH_HEADER_SIZE + 4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
        assert lz4.frame.decompress(b[BATCH_HEADER_SIZE:])
    if COMPRESSION_ZSTD in avail:
        b = build_batch(RECORDS, compression=COMPRESSION_ZSTD)
        assert b[BATCH_HEADER_SIZE:BATCH_HEADER_SIZE + 4] == b"\x28\xb5\x2f\xfd"
    if COMPRESSION_SNAPPY in avail:
        b = build_batch(RECORDS, compression=COMPRESSION_SNAPPY)
        assert b[BATCH_HEADER_SIZE:BATCH_HEADER_SIZE + 16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"


def test_crc32c_known_vector_and_crcmod_cross_check():
    import crc32c
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    crcmod = pytest.importorskip("crcmod.predefined")
    fn = crcmod.mkCrcFun("crc-32c")
    for data in (b"", b"a", build_batch(RECORDS)):
        assert crc32c.crc32c(data) == fn(data)


@pytest.mark.parametrize("compression", [c for c in available_compressions() if c])
def test_decompression_is_bounded(compression):
    from headrace.protocol.compression import compress, decompress

    data = bytes(8 << 20)  # 8 MiB of zeros: a few KiB compressed
    packed = compress(compression, data)
    assert len(packed) < len(data) // 10
    assert decompress(compression, packed, limit=len(data)) == data
    with pytest.raises(CorruptRecordError):
        decompress(compression, packed, limit=1 << 20)


def test_a_compression_bomb_in_a_batch_is_corrupt_not_an_allocation():
    from headrace.protocol.compression import DECOMPRESSED_MAX

    bomb = Record(key=None, value=bytes(DECOMPRESSED_MAX + 1), timestamp=1)
    batch = build_batch([bomb], compression=COMPRESSION_GZIP)
    assert len(batch) < 1 << 20
    with pytest.raises(CorruptRecordError):
        decode_records(batch)
