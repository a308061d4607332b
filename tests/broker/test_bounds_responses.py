"""Clients that do not read their responses stall only themselves: the broker's memory stays
under its budgets while one connection floods it with fetches of large responses, or with
thousands of small pipelined requests, and never reads; a well-behaved client is served
within a second throughout."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from boundsprobe import MB, Watch, api_versions_frame, frame, produce_one, rss
from kafkawire import WireClient

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages

F = messages.FetchRequest
P = messages.ProduceRequest
TOPIC = "big"
DATA = 50 * MB
RESPONSE_BUDGET = 128 * MB  # queued.max.response.bytes in this test


def fetch_request(max_bytes: int, max_wait_ms: int = 500) -> F:
    return F(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        topics=[
            F.FetchTopic(
                topic=TOPIC,
                partitions=[
                    F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=max_bytes)
                ],
            )
        ],
    )


def fill(port: int) -> None:
    """A topic holding DATA bytes, in batches of about 1 MB."""
    with WireClient(port, timeout=30) as client:
        C = messages.CreateTopicsRequest
        r = client.request(
            ApiKey.CREATE_TOPICS,
            7,
            C(topics=[C.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)]),
        )
        assert r.topics[0].error_code == ErrorCode.NONE
        value = bytes(1_000_000)
        for _ in range(DATA // len(value) + 1):
            assert produce_one(client, TOPIC, value) == ErrorCode.NONE


def unread_socket(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # the kernel takes little for us
    s.connect(("127.0.0.1", port))
    return s


def flood(sock: socket.socket, frames: list[bytes], stop: threading.Event, sent: list[int]) -> None:
    """Send ``frames``, and again until ``stop`` is set (blocking sends: the broker may stop
    reading); ``sent[0]`` counts the frames sent."""
    try:
        while True:
            for f in frames:
                sock.sendall(f)
                sent[0] += 1
            if stop.is_set():
                return
    except OSError:
        pass


@pytest.fixture
def big_topic(tmp_path):
    b = BrokerProcess(
        tmp_path / "data", {"queued.max.response.bytes": str(RESPONSE_BUDGET)}
    ).start()
    try:
        fill(b.port)
        yield b
    finally:
        b.kill()


def test_a_fetch_flood_never_read_stays_within_the_response_budget(big_topic):
    broker = big_topic
    baseline = rss(broker.pid)
    sock = unread_socket(broker.port)
    sock.sendall(api_versions_frame())
    frames = [frame(ApiKey.FETCH, 12, i, fetch_request(60 * MB)) for i in range(2, 100)]
    stop, sent = threading.Event(), [0]
    sender = threading.Thread(target=flood, args=(sock, frames, stop, sent), daemon=True)
    with Watch(broker.pid, broker.port) as watch:
        sender.start()
        time.sleep(12)
    grown = watch.max_rss - baseline
    print(f"fetch flood: {sent[0]} fetches sent, {watch.summary()}, grown {grown / MB:.0f} MiB")
    # the budget, plus one response over it (a batch past the limit) and the request path
    bound = RESPONSE_BUDGET + DATA + 64 * MB
    assert grown < bound, f"RSS grew {grown / MB:.0f} MiB > {bound / MB:.0f} MiB"
    assert watch.slowest < 1.0, watch.summary()
    stop.set()
    sock.close()
    sender.join(5)
    # the flood's reservations came back when its connection closed: a full fetch gets data
    time.sleep(1.0)
    with WireClient(broker.port, timeout=30) as client:
        r = client.request(ApiKey.FETCH, 12, fetch_request(60 * MB, max_wait_ms=0))
        assert len(r.responses[0].partitions[0].records) >= DATA
    assert broker.alive


def test_thousands_of_pipelined_requests_never_read_are_bounded_and_all_answered(broker):
    with WireClient(broker.port) as client:  # metadata answers of some 10 KB each
        C = messages.CreateTopicsRequest
        r = client.request(
            ApiKey.CREATE_TOPICS,
            7,
            C(
                topics=[
                    C.CreatableTopic(
                        name=f"topic-with-a-long-name-{i:03d}-" + "x" * 100,
                        num_partitions=1,
                        replication_factor=1,
                    )
                    for i in range(50)
                ]
            ),
        )
        assert all(t.error_code == ErrorCode.NONE for t in r.topics)
    baseline = rss(broker.pid)
    sock = unread_socket(broker.port)
    metadata = messages.MetadataRequest(topics=None, allow_auto_topic_creation=False)
    n = 20_000  # some 200 MB of answers if they were all made
    stream = api_versions_frame(0) + b"".join(
        frame(ApiKey.METADATA, 9, i, metadata) for i in range(1, n)
    )
    stop, sent = threading.Event(), [0]
    stop.set()  # one pass
    sender = threading.Thread(target=flood, args=(sock, [stream], stop, sent), daemon=True)
    with Watch(broker.pid, broker.port) as watch:
        sender.start()
        time.sleep(5)
    grown = watch.max_rss - baseline
    print(f"request flood: {watch.summary()}, grown {grown / MB:.0f} MiB")
    # connection.max.response.bytes (4 MiB) of answers, queued.max.requests of requests
    assert grown < 48 * MB, f"RSS grew {grown / MB:.0f} MiB"
    assert watch.slowest < 1.0, watch.summary()
    # now read: every request is answered, in order
    sock.settimeout(30)
    reader = sock.makefile("rb")
    for i in range(n):
        size = struct.unpack(">i", reader.read(4))[0]
        body = reader.read(size)
        assert struct.unpack(">i", body[:4])[0] == i
    sender.join(10)
    sock.close()


def records_of(response) -> bytes:
    return bytes(response.responses[0].partitions[0].records or b"")


def test_fetches_wait_for_the_response_budget_and_answer_empty_at_their_deadline(big_topic):
    broker = big_topic
    hogs = []
    for _ in range(2):  # two clients that never read hold 2 x 55 MiB of the 128 MiB budget
        s = unread_socket(broker.port)
        s.sendall(api_versions_frame() + frame(ApiKey.FETCH, 12, 2, fetch_request(60 * MB)))
        hogs.append(s)
    time.sleep(1.5)
    with WireClient(broker.port, timeout=30) as client:
        started = time.monotonic()
        r = client.request(ApiKey.FETCH, 12, fetch_request(60 * MB, max_wait_ms=500))
        waited = time.monotonic() - started
        assert records_of(r) == b"", "no room in the budget: answered without records"
        assert r.responses[0].partitions[0].error_code == ErrorCode.NONE
        assert r.responses[0].partitions[0].high_watermark > 0
        assert 0.4 < waited < 1.5, waited
        for s in hogs:
            s.close()
        time.sleep(0.5)
        r = client.request(ApiKey.FETCH, 12, fetch_request(60 * MB, max_wait_ms=500))
        assert len(records_of(r)) >= DATA, "their reservations came back when they closed"


def test_fetch_max_bytes_caps_a_response(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"fetch.max.bytes": str(MB)}).start()
    try:
        with WireClient(b.port, timeout=30) as client:
            C = messages.CreateTopicsRequest
            client.request(
                ApiKey.CREATE_TOPICS,
                7,
                C(topics=[C.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)]),
            )
            for _ in range(10):
                produce_one(client, TOPIC, bytes(300_000))
            r = client.request(ApiKey.FETCH, 12, fetch_request(100 * MB, max_wait_ms=0))
            got = len(records_of(r))
            assert 3 * 300_000 < got <= MB, got  # whole batches up to fetch.max.bytes
    finally:
        b.kill()
