"""Decoders raise only DecodeError on arbitrary input, and never allocate from wire counts."""

import random

import pytest

from headrace.protocol import DecodeError, decode_message, decode_request, decode_request_header, encode_message
from headrace.protocol.schema import load_message
from protocol_testgen import all_message_versions, build_message

CASES = all_message_versions()[::3]


def _only_decode_error(cls, version, data):
    try:
        decode_message(cls, version, data)
    except DecodeError:
        pass


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_truncations_and_mutations(name, version):
    cls = load_message(name)
    rng = random.Random(f"fuzz:{name}:{version}")
    good = b"".join(encode_message(build_message(name, version), version))
    for cut in sorted({0, 1, len(good) // 2, len(good) - 1} | {rng.randrange(len(good) + 1) for _ in range(8)}):
        if 0 <= cut < len(good):
            with pytest.raises(DecodeError):
                decode_message(cls, version, good[:cut])
    for _ in range(40):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data)) if data else 0
            op = rng.random()
            if op < 0.5 and data:
                data[i] = rng.randrange(256)
            elif op < 0.7 and data:
                data[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
            elif op < 0.85:
                data[i:i] = rng.randbytes(rng.randint(1, 5))
            elif data:
                del data[i:i + rng.randint(1, 5)]
        _only_decode_error(cls, version, bytes(data))


def test_random_bytes():
    rng = random.Random(7)
    cases = all_message_versions()
    for _ in range(3000):
        name, version = rng.choice(cases)
        _only_decode_error(load_message(name), version, rng.randbytes(rng.randint(0, 64)))
    for _ in range(2000):
        frame = rng.randbytes(rng.randint(0, 40))
        try:
            decode_request_header(frame)
        except DecodeError:
            pass


def test_huge_array_count_is_rejected_before_allocating():
    body = b"\x7f\xff\xff\xff" + bytes(6)  # MetadataRequest v0: topics count 2^31-1, 10 bytes
    with pytest.raises(DecodeError, match="count 2147483647 exceeds"):
        decode_request(3, 0, body)
    # flexible: compact array count as a 5-byte varint (0xFFFFFFFF - 1 elements)
    flex = b"\xff\xff\xff\xff\x0f" + bytes(5)
    with pytest.raises(DecodeError, match="exceeds"):
        decode_request(3, 12, flex)
    with pytest.raises(DecodeError):  # primitive array (int32) count larger than the body
        decode_request(2, 1, b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x10\x00\x00")


def test_huge_string_and_records_lengths():
    with pytest.raises(DecodeError, match="length"):
        decode_request(3, 0, b"\x00\x00\x00\x01\x7f\xff")
    produce = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x00\x00\x00\x01" + b"\x00\x01t" \
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff" + b"abc"
    with pytest.raises(DecodeError, match="Records length"):
        decode_request(0, 3, produce)


def test_overlong_varint():
    with pytest.raises(DecodeError):
        decode_request(18, 3, b"\x80\x80\x80\x80\x80\x01")


def test_invalid_utf8():
    with pytest.raises(DecodeError):
        decode_request(3, 0, b"\x00\x00\x00\x01\x00\x02\xff\xfe")
