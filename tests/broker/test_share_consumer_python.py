"""confluent-kafka's ShareConsumer (librdkafka's KIP-932 client) against one broker: two
consumers of one share group on one partition, explicit ACCEPT / RELEASE / REJECT, every
acknowledgement answered, none lost, none accepted twice; and implicit acknowledgement."""

from __future__ import annotations

import time
from collections import defaultdict

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from test_group_configs import alter
from test_group_protocol import create_topic

from kafkawire import WireClient

COUNT = 300


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(count):
        producer.produce(topic, str(n).encode())
        if n % 10 == 9:  # batches of ten: a share fetch hands out whole batches
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str, mode: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": mode})
    consumer.subscribe([topic])
    return consumer


def test_two_share_consumers_accept_release_reject(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    with WireClient(broker.port) as c:
        create_topic(c, "tasks", 1)
    assert alter(broker.port, "py-workers", share_auto_offset_reset="earliest") == (0, None)
    produce(bootstrap, "tasks", COUNT)
    deliveries = defaultdict(list)  # n -> [(consumer, delivery count, kind)]
    settled: dict[int, list[bool]] = defaultdict(list)

    def on_commit(offsets, error):
        for tp_offsets in offsets.values():
            for offset in tp_offsets:
                settled[offset].append(error is None)

    consumers = [share_consumer(bootstrap, "py-workers", "tasks", "explicit") for _ in range(2)]
    for consumer in consumers:
        consumer.set_acknowledgement_commit_callback(on_commit)
    deadline = time.monotonic() + 60
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 5:
            for who, consumer in enumerate(consumers):
                messages = consumer.poll(0.2)
                for m in messages:
                    assert m.error() is None, m.error()
                    n, count = int(m.value()), m.delivery_count()
                    kind = AcknowledgeType.ACCEPT
                    if n % 10 == 7:
                        kind = AcknowledgeType.REJECT
                    elif n % 10 == 3 and count == 1:
                        kind = AcknowledgeType.RELEASE
                    consumer.acknowledge(m, kind)
                    deliveries[n].append((who, count, kind))
                if len(messages):
                    consumer.commit_sync()
                    quiet_since = time.monotonic()
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(deliveries) == list(range(COUNT))  # none lost
    assert sorted(settled) == list(range(COUNT)) and all(all(s) for s in settled.values())
    for n, got in deliveries.items():
        kinds = [k for _, _, k in got]
        if n % 10 == 7:
            assert kinds == [AcknowledgeType.REJECT], (n, got)
        elif n % 10 == 3:
            assert kinds == [AcknowledgeType.RELEASE, AcknowledgeType.ACCEPT], (n, got)
            assert [c for _, c, _ in got] == [1, 2], (n, got)
        else:
            assert kinds == [AcknowledgeType.ACCEPT], (n, got)
    assert {who for got in deliveries.values() for who, _, _ in got} == {0, 1}


def test_implicit_acknowledgement(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    with WireClient(broker.port) as c:
        create_topic(c, "events", 1)
    assert alter(broker.port, "py-implicit", share_auto_offset_reset="earliest") == (0, None)
    produce(bootstrap, "events", 50)
    seen: list[int] = []
    consumer = share_consumer(bootstrap, "py-implicit", "events", "implicit")
    deadline = time.monotonic() + 30
    while len(seen) < 50 and time.monotonic() < deadline:
        seen += [int(m.value()) for m in consumer.poll(0.5) if m.error() is None]
    consumer.commit_sync()  # accepts what the last poll returned (librdkafka 2.16's close()
    consumer.close()  # alone ends the share session without it: the records would come back)
    assert sorted(seen) == list(range(50))
    # a second consumer of the group finds nothing left: everything was accepted
    again = share_consumer(bootstrap, "py-implicit", "events", "implicit")
    deadline = time.monotonic() + 3
    late = []
    while time.monotonic() < deadline:
        late += [m for m in again.poll(0.5) if m.error() is None]
    again.close()
    assert late == []
