"""CreateTopics and CreatePartitions are all or nothing per topic: a topic whose partitions
cannot all be made (a full disk) leaves nothing behind and gets an error code; the other topics
of the request are created; the connection stays open. The open-files limit no longer bounds
the partitions."""

from __future__ import annotations

import json

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

C = messages.CreateTopicsRequest
CP = messages.CreatePartitionsRequest
NOFILE = 256


def create(client, *topics: tuple[str, int]):
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(timeout_ms=60_000, topics=[
        C.CreatableTopic(name=name, num_partitions=n, replication_factor=1)
        for name, n in topics]))
    return r.topics


def grow(client, *topics: tuple[str, int]):
    r = client.request(ApiKey.CREATE_PARTITIONS, 3, CP(timeout_ms=60_000, validate_only=False,
                                                        topics=[
        CP.CreatePartitionsTopic(name=name, count=n, assignments=None) for name, n in topics]))
    return r.results


def partitions(client, name) -> int:
    M = messages.MetadataRequest
    r = client.request(ApiKey.METADATA, 12, M(
        topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False))
    t = r.topics[0]
    return -1 if t.error_code else len(t.partitions)


def produce(client, topic, partition=0) -> int:
    P = messages.ProduceRequest
    records = build_batch([Record(key=b"k", value=b"v", timestamp=1_700_000_000_000)])
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[
            P.PartitionProduceData(index=partition, records=records)])]))
    return r.responses[0].partition_responses[0].error_code


def saved_topics(data_dir) -> dict:
    return json.loads((data_dir / "topics.json").read_text())


def leftovers(data_dir, name) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(name + "-"))


def test_partitions_are_not_limited_by_the_open_files_limit(tmp_path):
    """Logs open their files under one descriptor budget, so a topic with four times more
    partitions than the broker's open-files limit is created, served and reopened."""
    data = tmp_path / "data"
    b = BrokerProcess(data, {"auto.create.topics.enable": "false"}, rlimit_nofile=NOFILE)
    b.start()
    try:
        with WireClient(b.port) as c:
            (huge,) = create(c, ("huge", 4 * NOFILE))
            assert huge.error_code == ErrorCode.NONE, huge.error_message
            for partition in range(0, 4 * NOFILE, 97):
                assert produce(c, "huge", partition) == ErrorCode.NONE
        b.stop()
        b.start()
        with WireClient(b.port) as c:
            assert partitions(c, "huge") == 4 * NOFILE
            assert produce(c, "huge", 4 * NOFILE - 1) == ErrorCode.NONE
    finally:
        b.stop()


@pytest.mark.parametrize("small_disk", ["4m,nr_inodes=300"], indirect=True)
def test_full_disk_leaves_nothing_of_the_topic(small_disk):
    data = small_disk / "data"
    b = BrokerProcess(data, {"auto.create.topics.enable": "false"}).start()
    try:
        with WireClient(b.port) as c:
            huge, small = create(c, ("huge", 400), ("small", 1))
            assert huge.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert "no space left" in huge.error_message
            assert small.error_code == ErrorCode.NONE
            assert leftovers(data, "huge") == []
            assert "huge" not in saved_topics(data)
            assert produce(c, "small") == ErrorCode.NONE
            assert partitions(c, "huge") == -1
            # growing a topic on the full disk: nothing added, the topic as it was
            grown, other = grow(c, ("small", 400), ("missing", 3))
            assert grown.error_code == ErrorCode.KAFKA_STORAGE_ERROR, grown
            assert other.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert leftovers(data, "small") == ["small-0"]
            assert saved_topics(data)["small"]["partitions"] == 1
            assert partitions(c, "small") == 1
            assert produce(c, "small") == ErrorCode.NONE
    finally:
        b.kill()


def test_a_leftover_directory_does_not_come_back_under_a_new_topic(tmp_path):
    """A crash between making a topic's directories and saving topics.json leaves them
    behind; a later topic of that name starts empty."""
    import shutil

    data = tmp_path / "data"
    b = BrokerProcess(data, {"auto.create.topics.enable": "false"}).start()
    try:
        with WireClient(b.port) as c:
            assert create(c, ("old", 1))[0].error_code == ErrorCode.NONE
            for _ in range(3):
                assert produce(c, "old") == ErrorCode.NONE
        b.stop()
        shutil.copytree(data / "old-0", data / "new-0")  # as a crash would leave it
        b.start()
        with WireClient(b.port) as c:
            assert create(c, ("new", 1))[0].error_code == ErrorCode.NONE
            L = messages.ListOffsetsRequest
            r = c.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[
                L.ListOffsetsTopic(name=n, partitions=[
                    L.ListOffsetsPartition(partition_index=0, timestamp=-1)])
                for n in ("old", "new")]))
            assert [t.partitions[0].offset for t in r.topics] == [3, 0]
    finally:
        b.kill()
