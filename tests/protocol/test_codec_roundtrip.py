"""Every message at every valid version survives encode -> decode -> encode unchanged."""

import pytest

from headrace.protocol import decode_message, encode_message
from headrace.protocol.schema import load_message

from protocol_testgen import all_message_versions, build_message

CASES = all_message_versions()


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip(name, version, seed):
    cls = load_message(name)
    msg = build_message(name, version, seed)
    encoded = b"".join(encode_message(msg, version))
    decoded = decode_message(cls, version, encoded)
    assert decoded == msg
    assert b"".join(encode_message(decoded, version)) == encoded


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_defaults_round_trip(name, version):
    cls = load_message(name)
    msg = cls()
    encoded = b"".join(encode_message(msg, version))
    assert decode_message(cls, version, encoded) == msg
