"""Topic administration and offset lookups through real admin clients."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def produce(broker, topic, values, timestamps=None, partition=0):
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i, value in enumerate(values):
        kwargs = {"timestamp": timestamps[i]} if timestamps else {}
        producer.produce(topic, value=value, partition=partition, **kwargs)
        producer.flush(10)  # one batch each, so each record has its own batch timestamp
    assert producer.flush(30) == 0


def test_create_describe_grow_and_delete_topics(admin, broker):
    futures = admin.create_topics([
        NewTopic("orders", 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "delete"}),
        NewTopic("audit", 1, 1),
    ])
    for f in futures.values():
        f.result(30)
    with pytest.raises(ck.KafkaException) as exists:
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
    assert exists.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS

    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["orders"].partitions) == 3
    assert metadata.topics["orders"].partitions[0].leader == 1

    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == str(1 << 30)
    assert configs["segment.bytes"].is_default

    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(30)
    assert broker_configs["num.partitions"].value == "1"

    admin.create_partitions([NewPartitions("orders", 5)])["orders"].result(30)
    assert len(admin.list_topics(timeout=10).topics["orders"].partitions) == 5
    with pytest.raises(ck.KafkaException):
        admin.create_partitions([NewPartitions("orders", 2)])["orders"].result(30)

    produce(broker, "orders", [b"one", b"two"], partition=4)
    admin.delete_topics(["orders"])["orders"].result(30)
    assert "orders" not in admin.list_topics(timeout=10).topics
    assert "audit" in admin.list_topics(timeout=10).topics
    assert not list(broker.data_dir.glob("orders-*")), "partition directories removed"


def test_describe_cluster(admin):
    cluster = admin.describe_cluster().result(30)
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.controller.id == 1
    assert cluster.cluster_id


def test_auto_created_topic_on_first_produce(broker):
    produce(broker, "made-on-demand", [b"hello"])
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("made-on-demand", 0, 0)])
    msg = None
    deadline = time.monotonic() + 20
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
    consumer.close()
    assert msg is not None and msg.value() == b"hello"


def test_list_offsets_earliest_latest_by_time_and_max_timestamp(admin, broker):
    admin.create_topics([NewTopic("clock", 1, 1)])["clock"].result(30)
    base = 1_700_000_000_000
    stamps = [base + 10, base + 20, base + 50, base + 30]  # the largest is not the last
    produce(broker, "clock", [b"a", b"b", b"c", b"d"], timestamps=stamps)
    tp = ck.TopicPartition("clock", 0)

    def offset(spec):
        return admin.list_offsets({tp: spec})[tp].result(30)

    assert offset(OffsetSpec.earliest()).offset == 0
    assert offset(OffsetSpec.latest()).offset == 4
    top = offset(OffsetSpec.max_timestamp())
    assert (top.offset, top.timestamp) == (2, base + 50)
    assert offset(OffsetSpec.for_timestamp(base + 15)).offset == 1
    assert offset(OffsetSpec.for_timestamp(base + 50)).offset == 2
    assert offset(OffsetSpec.for_timestamp(base + 60)).offset == -1

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    found = consumer.offsets_for_times([ck.TopicPartition("clock", 0, base + 21)], timeout=10)
    consumer.close()
    assert found[0].offset == 2


def test_log_append_time_topics_stamp_batches_with_the_broker_clock(admin, broker):
    admin.create_topics([NewTopic("stamped", 1, 1, config={"message.timestamp.type": "LogAppendTime"})])["stamped"].result(30)
    before = int(time.time() * 1000)
    produce(broker, "stamped", [b"old", b"older"], timestamps=[1_000, 2_000])
    after = int(time.time() * 1000)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("stamped", 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.timestamp())
    consumer.close()
    assert len(got) == 2
    for kind, stamp in got:
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME
        assert before <= stamp <= after


def test_a_broker_on_its_own_answers_as_a_cluster_of_one(admin):
    """The controller, elections and replica counts of a single broker: it leads every
    partition already (a preferred election is not needed), and a topic wanting more replicas
    than the one broker, or a replica on a broker that is not there, is refused."""
    admin.create_topics([NewTopic("solo", 2, 1)])["solo"].result(30)
    elected = admin.elect_leaders(
        ck.ElectionType.PREFERRED,
        [ck.TopicPartition("solo", 0), ck.TopicPartition("solo", 1), ck.TopicPartition("nope", 0)],
    ).result(30)
    codes = {(tp.topic, tp.partition): e.code() if e else None for tp, e in elected.items()}
    assert codes == {
        ("solo", 0): ck.KafkaError.ELECTION_NOT_NEEDED,
        ("solo", 1): ck.KafkaError.ELECTION_NOT_NEEDED,
        ("nope", 0): ck.KafkaError.UNKNOWN_TOPIC_OR_PART,
    }

    with pytest.raises(ck.KafkaException) as too_many:
        admin.create_topics([NewTopic("triple", 1, 3)])["triple"].result(30)
    assert too_many.value.args[0].code() == ck.KafkaError.INVALID_REPLICATION_FACTOR
    with pytest.raises(ck.KafkaException) as elsewhere:
        admin.create_topics([NewTopic("placed", 1, replica_assignment=[[1, 2]])])["placed"].result(30)
    assert elsewhere.value.args[0].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert not {"triple", "placed"} & set(admin.list_topics(timeout=10).topics)

    cluster = admin.describe_cluster().result(30)
    assert [n.id for n in cluster.nodes] == [cluster.controller.id]
