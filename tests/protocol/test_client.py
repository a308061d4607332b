"""The sans-IO client connection: request frames out; response bytes in, in any split, matched to
their requests by correlation id; hostile frames (sizes out of bounds, correlation ids no request
has or out of order) refused before anything is buffered for them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.protocol import (
    ApiKey,
    DecodeError,
    EncodeError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    encode_response_header,
    messages,
    response_header_is_flexible,
)
from headrace.protocol.client import ClientConnection, Response, StreamError, request_frame

M = messages.MetadataRequest
MR = messages.MetadataResponse
H = messages.HeartbeatRequest
P = messages.ProduceRequest


def metadata(name: str):
    return M(topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)


def metadata_answer(name: str):
    return MR(brokers=[], cluster_id=None, controller_id=1,
              topics=[MR.MetadataResponseTopic(error_code=0, name=name, is_internal=False, partitions=[])])


def api_versions_answer():
    A = messages.ApiVersionsResponse
    return A(error_code=0, api_keys=[A.ApiVersion(api_key=18, min_version=0, max_version=4)])


def heartbeat_answer(error_code: int = 0):
    return messages.HeartbeatResponse(error_code=error_code)


def response_frame(api_key: int, version: int, correlation_id: int, message) -> bytes:
    """What a broker writes: size, response header (v1 when flexible, never for ApiVersions), body."""
    header = encode_response_header(correlation_id, response_header_is_flexible(api_key, version))
    body = header + b"".join(bytes(c) for c in encode_response(api_key, version, message))
    return struct.pack(">i", len(body)) + body


def produce(acks: int):
    return P(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[])


# the requests a pipelined test sends, with the answers a broker gives them
EXCHANGES = [
    (ApiKey.METADATA, 12, metadata("a"), metadata_answer("a")),  # flexible: header v2 / v1
    (ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
     api_versions_answer()),  # flexible request, response header v0
    (ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"), heartbeat_answer(27)),
    (ApiKey.METADATA, 1, metadata("b"), metadata_answer("b")),  # not flexible
]


def pipelined(conn: ClientConnection, exchanges=EXCHANGES) -> bytes:
    """Send every request on ``conn``; the broker's answers, in order, as one byte string."""
    answers = b""
    for api_key, version, request, answer in exchanges:
        conn.request(api_key, version, request)
        answers += response_frame(api_key, version, conn.correlation_id, answer)
    return answers


def check_answers(responses: list[Response], exchanges=EXCHANGES, first_id: int = 1) -> None:
    assert [r.correlation_id for r in responses] == list(range(first_id, first_id + len(exchanges)))
    for r, (api_key, version, _, answer) in zip(responses, exchanges):
        assert (r.api_key, r.api_version, r.error) == (api_key, version, None)
        assert r.message == answer


# requests -------------------------------------------------------------------------------------


def test_a_request_frame_is_size_header_body_with_the_next_correlation_id():
    conn = ClientConnection("me")
    for expected_id in (1, 2, 3):
        data = conn.request(ApiKey.METADATA, 12, metadata("t"))
        assert conn.correlation_id == expected_id
        (size,) = struct.unpack_from(">i", data)
        assert size == len(data) - 4
        header, offset = decode_request_header(data, 4)
        assert tuple(header) == (ApiKey.METADATA, 12, expected_id, "me")
        assert decode_request(ApiKey.METADATA, 12, data, offset) == metadata("t")
    assert conn.in_flight == 3


def test_request_frame_takes_a_message_or_its_encoded_body():
    message = H(group_id="g", generation_id=1, member_id="m")
    body = encode_request(ApiKey.HEARTBEAT, 4, message)
    assert request_frame(ApiKey.HEARTBEAT, 4, 9, None, message) == request_frame(ApiKey.HEARTBEAT, 4, 9, None, body)
    header, offset = decode_request_header(request_frame(ApiKey.HEARTBEAT, 4, 9, None, body), 4)
    assert tuple(header) == (ApiKey.HEARTBEAT, 4, 9, None)
    with pytest.raises(EncodeError):
        request_frame(ApiKey.HEARTBEAT, 4, 1, "x", metadata("t"))


