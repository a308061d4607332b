"""Fetch responses sent from the segment files (sendfile): what comes back is exactly what
was produced, across segment rolls, and while retention, compaction or a topic deletion
removes the very segment being sent to a slow reader; a response in flight holds no copy
of its records in the broker's memory; and its share of the response budget comes back
when its connection closes mid-send."""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest
from boundsprobe import rss
from kafkawire import WireClient

from headrace.protocol import (
    ApiKey,
    ErrorCode,
    RequestHeader,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_header,
    messages,
    response_header_is_flexible,
)
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches

MB = 1 << 20
FAST = {"log.retention.check.interval.ms": "100", "log.cleaner.backoff.ms": "100"}
F = messages.FetchRequest


def create(client, name, partitions=1, **configs):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[C.CreatableTopicConfig(name=k, value=str(v)) for k, v in configs.items()])]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def produce(client, topic, partition, records):
    P = messages.ProduceRequest
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(
            index=partition, records=build_batch(records))])]))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def fill(client, topic, batches, partition=0, seed=0, keys=10, value_size=50_000):
    """``batches`` batches of 4 records of random values; returns [(key, value)] by offset."""
    rng = random.Random(seed)
    out = []
    for _ in range(batches):
        recs = [Record(key=b"k%d" % rng.randrange(keys), value=rng.randbytes(value_size))
                for _ in range(4)]
        produce(client, topic, partition, recs)
        out += [(r.key, r.value) for r in recs]
    return out


def fetch_request(topic, max_bytes, offset=0, max_wait_ms=500):
    return F(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
             topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                 partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])


class SlowReader:
    """A fetch sent on a socket with a small receive buffer, its response read bit by bit."""

    def __init__(self, port, request, version=12):
        self.version = version
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(30)
        body = encode_request_header(RequestHeader(ApiKey.FETCH, version, 7, "slow"))
        body += encode_request(ApiKey.FETCH, version, request)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        self.data = bytearray()
        self.size = struct.unpack(">i", self.read(4))[0]

    def read(self, n, pause=0.0):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(256 * 1024, n - len(out)))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
            if pause:
                time.sleep(pause)
        return bytes(out)

    def read_some(self, n):
        self.data += self.read(n)

    def finish(self):
        self.data += self.read(self.size - len(self.data), pause=0.0005)
        cid, offset = decode_response_header(
            self.data, response_header_is_flexible(ApiKey.FETCH, self.version))
        assert cid == 7
        return decode_response(ApiKey.FETCH, self.version, self.data, offset)

    def close(self):
        self.sock.close()


def records_by_offset(records) -> dict[int, tuple[bytes, bytes]]:
    data = memoryview(records or b"")
    out = {}
    for pos, size, _ in iter_batches(data):
        for o, _ts, k, v, _ in decode_records(data[pos:pos + size]):
            out[o] = (k, v)
    return out


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_consumer_reads_back_exactly_what_was_produced_across_segment_rolls(broker):
    from kafka import KafkaConsumer, TopicPartition

    produced = {}
    with WireClient(broker.port, timeout=30) as c:
        # batches of some 200 KB (sent from the file) in segments of 1 MiB
        create(c, "rolls", partitions=2, **{"segment.bytes": MB})
        for p in range(2):
            produced[p] = fill(c, "rolls", 40, partition=p, seed=p)
    segments = os.listdir(broker.data_dir / "rolls-0")
    assert sum(name.endswith(".log") for name in segments) >= 6
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", max_partition_fetch_bytes=3 * MB,
        fetch_max_bytes=50 * MB,
    )
    consumer.assign([TopicPartition("rolls", p) for p in range(2)])
    consumed = {0: [], 1: []}
    deadline = time.monotonic() + 60
    while sum(map(len, consumed.values())) < 320 and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=1000).items():
            consumed[tp.partition] += [(m.offset, m.key, m.value) for m in msgs]
    consumer.close()
    for p in range(2):
        assert [o for o, _, _ in consumed[p]] == list(range(len(produced[p])))
        assert [(k, v) for _, k, v in consumed[p]] == produced[p]


