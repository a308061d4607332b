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
FILES = sorted(GOLDEN.glob("*.bin"))


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


def check_frame(kind: str, api_key: int, version: int, frame: bytes) -> None:
    """Decode the frame (header + body must consume it exactly), re-encode both and compare
    every byte. Tagged fields the schema does not define are kept by the decoder and written
    back by the encoder, so they are compared like the rest."""
    if kind == "request":
        header, pos = decode_request_header(frame)
        assert (header.api_key, header.api_version) == (api_key, version)
        msg = decode_request(api_key, version, frame, pos)  # raises on trailing bytes
        # no request header field is tagged in any Kafka version; a header whose tag
        # section is not empty would fail here (the header codec skips such tags)
        assert encode_request_header(header) == frame[:pos]
        assert encode_request(api_key, version, msg) == frame[pos:]
        return
    flexible = response_header_is_flexible(api_key, version)
    correlation_id, pos = decode_response_header(frame, flexible)
    msg = decode_response(api_key, version, frame, pos)
    assert encode_response_header(correlation_id, flexible) == frame[:pos]
    assert b"".join(encode_response(api_key, version, msg)) == frame[pos:]


def test_golden_file_names_are_well_formed():
    bad = [p.name for p in FILES if not NAME.match(p.name)]
    assert not bad, f"golden files not named {{client}}__{{ApiName}}__v{{version}}__{{request|response}}.bin: {bad}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_golden_frame(path):
    m = NAME.match(path.name)
    assert m, f"badly named golden file {path.name}"
    api_key = _api_key(m["api"])  # a frame of an API without a shipped schema fails here
    check_frame(m["kind"], api_key, int(m["version"]), path.read_bytes())


def test_every_golden_frame_is_compared_byte_for_byte():
    """All of them, not most: the frames are there, each names a known API, each compares."""
    assert FILES, f"no golden frames in {GOLDEN}"
    failures = []
    for path in FILES:
        m = NAME.match(path.name)
        try:
            check_frame(m["kind"], _api_key(m["api"]), int(m["version"]), path.read_bytes())
        except Exception as e:  # collected, so the message lists every frame that differs
            failures.append(f"{path.name}: {type(e).__name__}: {e}"[:300])
    assert not failures, f"{len(failures)} of {len(FILES)} golden frames differ:\n" + "\n".join(failures)


def test_unknown_tagged_fields_are_compared_too():
    """A newer client's tagged fields (tags this schema lacks), at the top and inside a
    struct, survive decode and encode byte for byte (no golden frame has any yet)."""
    R = messages.MetadataRequest
    msg = R(topics=[R.MetadataRequestTopic(name="orders")], allow_auto_topic_creation=False)
    msg._unknown_tags = [(7, b"\x01\x02"), (90, b"newer")]
    msg.topics[0]._unknown_tags = [(3, b"\xff")]
    frame = encode_request_header(RequestHeader(3, 12, 5, "newer-client")) + encode_request(3, 12, msg)
    header, pos = decode_request_header(frame)
    decoded = decode_request(3, 12, frame, pos)
    assert has_unknown_tagged_fields(decoded)
    assert decoded._unknown_tags == [(7, b"\x01\x02"), (90, b"newer")]
    check_frame("request", 3, 12, frame)
    # they are part of what is compared: a codec that dropped them would fail check_frame
    decoded.topics[0]._unknown_tags = None
    assert encode_request(3, 12, decoded) != frame[pos:]


def test_harness_on_synthetic_frames():
    """The checker itself works (and fails on damage), independently of which files exist."""
    A = messages.ApiVersionsResponse
    req = encode_request_header(RequestHeader(18, 3, 11, "rdkafka")) + encode_request(
        18, 3, messages.ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.6.0"))
    resp = encode_response_header(11, False) + b"".join(encode_response(
        18, 3, A(api_keys=[A.ApiVersion(api_key=0, min_version=3, max_version=11)])))
    check_frame("request", 18, 3, req)
    check_frame("response", 18, 3, resp)
    assert _api_key("API_VERSIONS") == _api_key("ApiVersions") == _api_key("ApiVersionsRequest") == 18
    assert NAME.match("java__ApiVersions__v3__request.bin")["client"] == "java"
    with pytest.raises(Exception):
        check_frame("request", 18, 3, req + b"\x00")
    with pytest.raises(Exception):
        check_frame("response", 18, 3, resp[:-1])
