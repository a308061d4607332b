"""A broker whose RLIMIT_NOFILE is far below three descriptors per partition creates the
partitions, serves produce and fetch to every one of them, and restarts (cleanly and after
kill -9) with the same limit: segment files are opened on demand within
``log.max.open.files``."""

from __future__ import annotations

import os

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches
from kafkawire import WireClient

NOFILE = 256
PARTITIONS = 300  # three descriptors each would need 900


def create(client, name, partitions):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(timeout_ms=60_000, topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, configs=[])]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def produce_all(client, topic, tag):
    P = messages.ProduceRequest
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=30_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[
            P.PartitionProduceData(index=i, records=build_batch(
                [Record(key=b"k", value=b"%s-%d" % (tag, i))]))
            for i in range(PARTITIONS)])]))
    codes = {p.index: p.error_code for p in r.responses[0].partition_responses}
    assert codes == dict.fromkeys(range(PARTITIONS), ErrorCode.NONE)


def fetch_all(client, topic):
    """partition -> list of values, every partition read from offset 0 in one request."""
    F = messages.FetchRequest
    r = client.request(ApiKey.FETCH, 12, F(
        max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
        topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
            partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
            for i in range(PARTITIONS)])]))
    out = {}
    for p in r.responses[0].partitions:
        assert p.error_code == ErrorCode.NONE
        data = memoryview(p.records or b"")
        values = []
        for pos, size, _h in iter_batches(data):
            values += [v for _o, _ts, _k, v, _ in decode_records(data[pos:pos + size])]
        out[p.partition_index] = values
    return out


def expected(*tags):
    return {i: [b"%s-%d" % (t, i) for t in tags] for i in range(PARTITIONS)}


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_partitions_beyond_the_descriptor_limit(tmp_path):
    broker = BrokerProcess(tmp_path / "data", rlimit_nofile=NOFILE)
    broker.start()
    try:
        with WireClient(broker.port, timeout=60) as client:
            create(client, "wide", PARTITIONS)
            produce_all(client, "wide", b"a")
            assert fetch_all(client, "wide") == expected(b"a")
            produce_all(client, "wide", b"b")
            assert fetch_all(client, "wide") == expected(b"a", b"b")
            assert open_fds(broker.pid) <= NOFILE
        assert broker.stop() == 0

        broker.start()
        with WireClient(broker.port, timeout=60) as client:
            assert fetch_all(client, "wide") == expected(b"a", b"b")
            produce_all(client, "wide", b"c")
        broker.kill()

        broker.start()  # recovery after kill -9, under the same limit
        assert any("recovered" in line for line in broker.lines)
        with WireClient(broker.port, timeout=60) as client:
            assert fetch_all(client, "wide") == expected(b"a", b"b", b"c")
            assert open_fds(broker.pid) <= NOFILE
    finally:
        broker.kill()
