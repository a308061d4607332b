"""One broker per data directory: a second broker on a directory in use exits at once."""

from __future__ import annotations

import subprocess
import sys
import time

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient


def create(client, name):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[
        C.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]))
    assert r.topics[0].error_code == ErrorCode.NONE


def produce(client, topic, value: bytes) -> int:
    P = messages.ProduceRequest
    records = build_batch([Record(key=b"k", value=value, timestamp=1_700_000_000_000)])
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[
            P.PartitionProduceData(index=0, records=records)])]))
    return r.responses[0].partition_responses[0].error_code


def high_watermark(client, topic) -> int:
    L = messages.ListOffsetsRequest
    r = client.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[
        L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return r.topics[0].partitions[0].offset


def serve(data_dir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--port", "0", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=30,
    )


def test_second_broker_on_a_directory_in_use_exits_3_and_first_keeps_serving(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    try:
        with WireClient(first.port) as c:
            create(c, "kept")
            for i in range(10):
                assert produce(c, "kept", b"v%d" % i) == ErrorCode.NONE
        assert (data / ".lock").read_text().strip() == str(first.pid)
        started = time.monotonic()
        done = serve(data)
        assert done.returncode == 3, done.stderr
        assert time.monotonic() - started < 10
        assert str(data) in done.stderr and f"pid {first.pid}" in done.stderr, done.stderr
        # the first broker is untouched: it serves, its data is all there, no recovery ran
        assert first.alive
        with WireClient(first.port) as c:
            assert produce(c, "kept", b"after") == ErrorCode.NONE
            assert high_watermark(c, "kept") == 11
        assert (data / ".lock").read_text().strip() == str(first.pid)
        first.kill()  # SIGKILL: the kernel releases the lock
        second = BrokerProcess(data).start()
        try:
            assert (data / ".lock").read_text().strip() == str(second.pid)
            with WireClient(second.port) as c:
                assert high_watermark(c, "kept") == 11
        finally:
            second.stop()
    finally:
        first.kill()


def test_clean_stop_releases_the_lock(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    assert b.stop() == 0
    b.start()  # the same directory, right away
    assert (data / ".lock").read_text().strip() == str(b.pid)
    b.stop()
