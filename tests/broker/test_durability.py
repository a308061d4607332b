"""Acknowledged data survives kill -9, and idempotent retries after a restart are not doubled."""

from __future__ import annotations

import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic


def read_all(bootstrap: str, topic: str, expect_at_least: int, timeout: float = 60) -> list[tuple[int, bytes]]:
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    rows: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    idle_until = None
    while time.monotonic() < deadline:
        msgs = consumer.consume(10_000, timeout=0.5)
        for m in msgs:
            assert m.error() is None, m.error()
            rows.append((m.offset(), m.value()))
        if len(rows) >= expect_at_least:
            # keep reading briefly to catch anything beyond what we expect (duplicates)
            idle_until = idle_until or time.monotonic() + 2
            if time.monotonic() > idle_until:
                break
    consumer.close()
    return rows


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_stop_during_durable_produce_keeps_every_acknowledged_record_once(broker_factory, stop):
    broker = broker_factory({"log.flush.interval.messages": "1"})
    topic = "durable"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    producer = ck.Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 1, "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
    })
    acked: dict[int, int] = {}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[int(msg.value())] = msg.offset()

    stop = threading.Event()
    produced = 0

    def produce():
        nonlocal produced
        while not stop.is_set():
            try:
                producer.produce(topic, value=b"%d" % produced, partition=0, on_delivery=delivered)
                produced += 1
            except BufferError:
                pass
            producer.poll(0)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        while len(acked) < 20_000:
            time.sleep(0.01)
        if stop == "kill -9":
            broker.kill()  # while the producer is still sending
        else:
            assert broker.stop() == 0  # a clean stop, also while the producer is sending
        acked_before_kill = dict(acked)
        assert produced > len(acked_before_kill), "records were in flight at the kill"
        time.sleep(0.5)
        broker.start()  # same port, same data directory: recovery, then retries arrive
        time.sleep(2)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(90) == 0
    assert errors == []

    rows = read_all(broker.bootstrap, topic, expect_at_least=produced)
    values = [int(v) for _, v in rows]
    offsets = [o for o, _ in rows]
    assert offsets == list(range(len(rows))), "contiguous offsets"
    assert values == list(range(produced)), "every record exactly once, in order"
    for value, offset in acked_before_kill.items():
        assert rows[offset][1] == b"%d" % value, "an acknowledged record kept its offset"


def test_acknowledged_data_survives_repeated_kills(kafka_broker_factory):
    """Acks=all with flush per batch: after each kill -9 everything acknowledged is there."""
    from kafka import KafkaProducer

    broker = kafka_broker_factory(log_flush_interval_messages=1)
    total = 0
    for round_ in range(3):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=1)
        futures = [producer.send("kills", value=b"%d" % (total + i), partition=0) for i in range(5000)]
        producer.flush()
        offsets = [f.get(10).offset for f in futures]
        producer.close()
        assert offsets == list(range(total, total + 5000))
        total += 5000
        broker.kill()
        broker.restart()
    rows = read_all(broker.bootstrap, "kills", expect_at_least=total)
    assert [int(v) for _, v in rows] == list(range(total))
    broker.stop()


def test_sigterm_stops_cleanly_and_restart_skips_recovery(broker_factory):
    from kafka import KafkaProducer

    broker = broker_factory()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True)
    for i in range(2000):
        producer.send("clean", value=b"%d" % i, partition=0)
    producer.flush()
    producer.close()
    assert broker.stop() == 0
    assert (broker.data_dir / ".clean_shutdown").exists()
    assert list((broker.data_dir / "clean-0").glob("producer-state-*.json")), "producer state snapshot at close"
    broker.lines.clear()
    broker.start()
    assert not any("recovered" in line for line in broker.lines)
    assert not (broker.data_dir / ".clean_shutdown").exists(), "the marker is consumed at start"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    assert producer.send("clean", value=b"2000", partition=0).get(10).offset == 2000
    producer.close()
    rows = read_all(broker.bootstrap, "clean", expect_at_least=2001)
    assert [int(v) for _, v in rows] == list(range(2001))
