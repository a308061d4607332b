"""The blocking connection over a socket pair, the test playing the broker: one request and its
answer, pipelined requests answered in order, raw frames, and the failures (the broker closes,
sends a frame over the limit, answers with a body that does not decode)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from headrace.broker.client.blocking import BlockingConnection
from headrace.protocol import (
    ApiKey,
    DecodeError,
    decode_request,
    decode_request_header,
    encode_response,
    encode_response_header,
    messages,
    response_header_is_flexible,
)
from headrace.protocol.client import StreamError

H = messages.HeartbeatRequest


def heartbeat():
    return H(group_id="g", generation_id=1, member_id="m")


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    theirs.settimeout(5)
    conn = BlockingConnection(ours, client_id="t", max_response_bytes=1000)
    yield conn, theirs
    conn.close()
    theirs.close()


def read_request(sock):
    """The broker's side: one request frame off the socket, its header and body."""
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (size,) = struct.unpack(">i", head)
    frame = b""
    while len(frame) < size:
        frame += sock.recv(size - len(frame))
    header, offset = decode_request_header(frame)
    return header, decode_request(header.api_key, header.api_version, frame, offset)


def answer(sock, header, message, correlation_id=None):
    flexible = response_header_is_flexible(header.api_key, header.api_version)
    cid = header.correlation_id if correlation_id is None else correlation_id
    body = encode_response_header(cid, flexible) + b"".join(
        bytes(c) for c in encode_response(header.api_key, header.api_version, message))
    sock.sendall(struct.pack(">i", len(body)) + body)


def test_one_request_and_its_answer(pair):
    conn, broker = pair
    sent = conn.send(ApiKey.HEARTBEAT, 4, heartbeat())
    header, request = read_request(broker)
    assert (header.correlation_id, header.client_id, request) == (sent, "t", heartbeat())
    answer(broker, header, messages.HeartbeatResponse(error_code=25))
    r = conn.receive()
    assert (r.correlation_id, r.message.error_code) == (sent, 25)
    # request(): send and receive in one
    t = threading.Thread(target=lambda: answer(broker, read_request(broker)[0],
                                               messages.HeartbeatResponse(error_code=0)))
    t.start()
    assert conn.request(ApiKey.HEARTBEAT, 4, heartbeat()).error_code == 0
    t.join()


def test_pipelined_requests_are_answered_in_order_in_any_split(pair):
    conn, broker = pair
    ids = [conn.send(ApiKey.HEARTBEAT, v, heartbeat()) for v in (0, 4, 0)]
    assert conn.in_flight == 3
    with pytest.raises(RuntimeError, match="in flight"):
        conn.request(ApiKey.HEARTBEAT, 0, heartbeat())
    out = socket.socketpair()  # gather the answers, then send them a few bytes at a time
    for i in range(3):
        header, _ = read_request(broker)
        answer(out[0], header, messages.HeartbeatResponse(error_code=i))
    data = out[1].recv(1000)
    out[0].close()
    out[1].close()
    for i in range(0, len(data), 3):
        broker.sendall(data[i:i + 3])
    got = [conn.receive() for _ in range(3)]
    assert [(r.correlation_id, r.api_version, r.message.error_code) for r in got] == [
        (ids[0], 0, 0), (ids[1], 4, 1), (ids[2], 0, 2)]
    assert conn.in_flight == 0
    with pytest.raises(RuntimeError, match="no request is waiting"):
        conn.receive()


def test_a_raw_request_gets_its_frame(pair):
    conn, broker = pair
    conn.send(ApiKey.HEARTBEAT, 4, heartbeat(), raw=True)
    header, _ = read_request(broker)
    answer(broker, header, messages.HeartbeatResponse(error_code=0))
    r = conn.receive()
    assert r.message is None and bytes(r.frame[r.body_offset:]) == b"\x00\x00\x00\x00\x00\x00\x00"


def test_an_acks_0_produce_gets_no_answer(pair):
    conn, _ = pair
    P = messages.ProduceRequest
    assert conn.request(ApiKey.PRODUCE, 9, P(transactional_id=None, acks=0, timeout_ms=1,
                                             topic_data=[])) is None
    assert conn.in_flight == 0


def test_the_broker_closing_is_a_connection_error(pair):
    conn, broker = pair
    conn.send(ApiKey.HEARTBEAT, 4, heartbeat())
    read_request(broker)
    broker.sendall(struct.pack(">i", 20) + b"\x00" * 5)  # part of a frame, then a close
    broker.close()
    with pytest.raises(ConnectionError, match="closed by the broker"):
        conn.receive()


def test_a_frame_over_the_limit_is_refused_before_it_is_read(pair):
    conn, broker = pair
    conn.send(ApiKey.HEARTBEAT, 4, heartbeat())
    broker.sendall(struct.pack(">i", 2**31 - 1))
    with pytest.raises(StreamError, match="2147483647 bytes"):
        conn.receive()


def test_a_body_that_does_not_decode_raises_decode_error_and_the_connection_goes_on(pair):
    conn, broker = pair

    def broker_side():
        header, _ = read_request(broker)
        broker.sendall(struct.pack(">i", 6) + struct.pack(">i", header.correlation_id) + b"\x00\x01")
        header, _ = read_request(broker)
        answer(broker, header, messages.HeartbeatResponse(error_code=0))

    t = threading.Thread(target=broker_side)
    t.start()
    with pytest.raises(DecodeError):
        conn.request(ApiKey.HEARTBEAT, 4, heartbeat())
    assert conn.request(ApiKey.HEARTBEAT, 4, heartbeat()).error_code == 0
    t.join()