def test_a_request_that_does_not_encode_leaves_nothing_pending():
    conn = ClientConnection()
    with pytest.raises(EncodeError):
        conn.request(ApiKey.HEARTBEAT, 4, metadata("t"))
    assert (conn.correlation_id, conn.in_flight) == (0, 0)


def test_correlation_ids_wrap_to_zero_after_the_largest_int32():
    conn = ClientConnection()
    conn.correlation_id = 2**31 - 2
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    assert conn.correlation_id == 0
    data = response_frame(ApiKey.HEARTBEAT, 0, 2**31 - 1, heartbeat_answer())
    data += response_frame(ApiKey.HEARTBEAT, 0, 0, heartbeat_answer())
    assert [r.correlation_id for r in conn.receive_data(data)] == [2**31 - 1, 0]


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_with_acks_0_expects_no_response_from_the_message_or_its_body(version):
    for message in (produce(0), encode_request(ApiKey.PRODUCE, version, produce(0))):
        conn = ClientConnection()
        conn.request(ApiKey.PRODUCE, version, message)
        assert conn.in_flight == 0
    for message in (produce(-1), encode_request(ApiKey.PRODUCE, version, produce(1))):
        conn = ClientConnection()
        conn.request(ApiKey.PRODUCE, version, message)
        assert conn.in_flight == 1
    transactional = P(transactional_id="tx", acks=0, timeout_ms=1, topic_data=[])
    conn = ClientConnection()
    conn.request(ApiKey.PRODUCE, version, encode_request(ApiKey.PRODUCE, version, transactional))
    assert conn.in_flight == 0


def test_an_acks_0_produce_between_requests_is_skipped_when_matching():
    conn = ClientConnection()
    conn.request(ApiKey.METADATA, 12, metadata("a"))
    conn.request(ApiKey.PRODUCE, 9, produce(0))
    conn.request(ApiKey.METADATA, 12, metadata("b"))
    assert conn.in_flight == 2
    data = response_frame(ApiKey.METADATA, 12, 1, metadata_answer("a"))
    data += response_frame(ApiKey.METADATA, 12, 3, metadata_answer("b"))
    assert [r.message.topics[0].name for r in conn.receive_data(data)] == ["a", "b"]


def test_expect_response_overrides():
    conn = ClientConnection()
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"), expect_response=False)
    conn.request(ApiKey.PRODUCE, 9, produce(0), expect_response=True)
    assert conn.in_flight == 1


# responses in any split --------------------------------------------------------------------------


def test_pipelined_responses_in_one_chunk():
    conn = ClientConnection()
    responses = conn.receive_data(pipelined(conn))
    check_answers(responses)
    assert conn.in_flight == 0 and conn.bytes_expected == 4


def test_pipelined_responses_a_byte_at_a_time():
    conn = ClientConnection()
    data = pipelined(conn)
    responses = []
    for i in range(len(data)):
        got = conn.receive_data(data[i:i + 1])
        assert len(got) <= 1
        responses += got
    check_answers(responses)


def test_an_empty_chunk_completes_nothing():
    conn = ClientConnection()
    data = pipelined(conn)
    assert conn.receive_data(b"") == []
    assert conn.receive_data(data[:3]) == []
    assert conn.receive_data(b"") == []
    check_answers(conn.receive_data(data[3:]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(range(len(EXCHANGES))), min_size=1, max_size=8), st.data())
def test_any_split_of_any_pipeline_gives_the_same_responses(picks, data):
    exchanges = [EXCHANGES[i] for i in picks]
    conn = ClientConnection(max_response_bytes=1 << 16)
    stream = pipelined(conn, exchanges)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    responses = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        chunk = stream[start:end]
        kind = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
        responses += conn.receive_data(kind(chunk))
    check_answers(responses, exchanges)
    assert conn.in_flight == 0