def segment_gone(path, inode):
    try:
        return os.stat(path).st_ino != inode
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("removal", ["retention", "compaction", "topic deletion"])
def test_a_segment_removed_while_it_is_sent_still_arrives_intact(broker_factory, removal):
    broker = broker_factory(FAST)
    with WireClient(broker.port, timeout=30) as c:
        create(c, "held", **{"segment.bytes": 16 * MB})
        produced = fill(c, "held", 100, value_size=100_000)  # 40 MB: 2 full segments
        first = broker.data_dir / "held-0" / ("0" * 20 + ".log")
        inode = os.stat(first).st_ino
        # a response holding most of the first segment, far more than socket buffers hold
        reader = SlowReader(broker.port, fetch_request("held", 50 * MB))
        assert reader.size > 12 * MB
        reader.read_some(256 * 1024)
        I = messages.IncrementalAlterConfigsRequest
        if removal == "topic deletion":
            D = messages.DeleteTopicsRequest
            r = c.request(ApiKey.DELETE_TOPICS, 4, D(topic_names=["held"], timeout_ms=10_000))
            assert r.responses[0].error_code == ErrorCode.NONE
        else:
            configs = (
                [("retention.bytes", "1")]
                if removal == "retention"
                else [("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.01")]
            )
            r = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, I(validate_only=False, resources=[
                I.AlterConfigsResource(resource_type=2, resource_name="held", configs=[
                    I.AlterableConfig(name=n, config_operation=0, value=v)
                    for n, v in configs])]))
            assert r.responses[0].error_code == ErrorCode.NONE
        assert wait_for(lambda: segment_gone(first, inode)), f"{removal} left the segment"
    response = reader.finish()
    reader.close()
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    got = records_by_offset(part.records)
    assert len(got) * 100_000 > 12 * MB
    assert sorted(got) == list(range(len(got)))
    assert all(got[o] == produced[o] for o in got)
    assert broker.alive


def test_a_response_in_flight_holds_no_copy_and_its_budget_returns_when_closed_mid_send(
    broker_factory,
):
    broker = broker_factory({"queued.max.response.bytes": str(64 * MB)})
    with WireClient(broker.port, timeout=30) as c:
        create(c, "budget")
        produced = fill(c, "budget", 100, value_size=100_000)  # 40 MB, one segment
        assert records_by_offset(
            c.request(ApiKey.FETCH, 12, fetch_request("budget", 2 * MB)).responses[0]
            .partitions[0].records
        )[0] == produced[0]
        baseline = rss(broker.pid)
        reader = SlowReader(broker.port, fetch_request("budget", 50 * MB))
        assert reader.size > 38 * MB
        reader.read_some(100_000)
        grown = rss(broker.pid) - baseline
        assert grown < 16 * MB, f"RSS grew {grown / MB:.0f} MiB with 40 MB in flight"
        # it holds 50 of the 64 MB budget: another 50 MB fetch waits, and answers empty
        r = c.request(ApiKey.FETCH, 12, fetch_request("budget", 50 * MB, max_wait_ms=300))
        assert not r.responses[0].partitions[0].records
        reader.close()  # mid-send
        time.sleep(0.5)
        started = time.monotonic()
        r = c.request(ApiKey.FETCH, 12, fetch_request("budget", 50 * MB, max_wait_ms=3000))
        assert time.monotonic() - started < 2.5
        got = records_by_offset(r.responses[0].partitions[0].records)
        assert len(got) == len(produced)
        assert all(got[o] == produced[o] for o in got)
    assert broker.alive


def test_a_fetch_reads_on_the_event_loop_what_is_in_memory_and_in_a_thread_what_is_not(tmp_path):
    """The same answer either way; ``headrace_fetch_reads_total`` says where each read ran."""
    import headrace
    from test_metrics import scrape, value

    from headrace.storage import nowait_reads

    if not nowait_reads():
        pytest.skip("no RWF_NOWAIT reads here: every fetch reads in a thread")
    pytest.importorskip("headrace.storage._pages", reason="the C extension was not built")

    def reads(port) -> tuple[float, float]:
        samples = scrape(port)
        return tuple(
            value(samples, "headrace_fetch_reads_total", thread=t) for t in ("event_loop", "read_pool")
        )

    def evict(directory) -> None:  # clean pages out of the page cache (the broker fsyncs them)
        for name in os.listdir(directory):
            fd = os.open(directory / name, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

    settings = {"metrics.port": 0, "log.flush.interval.messages": 1, "log.segment.bytes": MB}
    with headrace.Broker(settings, data_dir=tmp_path / "data") as broker:
        port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
        with WireClient(port, timeout=30) as c:
            create(c, "cold")
            produced = fill(c, "cold", 12)  # 200 KB batches: old segments and the active one
            segments = broker.data_dir / "cold-0"
            assert sum(name.endswith(".log") for name in os.listdir(segments)) >= 2

            def read_all() -> list:
                got, offset = {}, 0
                while offset < len(produced):
                    r = c.request(ApiKey.FETCH, 12, fetch_request("cold", 50 * MB, offset))
                    part = r.responses[0].partitions[0]
                    assert part.error_code == ErrorCode.NONE
                    got.update(records_by_offset(part.records))
                    offset = max(got) + 1
                return [got[o] for o in range(len(produced))]

            # the first read of a rolled segment maps its index (a read thread's job) ...
            assert read_all() == produced
            before = reads(broker.metrics_port)
            assert read_all() == produced  # ... after which all is in memory
            warm = reads(broker.metrics_port)
            assert warm[0] > before[0] and warm[1] == before[1]
            evict(segments)
            assert read_all() == produced  # from the disk, in the read threads
            cold = reads(broker.metrics_port)
            assert cold[1] > warm[1] and cold[0] == warm[0]
            assert read_all() == produced  # in memory again
            again = reads(broker.metrics_port)
            assert again[0] > cold[0] and again[1] == cold[1]
