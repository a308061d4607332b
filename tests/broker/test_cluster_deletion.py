"""DeleteTopics in a cluster, and every broker's state about the deleted topic: the partitions'
files on each broker, and the committed offsets at a group coordinator on another broker, also
when that broker was down while the topic was deleted (and re-created under the same name)."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, create, leaders, metadata, wait_for  # noqa: F401 (fixture)

from headrace.protocol import ApiKey, messages

PARTITIONS = 6


def produce(brokers, topic: str, count: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def consume_group(brokers, topic: str, group: str, count: int) -> list[str]:
    """Read ``count`` records (or what comes within 30 s) in ``group`` from its committed
    offsets (earliest where none), committing them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # a broker killed right after a LeaveGroup may restore the member that left: it
            # expires after its session timeout (Kafka's minimum here, not the 45 s default)
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    positions: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value().decode())
            positions[m.partition()] = m.offset() + 1
    if positions:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
        )
    consumer.close()
    return values


def committed(brokers, topic: str, group: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, i) for i in range(PARTITIONS)], timeout=20)
    finally:
        consumer.close()
    return [tp.offset for tp in tps]


def coordinator(brokers, group: str) -> int:
    with WireClient(brokers[0].port) as c:
        found = c.request(
            ApiKey.FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key=group, key_type=0)
        )
    return found.node_id


def delete(brokers, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.delete_topics([topic])[topic].result(timeout=30)


def test_deleting_a_topic_purges_its_offsets_at_a_coordinator_on_another_broker(cluster):
    brokers = cluster(3)
    create(brokers, "events", PARTITIONS)
    produce(brokers, "events", 300, "old")
    assert len(consume_group(brokers, "events", "readers", 300)) == 300
    assert sum(committed(brokers, "events", "readers")) == 300
    delete(brokers, "events")
    for b in brokers:
        wait_for(lambda b=b: not list(b.data_dir.glob("events-*")), 10, "files removed")
    assert committed(brokers, "events", "readers") == [OFFSET_INVALID] * PARTITIONS
    create(brokers, "events", PARTITIONS)  # the namesake is read from its start
    produce(brokers, "events", 600, "new")
    assert sorted(consume_group(brokers, "events", "readers", 600)) == sorted(
        f"new-{i}" for i in range(600)
    )


def test_a_topic_deleted_and_re_created_while_a_broker_was_down(cluster):
    """The broker that was down holds partitions of the topic and coordinates the group: when it
    is back, the old partitions' files are gone and the group reads the namesake from its start."""
    brokers = cluster(3)
    wait_for(lambda: len(metadata(brokers[0]).brokers) == 3, 10, "every broker seen")
    group = next(f"g{i}" for i in range(1000) if coordinator(brokers, f"g{i}") == 3)
    create(brokers, "events", PARTITIONS, replica_assignment=[[1], [2], [3]] * 2)
    produce(brokers, "events", 300, "old")
    assert len(consume_group(brokers, "events", group, 300)) == 300
    down = brokers[2]
    down.kill()
    up = brokers[:2]
    wait_for(lambda: 3 not in {n for n in leaders(up[0], "events").values()}, 15, "broker 3 gone")
    delete(up, "events")
    # placed on the two live brokers by hand: placed automatically, a topic's partitions are
    # spread over broker 3 too once it is back (a join moves a broker's share to it)
    create(up, "events", PARTITIONS, replica_assignment=[[1], [2]] * 3)
    produce(up, "events", 600, "new")  # more than before: stale offsets would skip records
    down.start()
    wait_for(lambda: coordinator(brokers, group) == 3, 15, "the coordinator back")
    assert 3 not in leaders(brokers[0], "events").values()  # the namesake lives on 1 and 2
    wait_for(lambda: not list(down.data_dir.glob("events-*")), 10, "the old partitions removed")
    assert committed(brokers, "events", group) == [OFFSET_INVALID] * PARTITIONS
    assert sorted(consume_group(brokers, "events", group, 600)) == sorted(
        f"new-{i}" for i in range(600)
    )
