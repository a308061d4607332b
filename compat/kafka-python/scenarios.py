"""kafka-python (PyPI): the standard scenarios (see compat/kit.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402

from compat import kit  # noqa: E402
from compat.kit import WAIT_S, expect  # noqa: E402


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(WAIT_S * 1000))


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None):
    admin = admin_client(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, recs, **conf) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **conf)
    try:
        futures = [producer.send(topic, value=v, key=k, partition=p, headers=h)
                   for p, k, v, h in recs]
        producer.flush(WAIT_S)
        for f in futures:
            f.get(timeout=WAIT_S)
    finally:
        producer.close(WAIT_S)


def read_assigned(bootstrap: str, topic: str, partitions: int, count: int, **conf) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", **conf)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                got += [(m.partition, m.key, m.value, list(m.headers or [])) for m in msgs]
    finally:
        consumer.close()
    return got


def produce_consume(compression: str):
    def scenario(bootstrap: str, prefix: str) -> None:
        topic = f"{prefix}-t"
        create_topic(bootstrap, topic, 3)
        recs = kit.records(300, 3)
        produce(bootstrap, topic, recs,
                compression_type=None if compression == "none" else compression)
        kit.check_records(recs, read_assigned(bootstrap, topic, 3, len(recs)))
    return scenario


def idempotent(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    create_topic(bootstrap, topic, 2)
    recs = kit.records(2000, 2)
    produce(bootstrap, topic, recs, enable_idempotence=True, acks="all",
            max_in_flight_requests_per_connection=5, batch_size=4096)
    kit.check_records(recs, read_assigned(bootstrap, topic, 2, len(recs)))


def group(bootstrap: str, prefix: str) -> None:
    topic, gid = f"{prefix}-t", f"{prefix}-g"
    create_topic(bootstrap, topic, 4)
    recs = kit.records(400, 4)
    produce(bootstrap, topic, recs)
    conf = dict(bootstrap_servers=bootstrap, group_id=gid, auto_offset_reset="earliest",
                enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500)
    seen: set = set()
    a = KafkaConsumer(topic, **conf)
    b = None

    def poll(c) -> None:
        for msgs in c.poll(timeout_ms=200).values():
            seen.update((m.partition, m.key) for m in msgs)
        try:
            c.commit()
        except Exception as exc:  # a commit racing a rebalance may be refused
            if "Rebalance" not in type(exc).__name__ and "Generation" not in type(exc).__name__ \
                    and "CommitFailed" not in type(exc).__name__:
                raise

    try:
        kit.wait_until(lambda: (poll(a), len(a.assignment()) == 4)[1],
                       "the first consumer to be assigned all 4 partitions", step=0)
        b = KafkaConsumer(topic, **conf)

        def both_assigned() -> bool:
            poll(a)
            poll(b)
            pa = {tp.partition for tp in a.assignment()}
            pb = {tp.partition for tp in b.assignment()}
            return bool(pa) and bool(pb) and not (pa & pb) and (pa | pb) == {0, 1, 2, 3}
        kit.wait_until(both_assigned, "a rebalance sharing 4 partitions between 2 consumers",
                       step=0)
        kit.wait_until(lambda: (poll(a), poll(b), len(seen) == len(recs))[2],
                       f"all {len(recs)} records through the group", step=0)
        a.commit()
        b.commit()
    finally:
        a.close()
        if b is not None:
            b.close()
    checker = KafkaConsumer(**conf)
    try:
        offsets = {p: checker.committed(TopicPartition(topic, p)) for p in range(4)}
    finally:
        checker.close()
    expect(offsets == {p: 100 for p in range(4)}, f"committed offsets {offsets}, want 100 each")


def admin_topics(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    admin = admin_client(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 1, topic_configs={"retention.ms": "3600000"})])
        expect(topic in admin.list_topics(), "created topic not listed")
        desc = admin.describe_topics([topic])[0]
        expect(len(desc["partitions"]) == 3, f"described {len(desc['partitions'])} partitions")
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        text = repr(res)
        expect("3600000" in text, f"retention.ms=3600000 not in DescribeConfigs answer {text:.300}")
        admin.create_partitions({topic: NewPartitions(5)})
        kit.wait_until(lambda: len(admin.describe_topics([topic])[0]["partitions"]) == 5,
                       "5 partitions after CreatePartitions")
        admin.delete_topics([topic])
        kit.wait_until(lambda: topic not in admin.list_topics(), "the deleted topic to disappear")
    finally:
        admin.close()


def alter_configs(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    admin = admin_client(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "12345"})])
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        expect("12345" in repr(res), f"retention.ms=12345 not described: {res!r:.300}")
    finally:
        admin.close()


def transactions(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    create_topic(bootstrap, topic, 1)
    try:
        p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{prefix}-tx",
                          max_block_ms=int(WAIT_S * 1000))
    except TypeError as exc:
        raise kit.NotApplicable("this kafka-python has no transactional producer") from exc
    try:
        p.init_transactions()
        p.begin_transaction()
        for v in kit.COMMITTED:
            p.send(topic, value=v, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        for v in kit.ABORTED:
            p.send(topic, value=v, partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, value=kit.LAST, partition=0)
        p.commit_transaction()
    finally:
        p.close(WAIT_S)
    got = read_assigned(bootstrap, topic, 1, 11, isolation_level="read_committed")
    kit.check_read_committed(got)


SCENARIOS = kit.standard_scenarios(produce_consume, idempotent=idempotent, group=group,
                                   admin=admin_topics, alter_configs=alter_configs,
                                   transactions=transactions)

if __name__ == "__main__":
    sys.exit(kit.main(SCENARIOS))
