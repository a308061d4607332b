"""Restarts of a broker with many partitions: one offsets checkpoint for the data directory,
no producer-state snapshot for partitions without producers, idempotence kept across a clean
stop and a kill -9, and a data directory of an earlier version (one checkpoint file per
partition) opened without recovery."""

from __future__ import annotations

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches
from headrace.storage.checkpoint import parse
from kafkawire import WireClient

PARTITIONS = 40
IDEMPOTENT = (3, 17)  # partitions written by an idempotent producer
PRODUCER_ID = 4242
TABLE = "partition-offsets-checkpoint"
LEGACY = "log-offsets-checkpoint"
RECOVERING = "no clean-close checkpoint matches the files"


def create(client, name, partitions):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(timeout_ms=60_000, topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, configs=[])]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def produce(client, batches):
    """batches: partition -> batch bytes; returns partition -> (error code, base offset)."""
    P = messages.ProduceRequest
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=30_000,
        topic_data=[P.TopicProduceData(name="many", partition_data=[
            P.PartitionProduceData(index=i, records=b) for i, b in batches.items()])]))
    return {p.index: (p.error_code, p.base_offset) for p in r.responses[0].partition_responses}


def plain(tag, parts):
    return {i: build_batch([Record(value=b"%s-%d" % (tag, i))]) for i in parts}


def idempotent(tag, seq):
    return {
        i: build_batch([Record(value=b"%s-%d" % (tag, i))], producer_id=PRODUCER_ID,
                       producer_epoch=0, base_sequence=seq)
        for i in IDEMPOTENT
    }


def fetch_all(client):
    F = messages.FetchRequest
    r = client.request(ApiKey.FETCH, 12, F(
        max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
        topics=[F.FetchTopic(topic="many", partitions=[F.FetchPartition(
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


def snapshots(data_dir, i):
    return sorted(p.name for p in (data_dir / f"many-{i}").glob("producer-state-*.json"))


def test_restarts_with_one_checkpoint_file(tmp_path):
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        with WireClient(broker.port, timeout=60) as client:
            create(client, "many", PARTITIONS)
            written = [i for i in range(PARTITIONS) if i % 4 == 0]
            assert produce(client, plain(b"a", written)) == dict.fromkeys(
                written, (ErrorCode.NONE, 0))
            assert produce(client, idempotent(b"i", 0)) == dict.fromkeys(
                IDEMPOTENT, (ErrorCode.NONE, 0))
        assert broker.stop() == 0

        table = parse((data_dir / TABLE).read_text())
        assert {f"many-{i}" for i in range(PARTITIONS)} <= set(table)
        assert all(table[f"many-{i}"].end_offset is not None for i in range(PARTITIONS))
        for i in range(PARTITIONS):
            assert not (data_dir / f"many-{i}" / LEGACY).exists()
            assert bool(snapshots(data_dir, i)) == (i in IDEMPOTENT), i

        want = {i: [b"a-%d" % i] if i in written else [] for i in range(PARTITIONS)}
        for i in IDEMPOTENT:
            want[i] = want[i] + [b"i-%d" % i]
        broker.start()
        assert not any(RECOVERING in line for line in broker.lines)
        with WireClient(broker.port, timeout=60) as client:
            assert fetch_all(client) == want
            # the producer state survived the clean stop: a retry is not appended again
            retry = produce(client, idempotent(b"i", 0))
            assert retry == {i: (ErrorCode.NONE, len(want[i]) - 1) for i in IDEMPOTENT}
            assert produce(client, idempotent(b"j", 1))[IDEMPOTENT[0]][0] == ErrorCode.NONE
            assert produce(client, plain(b"b", [1]))[1] == (ErrorCode.NONE, 0)
        broker.kill()
        for i in IDEMPOTENT:
            want[i].append(b"j-%d" % i)
        want[1].append(b"b-1")

        broker.start()  # after kill -9: the partitions untouched since the open are not read
        assert any("recovered" in line for line in broker.lines)
        with WireClient(broker.port, timeout=60) as client:
            assert fetch_all(client) == want
            retry = produce(client, idempotent(b"j", 1))
            assert retry == {i: (ErrorCode.NONE, len(want[i]) - 1) for i in IDEMPOTENT}
        assert broker.stop() == 0
    finally:
        broker.kill()


def test_data_directory_of_an_earlier_version(tmp_path):
    """Each partition's own ``log-offsets-checkpoint`` (what earlier versions wrote) is read
    when the data directory has no table: the clean start recovers nothing, and the first
    write of the table replaces those files."""
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        with WireClient(broker.port, timeout=60) as client:
            create(client, "many", PARTITIONS)
            produce(client, plain(b"a", range(PARTITIONS)))
        assert broker.stop() == 0
        table = parse((data_dir / TABLE).read_text())
        for name, cp in table.items():
            lines = [
                "version 0",
                f"recovery_point {cp.recovery_point}",
                f"log_start_offset {cp.log_start_offset}",
                f"end_offset {cp.end_offset}",
                f"end_segment {cp.end_segment}",
                f"end_size {cp.end_size}",
            ]
            (data_dir / name / LEGACY).write_text("\n".join(lines) + "\n")
        (data_dir / TABLE).unlink()

        broker.start()
        assert not any(RECOVERING in line for line in broker.lines)
        with WireClient(broker.port, timeout=60) as client:
            assert fetch_all(client) == {i: [b"a-%d" % i] for i in range(PARTITIONS)}
        assert broker.stop() == 0
        assert parse((data_dir / TABLE).read_text()) == table
        assert not any((data_dir / name / LEGACY).exists() for name in table)
    finally:
        broker.kill()
