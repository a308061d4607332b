"""Frames captured from real clients decode exactly and re-encode to the same bytes.

Files: ``tests/protocol/golden/{client}__{ApiName}__v{version}__{request|response}.bin``, one
frame each without its 4-byte length prefix. ``ApiName`` is the schema name (``ApiVersions``,
``ApiVersionsRequest``) or the Kafka enum name (``API_VERSIONS``).
"""

import re
from pathlib import Path

import pytest

from headrace.protocol import (
    ApiKey, decode_request, decode_request_header, decode_response, decode_response_header,
    encode_request, encode_request_header, encode_response, encode_response_header,
    has_unknown_tagged_fields, messages, response_header_is_flexible, RequestHeader,
)

GOLDEN = Path(__file__).parent / "golden"
NAME = re.compile(r"^(?P<client>[^_].*?)__(?P<api>[A-Za-z_]+?)__v(?P<version>\d+)__(?P<kind>request|response)\.bin$")
FILES = sorted(GOLDEN.glob("*.bin")) if GOLDEN.is_dir() else []


def _api_key(api: str) -> ApiKey:
    if api.isupper() or "_" in api:
        return ApiKey[api]
    for suffix in ("Request", "Response"):
        if api.endswith(suffix) and len(api) > len(suffix):
            api = api[: -len(suffix)]
    for key in ApiKey:
        if key.schema_name == api:
            return key
    raise KeyError(api)


def check_frame(kind: str, api_key: int, version: int, frame: bytes) -> bool:
    """Decode the frame (header + body must consume it exactly); then, when the body has no
    unknown tagged fields, re-encode and compare bytes. Returns whether the comparison ran."""
    if kind == "request":
        header, pos = decode_request_header(frame)
        assert (header.api_key, header.api_version) == (api_key, version)
        msg = decode_request(api_key, version, frame, pos)  # raises on trailing bytes
        plain_header = encode_request_header(header)
        if len(plain_header) == pos:  # the header carried no tagged fields
            assert plain_header == frame[:pos]
        if has_unknown_tagged_fields(msg):
            return False
        assert encode_request(api_key, version, msg) == frame[pos:]
        return True
    flexible = response_header_is_flexible(api_key, version)
    correlation_id, pos = decode_response_header(frame, flexible)
    msg = decode_response(api_key, version, frame, pos)
    plain_header = encode_response_header(correlation_id, flexible)
    if len(plain_header) == pos:
        assert plain_header == frame[:pos]
    if has_unknown_tagged_fields(msg):
        return False
    assert b"".join(encode_response(api_key, version, msg)) == frame[pos:]
    return True


def test_golden_file_names_are_well_formed():
    bad = [p.name for p in FILES if not NAME.match(p.name)]
    assert not bad, f"golden files not named {{client}}__{{ApiName}}__v{{version}}__{{request|response}}.bin: {bad}"


@pytest.mark.parametrize("path", FILES or [None], ids=[p.name for p in FILES] or ["no-golden-files"])
def test_golden_frame(path):
    if path is None:
        pytest.skip(f"no golden frames in {GOLDEN} yet (captured from real clients, named "
                    "{client}__{ApiName}__v{version}__{request|response}.bin)")
    m = NAME.match(path.name)
    if not m:
        pytest.fail(f"badly named golden file {path.name}")
    try:
        api_key = _api_key(m["api"])
    except KeyError:
        frame = path.read_bytes()
        if m["kind"] == "request":  # the header still decodes, so a broker can reply or close
            header, _ = decode_request_header(frame)
            assert header.api_version == int(m["version"])
        pytest.skip(f"no shipped schema for {m['api']}: the codec cannot decode its body")
    check_frame(m["kind"], api_key, int(m["version"]), path.read_bytes())


def test_golden_frames_compared_byte_for_byte():
    """Guards against a vacuous pass: when frames exist, most must be compared exactly."""
    if not FILES:
        pytest.skip(f"no golden frames in {GOLDEN} yet")
    compared = 0
    for path in FILES:
        m = NAME.match(path.name)
        try:
            api_key = _api_key(m["api"])
        except KeyError:
            continue
        compared += check_frame(m["kind"], api_key, int(m["version"]), path.read_bytes())
    assert compared >= len(FILES) // 2


def test_harness_on_synthetic_frames():
    """The checker itself works (and fails on damage), independently of which files exist."""
    A = messages.ApiVersionsResponse
    req = encode_request_header(RequestHeader(18, 3, 11, "rdkafka")) + encode_request(
        18, 3, messages.ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.6.0"))
    resp = encode_response_header(11, False) + b"".join(encode_response(
        18, 3, A(api_keys=[A.ApiVersion(api_key=0, min_version=3, max_version=11)])))
    assert check_frame("request", 18, 3, req)
    assert check_frame("response", 18, 3, resp)
    assert _api_key("API_VERSIONS") == _api_key("ApiVersions") == _api_key("ApiVersionsRequest") == 18
    assert NAME.match("java__ApiVersions__v3__request.bin")["client"] == "java"
    with pytest.raises(Exception):
        check_frame("request", 18, 3, req + b"\x00")
    with pytest.raises(Exception):
        check_frame("response", 18, 3, resp[:-1])
