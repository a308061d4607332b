"""Real clients against a real broker: kafka-python, aiokafka and confluent-kafka (librdkafka).

Each client creates a topic, produces 100k records with keys and headers under each
compression codec, and reads them all back: in order, with contiguous offsets, byte for byte.
"""

from __future__ import annotations

import asyncio
import time

import pytest

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 100_000
PARTITIONS = 2


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return b"key-%d" % i, b"value-%d-" % i + b"x" * (i % 50), [("seq", b"%d" % i), ("parity", b"%d" % (i % 2))]


def check(consumed: dict[int, list[tuple[int, bytes, bytes, list]]]) -> None:
    """Every partition: offsets 0..n-1 in order; all N records, each once, as produced."""
    seen = set()
    for partition, rows in consumed.items():
        assert [r[0] for r in rows] == list(range(len(rows))), f"partition {partition} offsets"
        previous = -1
        for offset, key, value, headers in rows:
            i = int(key.split(b"-")[1])
            assert (key, value, headers) == record(i)
            assert i > previous, "records of a partition come back in production order"
            previous = i
            seen.add(i)
    assert len(seen) == N == sum(len(r) for r in consumed.values())


def create_topic(broker, name: str, partitions: int = PARTITIONS) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kafka_python(broker, compression):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-{compression}"
    create_topic(broker, topic)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if compression == "none" else compression,
        linger_ms=5,
        batch_size=64 * 1024,
    )
    for i in range(N):
        key, value, headers = record(i)
        producer.send(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumed = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while sum(map(len, consumed.values())) < N and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=1000, max_records=50_000).items():
            consumed[tp.partition] += [(m.offset, m.key, m.value, list(m.headers)) for m in msgs]
    consumer.close()
    check(consumed)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_aiokafka(broker, compression):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = f"ak-{compression}"
    create_topic(broker, topic)

    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            compression_type=None if compression == "none" else compression,
            linger_ms=5,
            max_batch_size=64 * 1024,
        )
        await producer.start()
        try:
            futures = []
            for i in range(N):
                key, value, headers = record(i)
                futures.append(await producer.send(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS))
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20,
        )
        await consumer.start()
        consumed = {p: [] for p in range(PARTITIONS)}
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            deadline = time.monotonic() + 120
            while sum(map(len, consumed.values())) < N and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000, max_records=50_000)
                for tp, msgs in batches.items():
                    consumed[tp.partition] += [(m.offset, m.key, m.value, list(m.headers)) for m in msgs]
        finally:
            await consumer.stop()
        return consumed

    check(asyncio.run(run()))


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_confluent_kafka(broker, compression):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ck-{compression}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)

    producer = ck.Producer({
        "bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 5,
    })
    failures = []
    for i in range(N):
        key, value, headers = record(i)
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg: err and failures.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert failures == []

    consumer = ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"reader-{topic}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consumed = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while sum(map(len, consumed.values())) < N and time.monotonic() < deadline:
        for m in consumer.consume(10_000, timeout=1):
            assert m.error() is None, m.error()
            headers = [(k, v) for k, v in (m.headers() or [])]
            consumed[m.partition()].append((m.offset(), m.key(), m.value(), headers))
    consumer.close()
    check(consumed)


def test_confluent_kafka_resets_an_offset_past_the_end(broker):
    """An OFFSET_OUT_OF_RANGE answer carries an empty record set, never a null one (librdkafka
    drops a whole Fetch response with a null set and never resets): the consumer goes back to
    ``auto.offset.reset`` and reads."""
    import confluent_kafka as ck

    create_topic(broker, "ck-reset", 1)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("ck-reset", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "ck-reset",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.assign([ck.TopicPartition("ck-reset", 0, 500)])  # past the end: out of range
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(int(m.value()))
    consumer.close()
    assert values == list(range(10))