def test_reading_bytes_expected_at_a_time_hands_each_frame_over_uncopied():
    conn = ClientConnection()
    data = pipelined(conn)
    responses, pos = [], 0
    while pos < len(data):
        wanted = conn.bytes_expected
        chunk = data[pos:pos + wanted]
        pos += wanted
        got = conn.receive_data(chunk)
        if got:
            assert got[0].frame is chunk  # the frame is the chunk itself
        responses += got
    check_answers(responses)


def test_bytes_expected_follows_the_size_prefix_then_the_frame():
    conn = ClientConnection()
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    data = response_frame(ApiKey.HEARTBEAT, 0, 1, heartbeat_answer())  # 4 + 6 bytes
    assert conn.bytes_expected == 4
    conn.receive_data(data[:1])
    assert conn.bytes_expected == 3
    conn.receive_data(data[1:4])
    assert conn.bytes_expected == 6
    conn.receive_data(data[4:7])
    assert conn.bytes_expected == 3
    (r,) = conn.receive_data(data[7:])
    assert r.message == heartbeat_answer() and conn.bytes_expected == 4


def read_into_buffers(conn: ClientConnection, data: bytes, most: int) -> list[Response]:
    """What a BufferedProtocol does: ask for a buffer, copy at most ``most`` bytes into it."""
    responses, pos = [], 0
    while pos < len(data):
        buf = conn.get_buffer()
        n = min(len(buf), most, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        responses += conn.buffer_updated(n)
    return responses


@pytest.mark.parametrize("most", [1, 3, 7, 1 << 20])
def test_reading_into_its_buffers_gives_the_same_responses(most):
    conn = ClientConnection()
    check_answers(read_into_buffers(conn, pipelined(conn), most))
    assert conn.in_flight == 0


def test_a_frame_read_into_its_buffers_is_one_buffer_of_the_frames_size():
    conn = ClientConnection()
    conn.request(ApiKey.METADATA, 12, metadata("a"))
    data = response_frame(ApiKey.METADATA, 12, 1, metadata_answer("a"))
    assert len(conn.get_buffer()) == 4  # the size prefix first
    conn.get_buffer()[:4] = data[:4]
    assert conn.buffer_updated(4) == []
    buf = conn.get_buffer()
    assert len(buf) == len(data) - 4  # then exactly the frame
    buf[:] = data[4:]
    (r,) = conn.buffer_updated(len(buf))
    assert r.frame is buf.obj and r.message == metadata_answer("a")


@pytest.mark.parametrize("size", [3, 101, 2**31 - 1])
def test_a_frame_size_out_of_bounds_is_refused_before_its_buffer_is_made(size):
    conn = ClientConnection(max_response_bytes=100)
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    conn.get_buffer()[:4] = struct.pack(">i", size)
    with pytest.raises(StreamError, match=f"frame of {size} bytes"):
        conn.buffer_updated(4)
    with pytest.raises(StreamError, match="broken"):
        conn.get_buffer()


def test_a_raw_response_keeps_its_frame_and_where_the_body_starts():
    conn = ClientConnection()
    conn.request(ApiKey.METADATA, 12, metadata("a"), raw=True)
    conn.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(), raw=True)
    data = response_frame(ApiKey.METADATA, 12, 1, metadata_answer("a"))
    data += response_frame(ApiKey.API_VERSIONS, 3, 2, api_versions_answer())
    md, av = conn.receive_data(data)
    assert md.message is None and md.body_offset == 5  # correlation id, empty tagged fields
    assert bytes(md.frame) == data[4:4 + len(md.frame)]
    assert av.message is None and av.body_offset == 4  # ApiVersions: header v0
    assert decode_response(ApiKey.METADATA, 12, md.frame, md.body_offset) == metadata_answer("a")


