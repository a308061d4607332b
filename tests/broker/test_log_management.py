"""Retention, DeleteRecords, AlterConfigs/IncrementalAlterConfigs, compaction and disk faults,
through the wire against a real broker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.compression import available_compressions
from headrace.protocol.records import (
    Record,
    build_batch,
    decode_records,
    iter_batches,
)

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

FAST = {"log.retention.check.interval.ms": "100", "log.cleaner.backoff.ms": "100"}


def create(client, name, **configs):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1,
        configs=[C.CreatableTopicConfig(name=k, value=str(v)) for k, v in configs.items()])]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def produce(client, topic, records, compression=0):
    P = messages.ProduceRequest
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(
            index=0, records=build_batch(records, compression=compression))])]))
    return r.responses[0].partition_responses[0]


def fetch(client, topic, offset=0, max_bytes=1 << 20):
    F = messages.FetchRequest
    r = client.request(ApiKey.FETCH, 12, F(
        max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
        topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])]))
    return r.responses[0].partitions[0]


def read_all(client, topic):
    """(offset, key, value) of every record from the log start offset on."""
    p = fetch(client, topic)
    if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        p = fetch(client, topic, p.log_start_offset)
    out, offset = [], p.log_start_offset
    while offset < p.high_watermark:
        p = fetch(client, topic, offset)
        assert p.error_code == ErrorCode.NONE
        data = memoryview(p.records or b"")
        if not data:
            break
        for pos, size, h in iter_batches(data):
            for o, _ts, k, v, _ in decode_records(data[pos:pos + size]):
                if o >= offset:
                    out.append((o, k, v))
            offset = h.base_offset + h.last_offset_delta + 1
    return out


def list_offset(client, topic, timestamp):
    L = messages.ListOffsetsRequest
    r = client.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[
        L.ListOffsetsTopic(name=topic, partitions=[L.ListOffsetsPartition(
            partition_index=0, timestamp=timestamp)])]))
    return r.topics[0].partitions[0].offset


def delete_records(client, topic, offset):
    D = messages.DeleteRecordsRequest
    r = client.request(ApiKey.DELETE_RECORDS, 2, D(timeout_ms=1000, topics=[
        D.DeleteRecordsTopic(name=topic, partitions=[
            D.DeleteRecordsPartition(partition_index=0, offset=offset)])]))
    p = r.topics[0].partitions[0]
    return p.error_code, p.low_watermark


def incremental(client, topic, *ops, validate_only=False):
    I = messages.IncrementalAlterConfigsRequest
    r = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, I(validate_only=validate_only, resources=[
        I.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            I.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])]))
    return r.responses[0].error_code


def describe(client, topic, name):
    D = messages.DescribeConfigsRequest
    r = client.request(ApiKey.DESCRIBE_CONFIGS, 4, D(include_synonyms=False,
                       include_documentation=False, resources=[
        D.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=[name])]))
    c = r.results[0].configs[0]
    return c.value, c.config_source


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def now_ms():
    return int(time.time() * 1000)


def test_delete_records_moves_the_log_start(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create(c, "dr", **{"segment.bytes": 1024})
        for i in range(60):
            assert produce(c, "dr", [Record(value=b"v%03d" % i + b"." * 50,
                                            timestamp=now_ms())]).error_code == 0
        assert delete_records(c, "dr", 30) == (ErrorCode.NONE, 30)
        assert delete_records(c, "dr", 10) == (ErrorCode.NONE, 30)  # never backwards
        assert delete_records(c, "dr", 61)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(c, "dr", 10).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        p = fetch(c, "dr", 30)
        assert p.error_code == ErrorCode.NONE and p.log_start_offset == 30
        assert list_offset(c, "dr", -2) == 30
        assert [o for o, _, _ in read_all(c, "dr")] == list(range(30, 60))
        logs = sorted(n for n in os.listdir(b.data_dir / "dr-0") if n.endswith(".log"))
        assert int(logs[0][:-4]) <= 30 < int(logs[1][:-4])  # the segments below are gone
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert list_offset(c, "dr", -2) == 30
        assert delete_records(c, "dr", -1) == (ErrorCode.NONE, 60)  # -1: the high watermark
        assert read_all(c, "dr") == []
        create(c, "compacted", **{"cleanup.policy": "compact"})
        assert delete_records(c, "compacted", 0)[0] == ErrorCode.POLICY_VIOLATION


def test_retention_through_incremental_alter_configs(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create(c, "ret", **{"segment.bytes": 1024})
        old = now_ms() - 3_600_000
        for i in range(30):
            produce(c, "ret", [Record(value=b"x" * 100, timestamp=old + i)])
        for i in range(5):
            produce(c, "ret", [Record(value=b"y" * 100, timestamp=now_ms())])
        time.sleep(0.5)
        assert list_offset(c, "ret", -2) == 0  # default retention: 7 days
        assert incremental(c, "ret", ("retention.ms", 9, "1")) == ErrorCode.INVALID_REQUEST
        assert incremental(c, "ret", ("no.such", 0, "1")) == ErrorCode.INVALID_CONFIG
        assert incremental(c, "ret", ("retention.ms", 0, "-5")) == ErrorCode.INVALID_CONFIG
        assert incremental(c, "ret", ("retention.ms", 0, "60000"), validate_only=True) == 0
        assert describe(c, "ret", "retention.ms")[1] != 1
        assert incremental(c, "ret", ("retention.ms", 0, "60000")) == ErrorCode.NONE
        assert describe(c, "ret", "retention.ms") == ("60000", 1)
        # the old records go (segment by segment), the recent ones stay
        assert wait_for(lambda: list_offset(c, "ret", -2) >= 25)
        start = list_offset(c, "ret", -2)
        assert start <= 30
        assert [o for o, _, _ in read_all(c, "ret")] == list(range(start, 35))
        # DELETE goes back to the default; AlterConfigs replaces the whole set
        assert incremental(c, "ret", ("retention.ms", 1, None)) == ErrorCode.NONE
        assert describe(c, "ret", "retention.ms")[1] == 5
        A = messages.AlterConfigsRequest
        r = c.request(ApiKey.ALTER_CONFIGS, 2, A(validate_only=False, resources=[
            A.AlterConfigsResource(resource_type=2, resource_name="ret", configs=[
                A.AlterableConfig(name="retention.bytes", value="1")])]))
        assert r.responses[0].error_code == ErrorCode.NONE
        assert describe(c, "ret", "segment.bytes")[1] == 5  # no longer set on the topic
        # every segment but the active one goes
        active = max(int(n[:-4]) for n in os.listdir(b.data_dir / "ret-0") if n.endswith(".log"))
        assert wait_for(lambda: list_offset(c, "ret", -2) == active)
    b.stop()
    b.start()
    with WireClient(b.port) as c:
        assert describe(c, "ret", "retention.bytes") == ("1", 1)
        assert list_offset(c, "ret", -2) == active


@pytest.mark.parametrize("compression", available_compressions())
def test_compaction_keeps_the_latest_value_per_key(broker_factory, compression):
    import random

    b = broker_factory(FAST)
    rng = random.Random(compression)
    model = {}
    with WireClient(b.port) as c:
        create(c, "cmp", **{"cleanup.policy": "compact", "segment.bytes": 2048,
                            "min.cleanable.dirty.ratio": "0.01"})
        for _ in range(200):
            recs = []
            for _ in range(rng.randint(1, 5)):
                k = b"key%d" % rng.randrange(20)
                v = None if rng.random() < 0.1 else rng.randbytes(rng.randint(1, 40))
                recs.append(Record(key=k, value=v, timestamp=now_ms()))
                model[k] = v
            assert produce(c, "cmp", recs, compression).error_code == ErrorCode.NONE
        total = 200 * 3
        assert wait_for(lambda: len(read_all(c, "cmp")) < total // 3)
        records = read_all(c, "cmp")
        latest = {}
        for _, k, v in records:
            latest[k] = v
        assert latest == model
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(set(offsets))


def test_unusable_data_directory_is_a_clear_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    done = subprocess.run([sys.executable, "-m", "headrace", "serve", "--port", "0",
                           "--data-dir", str(not_a_dir)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert "data directory" in done.stderr and str(not_a_dir) in done.stderr
    # a partition directory that cannot be opened
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    with WireClient(b.port) as c:
        create(c, "t")
    b.stop()
    import shutil
    shutil.rmtree(data / "t-0")
    (data / "t-0").write_text("not a directory")
    done = subprocess.run([sys.executable, "-m", "headrace", "serve", "--port", "0",
                           "--data-dir", str(data)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "cannot open" in done.stderr and "t-0" in done.stderr


def test_disk_full_gives_storage_errors_and_recovers(broker_factory, small_disk):
    b = broker_factory({"log.flush.interval.messages": "1"}, data_dir=small_disk / "data")
    acked = []
    with WireClient(b.port) as c:
        create(c, "full")
        st = os.statvfs(small_disk)
        with open(small_disk / "filler", "wb") as f:
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 96 * 1024))
        errors = 0
        for i in range(400):
            value = b"%05d" % i + os.urandom(2000)
            p = produce(c, "full", [Record(key=b"k", value=value, timestamp=now_ms())])
            if p.error_code == ErrorCode.NONE:
                acked.append(value)
            else:
                assert p.error_code == ErrorCode.KAFKA_STORAGE_ERROR
                errors += 1
                if errors >= 3:
                    break
        assert errors >= 3 and acked
        # reads keep working and everything acknowledged is intact
        assert [v for _, _, v in read_all(c, "full")] == acked
        os.unlink(small_disk / "filler")  # space returns
        for i in range(5):
            value = b"after%d" % i
            assert produce(c, "full", [Record(key=b"k", value=value,
                                               timestamp=now_ms())]).error_code == 0
            acked.append(value)
        assert [v for _, _, v in read_all(c, "full")] == acked
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert [v for _, _, v in read_all(c, "full")] == acked


@pytest.mark.parametrize("backend", ["os", "io_uring"])
def test_io_backend_setting(broker_factory, tmp_path, backend):
    from headrace.storage.io import available_backends

    if backend not in available_backends():  # a clear refusal at start, not a crash later
        done = subprocess.run([sys.executable, "-m", "headrace", "serve", "--port", "0",
                               "--data-dir", str(tmp_path), "--override", f"log.io.backend={backend}"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "log.io.backend" in done.stderr, done.stderr
        pytest.skip(f"{backend} is not available here: {done.stderr.strip()}")
    b = broker_factory({"log.io.backend": backend, "log.flush.interval.messages": "1"})
    with WireClient(b.port) as c:
        create(c, "io")
        values = [os.urandom(100) for _ in range(50)]
        for v in values:
            assert produce(c, "io", [Record(value=v, timestamp=now_ms())]).error_code == 0
        assert [v for _, _, v in read_all(c, "io")] == values
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert [v for _, _, v in read_all(c, "io")] == values


def test_unknown_io_backend_is_a_config_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "headrace", "serve", "--port", "0",
                           "--data-dir", str(tmp_path), "--override", "log.io.backend=aio"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "log.io.backend" in done.stderr
