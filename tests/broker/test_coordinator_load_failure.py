"""A partition of ``__consumer_offsets`` or ``__transaction_state`` that cannot be read back
at start-up (a byte changed on disk) is not served with part of its state: its groups and
transactional ids answer COORDINATOR_LOAD_IN_PROGRESS, the log says which partition and why,
the metrics count it, and everything else is served as before."""

from __future__ import annotations

import re
import urllib.request

from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from kafkawire import WireClient

from headrace.broker.coordinator.group.group_offsets import partition_for
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages

PARTITIONS = 50  # offsets.topic.num.partitions and transaction.state.log.num.partitions


def two_ids(prefix: str) -> tuple[str, str]:
    """Two ids whose records live in different partitions of the internal topics."""
    first = f"{prefix}-0"
    for i in range(1, 100):
        other = f"{prefix}-{i}"
        if partition_for(other, PARTITIONS) != partition_for(first, PARTITIONS):
            return first, other
    raise AssertionError("no second partition")


def commit(bootstrap: str, group: str, offset: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition("data", 0): OffsetAndMetadata(offset, "", -1)})
    consumer.close()


def fetch_offset(port: int, group: str) -> tuple[int, int]:
    """(group error, committed offset of data-0) by OffsetFetch v8."""
    R = messages.OffsetFetchRequest
    request = R(
        groups=[R.OffsetFetchRequestGroup(group_id=group, topics=[R.OffsetFetchRequestTopics(name="data", partition_indexes=[0])])]
    )
    with WireClient(port) as c:
        (g,) = c.request(ApiKey.OFFSET_FETCH, 8, request).groups
    offset = g.topics[0].partitions[0].committed_offset if g.topics else -1
    return g.error_code, offset


def commit_wire(port: int, group: str, offset: int) -> int:
    R = messages.OffsetCommitRequest
    request = R(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[R.OffsetCommitRequestTopic(name="data", partitions=[R.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])],
    )
    with WireClient(port) as c:
        return c.request(ApiKey.OFFSET_COMMIT, 8, request).topics[0].partitions[0].error_code


def init_producer_id(port: int, transactional_id: str) -> int:
    request = messages.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=10000, producer_id=-1, producer_epoch=-1
    )
    with WireClient(port) as c:
        return c.request(ApiKey.INIT_PRODUCER_ID, 4, request).error_code


def flip_last_batch_byte(directory) -> None:
    """Change one byte inside the records of the last batch of the partition's last segment."""
    segment = sorted(directory.glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    assert data, f"{segment} is empty"
    data[-2] ^= 0x55
    segment.write_bytes(bytes(data))


def test_a_corrupt_internal_partition_is_not_served_partially(tmp_path):
    data_dir = tmp_path / "data"
    bad_group, good_group = two_ids("group")
    bad_txn, good_txn = two_ids("txn")
    with BrokerProcess(data_dir, {"metrics.port": "0"}) as broker:
        broker.create_topic("data")
        commit(broker.bootstrap, bad_group, 7)
        commit(broker.bootstrap, good_group, 11)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": bad_txn})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("data", b"x")
        producer.commit_transaction(30)
        del producer
        assert broker.stop() == 0

    flip_last_batch_byte(data_dir / f"__consumer_offsets-{partition_for(bad_group, PARTITIONS)}")
    flip_last_batch_byte(data_dir / f"__transaction_state-{partition_for(bad_txn, PARTITIONS)}")

    with BrokerProcess(data_dir, {"metrics.port": "0"}) as broker:
        log = "\n".join(broker.lines)
        bad_offsets = partition_for(bad_group, PARTITIONS)
        assert re.search(
            rf"ERROR .*cannot load the groups of __consumer_offsets-{bad_offsets}: "
            rf"__consumer_offsets-{bad_offsets} at offset \d+: the batch's CRC-32C does not match",
            log,
        ), log
        bad_state = partition_for(bad_txn, PARTITIONS)
        assert re.search(
            rf"ERROR .*cannot load the transactional ids of __transaction_state-{bad_state}: .*CRC-32C",
            log,
        ), log

        # the group of the bad partition: neither its offsets nor new commits
        assert fetch_offset(broker.port, bad_group)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert commit_wire(broker.port, bad_group, 9) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        # a group of another partition: its offset as committed, and commits work
        assert fetch_offset(broker.port, good_group) == (ErrorCode.NONE, 11)
        assert commit_wire(broker.port, good_group, 12) == ErrorCode.NONE
        assert fetch_offset(broker.port, good_group) == (ErrorCode.NONE, 12)
        # transactional ids likewise
        assert init_producer_id(broker.port, bad_txn) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert init_producer_id(broker.port, good_txn) == ErrorCode.NONE

        port = int(re.search(r"metrics on http://[\d.]+:(\d+)/metrics", log).group(1))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'headrace_coordinator_partitions_unavailable{topic="__consumer_offsets"} 1.0' in text
        assert 'headrace_coordinator_partitions_unavailable{topic="__transaction_state"} 1.0' in text