def test_a_body_that_does_not_decode_is_reported_on_its_response_and_the_stream_goes_on():
    conn = ClientConnection()
    conn.request(ApiKey.METADATA, 12, metadata("a"))
    conn.request(ApiKey.METADATA, 12, metadata("b"))
    bad = struct.pack(">i", 9) + struct.pack(">i", 1) + b"\x00" + b"\xff\xff\xff\xff"  # truncated body
    good = response_frame(ApiKey.METADATA, 12, 2, metadata_answer("b"))
    first, second = conn.receive_data(bad + good)
    assert isinstance(first.error, DecodeError) and first.message is None and first.correlation_id == 1
    assert second.error is None and second.message == metadata_answer("b")
    assert conn.in_flight == 0


# hostile input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 3])
def test_a_frame_size_below_a_correlation_id_is_refused(size):
    conn = ClientConnection()
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    with pytest.raises(StreamError, match=f"frame of {size} bytes"):
        conn.receive_data(struct.pack(">i", size) + b"\x00" * 8)


@pytest.mark.parametrize("size", [101, 2**31 - 1])
def test_a_frame_over_the_limit_is_refused_on_its_size_alone(size):
    conn = ClientConnection(max_response_bytes=100)
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    conn.receive_data(struct.pack(">i", size)[:2])
    with pytest.raises(StreamError, match=rf"frame of {size} bytes \(limit 100\)"):
        conn.receive_data(struct.pack(">i", size)[2:])  # nothing after the size
    assert conn.bytes_expected == 4 and not conn._body  # nothing buffered for it


def test_a_frame_at_the_limit_is_taken():
    conn = ClientConnection(max_response_bytes=6)
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    (r,) = conn.receive_data(response_frame(ApiKey.HEARTBEAT, 0, 1, heartbeat_answer()))
    assert len(r.frame) == 6 and r.message == heartbeat_answer()


def test_a_response_nobody_waits_for_is_refused():
    conn = ClientConnection()
    with pytest.raises(StreamError, match="correlation id 1, which no request is waiting for"):
        conn.receive_data(response_frame(ApiKey.HEARTBEAT, 0, 1, heartbeat_answer()))
    conn = ClientConnection()
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    with pytest.raises(StreamError, match="correlation id 99, which no request is waiting for"):
        conn.receive_data(response_frame(ApiKey.HEARTBEAT, 0, 99, heartbeat_answer()))


def test_a_response_that_overtakes_an_older_request_is_refused():
    conn = ClientConnection()
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    with pytest.raises(StreamError, match="correlation id 2 before that of 1.*out of order"):
        conn.receive_data(response_frame(ApiKey.HEARTBEAT, 0, 2, heartbeat_answer()))


def test_the_responses_before_a_violation_come_with_the_error():
    conn = ClientConnection(max_response_bytes=1000)
    data = pipelined(conn, EXCHANGES[:2])
    with pytest.raises(StreamError) as e:
        conn.receive_data(data + struct.pack(">i", 5000))
    check_answers(e.value.responses, EXCHANGES[:2])


def test_a_broken_connection_stays_broken():
    conn = ClientConnection()
    with pytest.raises(StreamError):
        conn.receive_data(struct.pack(">i", -1))
    with pytest.raises(StreamError, match="broken: a response frame of -1 bytes"):
        conn.receive_data(b"")
    with pytest.raises(StreamError, match="broken"):
        conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    assert isinstance(StreamError("x"), ConnectionError)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 16))
def test_arbitrary_bytes_give_responses_or_a_stream_error_and_nothing_else(garbage, chunk):
    conn = ClientConnection(max_response_bytes=64)
    for _ in range(3):
        conn.request(ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1, member_id="m"))
    try:
        for i in range(0, len(garbage), chunk):
            for r in conn.receive_data(garbage[i:i + chunk]):
                assert r.message is not None or isinstance(r.error, DecodeError)
    except StreamError:
        pass
