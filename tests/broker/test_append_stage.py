"""Large produce payloads, whose copy into the page cache the append stage makes in its thread.

Pipelined on one connection, with an idempotent producer's sequences: responses in request
order, offsets contiguous, a retry answered with the original's offset, every record readable
and still there after a kill. On a disk that fills up meanwhile, the writes behind a failed one
fail too, nothing acknowledged is lost, and the producer's state forgets what was not written:
the retry of the first failed request is stored once space returns. Connections flooding it
with acks=0 requests faster than it copies hold the broker to its request limits, and every
record they sent is stored.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from boundsprobe import MB, Watch, api_versions_frame, frame, rss
from kafkawire import WireClient

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches

P = messages.ProduceRequest
F = messages.FetchRequest
PID = 4242
RECORD = 80 * 1024  # four of them make a payload above the append stage's threshold


def create(client, name: str, durable: bool = False) -> None:
    """A one-partition topic; ``durable``: flushed after every message, so that the append
    stage writes around the page cache."""
    C = messages.CreateTopicsRequest
    configs = [C.CreatableTopicConfig(name="flush.messages", value="1")] if durable else []
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=configs)]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def values_of(i: int, count: int = 4) -> list[bytes]:
    return [b"%06d-%d:" % (i, j) + os.urandom(RECORD) for j in range(count)]


def send_produce(client, topic: str, values: list[bytes], sequence: int, acks: int = 1) -> int:
    batch = build_batch([Record(value=v) for v in values], producer_id=PID, producer_epoch=0,
                        base_sequence=sequence)
    return client.send(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=acks, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[
            P.PartitionProduceData(index=0, records=batch)])]))


def answers(client, sent: list[int]):
    """The partition answers of the responses to ``sent``, checked to come in order."""
    out = []
    for correlation_id in sent:
        got, r = client.receive(ApiKey.PRODUCE, 9)
        assert got == correlation_id, "responses in request order"
        out.append(r.responses[0].partition_responses[0])
    return out


def read_all(client, topic: str) -> list[bytes]:
    out, offset = [], 0
    while True:
        r = client.request(ApiKey.FETCH, 12, F(
            max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=0,
            topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=8 << 20)])]))
        p = r.responses[0].partitions[0]
        assert p.error_code == ErrorCode.NONE
        data = memoryview(p.records or b"")
        if not data:
            return out
        for pos, size, h in iter_batches(data):
            for o, _ts, _k, v, _ in decode_records(data[pos:pos + size]):
                assert o == len(out), "contiguous offsets from 0"
                out.append(v)
            offset = h.base_offset + h.last_offset_delta + 1


@pytest.mark.parametrize("durable", [False, True], ids=["page-cache", "durable"])
def test_pipelined_large_produces_are_stored_in_order_and_survive_a_kill(broker_factory, durable):
    b = broker_factory()
    sent_values = [values_of(i, count=1 if i % 5 == 4 else 4) for i in range(20)]
    with WireClient(b.port, timeout=30) as c:
        create(c, "large", durable)
        sequence, sent = 0, []
        for values in sent_values:  # all twenty in flight at once
            sent.append(send_produce(c, "large", values, sequence))
            sequence += len(values)
        parts = answers(c, sent)
        assert [p.error_code for p in parts] == [0] * 20
        starts = [sum(len(v) for v in sent_values[:i]) for i in range(20)]
        assert [p.base_offset for p in parts] == starts, "contiguous offsets, in order"
        # a retry of the last request is a duplicate: the original's offset, nothing stored
        retry = answers(c, [send_produce(c, "large", sent_values[-1], sequence - 1)])[0]
        assert (retry.error_code, retry.base_offset) == (0, starts[-1])
        expected = [v for values in sent_values for v in values]
        assert read_all(c, "large") == expected
    b.kill()
    b.start()
    with WireClient(b.port, timeout=30) as c:
        assert read_all(c, "large") == expected


@pytest.mark.parametrize("durable", [False, True], ids=["page-cache", "durable"])
@pytest.mark.parametrize("small_disk", ["6m"], indirect=True)
def test_a_disk_filling_under_pipelined_large_produces_loses_nothing_acknowledged(
    broker_factory, small_disk, durable
):
    b = broker_factory(data_dir=small_disk / "data")
    with WireClient(b.port, timeout=30) as c:
        create(c, "full", durable)
        st = os.statvfs(small_disk)
        with open(small_disk / "filler", "wb") as f:  # room for about three requests
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 1100 * 1024))
        batches = [values_of(i) for i in range(8)]
        sent = [send_produce(c, "full", values, 4 * i) for i, values in enumerate(batches)]
        parts = answers(c, sent)
        codes = [p.error_code for p in parts]
        acked = codes.index(ErrorCode.KAFKA_STORAGE_ERROR) if ErrorCode.KAFKA_STORAGE_ERROR in codes else 8
        assert 1 <= acked < 8, codes
        assert codes[:acked] == [0] * acked
        # behind the failed write: failed writes, or (handled after it) a sequence gap
        assert set(codes[acked:]) <= {
            ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}, codes
        kept = [v for values in batches[:acked] for v in values]
        assert read_all(c, "full") == kept
        os.unlink(small_disk / "filler")
        # the producer retries from the first failed request: stored now, after the others
        retry = answers(c, [send_produce(c, "full", batches[acked], 4 * acked)])[0]
        assert (retry.error_code, retry.base_offset) == (0, len(kept))
        kept += batches[acked]
        assert read_all(c, "full") == kept
    b.kill()
    b.start()
    with WireClient(b.port, timeout=30) as c:
        assert read_all(c, "full") == kept


def log_end(client, topic: str) -> int:
    L = messages.ListOffsetsRequest
    r = client.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[
        L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return r.topics[0].partitions[0].offset


def test_an_acks_0_flood_of_large_produces_is_held_to_the_request_limits(broker_factory):
    """Three connections send 1 MB acks=0 requests as fast as the loopback takes them, several
    times faster than the page cache is filled here: the broker stops reading each connection
    at ``connection.max.request.bytes`` in flight (its append stage's queue included), so its
    memory stays near ``queued.max.request.bytes``, a new client is answered within a second,
    and every record sent is stored."""
    per_broker = 48 * MB
    b = broker_factory({"connection.max.request.bytes": str(16 * MB),
                        "queued.max.request.bytes": str(per_broker)})
    with WireClient(b.port, timeout=30) as c:
        create(c, "flood")
        request = frame(ApiKey.PRODUCE, 9, 1, P(
            transactional_id=None, acks=0, timeout_ms=10_000, topic_data=[P.TopicProduceData(
                name="flood", partition_data=[P.PartitionProduceData(
                    index=0, records=build_batch([Record(value=os.urandom(1_000_000))]))])]))
        connections, frames = 3, 300
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(connections)]

        def flood(sock: socket.socket) -> None:
            sock.sendall(api_versions_frame())  # a first request may not be large
            for _ in range(frames):
                sock.sendall(request)

        baseline = rss(b.pid)
        senders = [threading.Thread(target=flood, args=(s,), daemon=True) for s in socks]
        started = time.monotonic()
        with Watch(b.pid, b.port) as watch:
            for t in senders:
                t.start()
            for t in senders:
                t.join(120)
            deadline = time.monotonic() + 60
            while log_end(c, "flood") < connections * frames and time.monotonic() < deadline:
                time.sleep(0.1)
        elapsed = time.monotonic() - started
        grown = watch.max_rss - baseline
        print(f"acks=0 flood: {connections * frames} MB in {elapsed:.1f} s, {watch.summary()}, "
              f"grown {grown / MB:.0f} MiB")
        assert not any(t.is_alive() for t in senders)
        assert log_end(c, "flood") == connections * frames, "every record sent is stored"
        assert grown < per_broker + 48 * MB, f"RSS grew {grown / MB:.0f} MiB"
        assert watch.slowest < 1.0, watch.summary()
        for s in socks:
            s.close()
