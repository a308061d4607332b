"""librdkafka through confluent-kafka (PyPI): the standard scenarios (see compat/kit.py), the
security and leader-kill ones, and its ShareConsumer (KIP-932, librdkafka 2.16+)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer, TopicCollection,  # noqa: E402
                             TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewPartitions, NewTopic, ResourceType)

from compat import kit  # noqa: E402
from compat.kit import WAIT_S, expect  # noqa: E402


def base(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "log_level": 3,
            "broker.address.family": "v4"}


def done(futures) -> dict:
    return {k: f.result(timeout=WAIT_S) for k, f in futures.items()}


def create_topic(admin: AdminClient, topic: str, partitions: int, config: dict | None = None):
    done(admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                       config=config or {})], operation_timeout=WAIT_S))


def produce(bootstrap: str, topic: str, recs, **conf) -> None:
    errors = []
    producer = Producer({**base(bootstrap), "linger.ms": 5, **conf})

    def report(err, msg):
        if err is not None:
            errors.append(str(err))

    for p, k, v, h in recs:
        producer.produce(topic, value=v, key=k, partition=p, headers=h, on_delivery=report)
        producer.poll(0)
    left = producer.flush(WAIT_S)
    expect(not errors, f"delivery failed: {errors[:3]}")
    expect(left == 0, f"{left} records not delivered")


def read_assigned(bootstrap: str, topic: str, partitions: int, count: int,
                  **conf) -> list:
    consumer = Consumer({**base(bootstrap), "group.id": "unused-assign-only",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append((msg.partition(), msg.key(), msg.value(), msg.headers() or []))
    finally:
        consumer.close()
    return got


def produce_consume(compression: str):
    def scenario(bootstrap: str, prefix: str) -> None:
        topic = f"{prefix}-t"
        create_topic(AdminClient(base(bootstrap)), topic, 3)
        recs = kit.records(300, 3)
        produce(bootstrap, topic, recs, **{"compression.type": compression})
        kit.check_records(recs, read_assigned(bootstrap, topic, 3, len(recs)))
    return scenario


def idempotent(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    create_topic(AdminClient(base(bootstrap)), topic, 2)
    recs = kit.records(2000, 2)
    produce(bootstrap, topic, recs, **{"enable.idempotence": True, "acks": "all",
                                       "max.in.flight.requests.per.connection": 5,
                                       "linger.ms": 0, "batch.num.messages": 50})
    kit.check_records(recs, read_assigned(bootstrap, topic, 2, len(recs)))


def group(bootstrap: str, prefix: str) -> None:
    topic, gid = f"{prefix}-t", f"{prefix}-g"
    admin = AdminClient(base(bootstrap))
    create_topic(admin, topic, 4)
    recs = kit.records(400, 4)
    produce(bootstrap, topic, recs)
    conf = {**base(bootstrap), "group.id": gid, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500}
    seen: set[tuple[int, bytes]] = set()
    a = Consumer(conf)
    b = Consumer(conf)
    try:
        a.subscribe([topic])

        def poll(c: Consumer) -> None:
            msg = c.poll(0.2)
            if msg is None:
                return
            if msg.error():
                raise KafkaException(msg.error())
            seen.add((msg.partition(), msg.key()))
            try:
                c.commit(msg, asynchronous=False)
            except KafkaException as exc:  # a commit racing a rebalance may be refused
                if not exc.args[0].retriable() and "GENERATION" not in exc.args[0].name() \
                        and "REBALANCE" not in exc.args[0].name():
                    raise

        kit.wait_until(lambda: (poll(a), len(a.assignment()) == 4)[1],
                       "the first consumer to be assigned all 4 partitions", step=0)
        b.subscribe([topic])

        def both_assigned() -> bool:
            poll(a)
            poll(b)
            pa = {tp.partition for tp in a.assignment()}
            pb = {tp.partition for tp in b.assignment()}
            return bool(pa) and bool(pb) and not (pa & pb) and (pa | pb) == {0, 1, 2, 3}
        kit.wait_until(both_assigned, "a rebalance sharing 4 partitions between 2 consumers",
                       step=0)

        def all_seen() -> bool:
            poll(a)
            poll(b)
            return len(seen) == len(recs)
        kit.wait_until(all_seen, f"all {len(recs)} records through the group", step=0)
        for c in (a, b):
            try:
                c.commit(asynchronous=False)
            except KafkaException as exc:  # nothing new to commit is fine
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise
    finally:
        a.close()
        b.close()
    checker = Consumer(conf)
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(4)],
                                      timeout=WAIT_S)
    finally:
        checker.close()
    offsets = {tp.partition: tp.offset for tp in committed}
    expect(offsets == {p: 100 for p in range(4)}, f"committed offsets {offsets}, want 100 each")


def admin_topics(bootstrap: str, prefix: str) -> None:
    admin = AdminClient(base(bootstrap))
    topic = f"{prefix}-t"
    create_topic(admin, topic, 3, {"retention.ms": "3600000"})
    expect(topic in admin.list_topics(timeout=WAIT_S).topics, "created topic not listed")
    desc = done(admin.describe_topics(TopicCollection([topic])))[topic]
    expect(len(desc.partitions) == 3, f"described {len(desc.partitions)} partitions, want 3")
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = done(admin.describe_configs([res]))[res]
    expect(configs["retention.ms"].value == "3600000",
           f"retention.ms described as {configs['retention.ms'].value}")
    done(admin.create_partitions([NewPartitions(topic, 5)]))
    kit.wait_until(lambda: len(admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions) == 5,
                   "5 partitions after CreatePartitions")
    done(admin.delete_topics([topic], operation_timeout=WAIT_S))
    kit.wait_until(lambda: topic not in admin.list_topics(timeout=WAIT_S).topics,
                   "the deleted topic to disappear")


def alter_configs(bootstrap: str, prefix: str) -> None:
    admin = AdminClient(base(bootstrap))
    topic = f"{prefix}-t"
    create_topic(admin, topic, 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    done(admin.incremental_alter_configs([res]))
    plain = ConfigResource(ConfigResource.Type.TOPIC, topic)
    value = done(admin.describe_configs([plain]))[plain]["retention.ms"].value
    expect(value == "12345", f"retention.ms is {value} after the change")


def transactions(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    create_topic(AdminClient(base(bootstrap)), topic, 1)
    p = Producer({**base(bootstrap), "transactional.id": f"{prefix}-tx"})
    p.init_transactions(WAIT_S)
    p.begin_transaction()
    for v in kit.COMMITTED:
        p.produce(topic, value=v, partition=0)
    p.commit_transaction(WAIT_S)
    p.begin_transaction()
    for v in kit.ABORTED:
        p.produce(topic, value=v, partition=0)
    p.flush(WAIT_S)
    p.abort_transaction(WAIT_S)
    p.begin_transaction()
    p.produce(topic, value=kit.LAST, partition=0)
    p.commit_transaction(WAIT_S)
    got = read_assigned(bootstrap, topic, 1, 11, **{"isolation.level": "read_committed"})
    kit.check_read_committed(got)


def secured(listener: str) -> dict:
    """The client settings for one listener of the suite's secure broker (kit.security)."""
    return {"bootstrap.servers": kit.security()[listener], **kit.librdkafka_security(listener)}


def over(listener: str):
    """A topic created, 300 records produced (idempotent, acks=all) and read back, all through
    one secured listener."""
    def scenario(bootstrap: str, prefix: str) -> None:
        conf = secured(listener)
        topic = f"{prefix}-t"
        create_topic(AdminClient({**base(bootstrap), **conf}), topic, 3)
        recs = kit.records(300, 3)
        produce(bootstrap, topic, recs, **conf, **{"enable.idempotence": True, "acks": "all"})
        kit.check_records(recs, read_assigned(bootstrap, topic, 3, len(recs), **conf))
    return scenario


def wrong_password(bootstrap: str, prefix: str) -> None:
    """SCRAM-SHA-512 over SASL_SSL with a wrong password: an authentication error, soon."""
    errors: list[KafkaError] = []
    conf = {**base(bootstrap), **secured("sasl_ssl"), "sasl.password": "not-the-password",
            "error_cb": errors.append}
    producer = Producer(conf)
    t0 = time.monotonic()
    producer.produce(f"{prefix}-t", value=b"never")
    kit.wait_until(lambda: (producer.poll(0.2), any(
        e.code() == KafkaError._AUTHENTICATION for e in errors))[1],
        "an authentication error", timeout=20, step=0)
    took = time.monotonic() - t0
    first = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)
    print(f"refused after {took:.1f}s: {first}", flush=True)
    expect(producer.flush(1) == 1, "the record was delivered with a wrong password")


def leader_kill_9(bootstrap: str, prefix: str) -> None:
    """An idempotent acks=all producer writes to a partition of an RF=3 topic
    (min.insync.replicas=2) of three brokers; once half is acknowledged the harness kills the
    partition's leader with SIGKILL (HOOK kill-leader) while records are still in flight, and
    the producer carries on against the new leader. Every acknowledged record must be read
    back once, in the order sent; no record may fail."""
    topic = f"{prefix}-t"
    admin = AdminClient(base(bootstrap))
    done(admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3,
                                       config={"min.insync.replicas": "2"})],
                             operation_timeout=WAIT_S))

    def isr() -> tuple[int, list[int]]:
        md = admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions[0]
        return md.leader, list(md.isrs)
    kit.wait_until(lambda: len(isr()[1]) == 3, "three replicas in sync")
    leader = isr()[0]
    print(f"leader of {topic}-0: broker {leader}", flush=True)
    acked: list[int] = []
    failed: list[str] = []

    def report(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(int(msg.value()))

    producer = Producer({**base(bootstrap), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "message.timeout.ms": 120000})
    answers: list[str] = []
    n = 0

    def send(count: int) -> None:
        nonlocal n
        for _ in range(count):
            producer.produce(topic, value=str(n).encode(), partition=0, on_delivery=report)
            n += 1
        producer.poll(0.005)

    for _ in range(100):
        send(10)
    expect(producer.flush(WAIT_S) == 0, "the first half not acknowledged")
    import threading
    reader = threading.Thread(target=lambda: answers.append(sys.stdin.readline().strip()),
                              daemon=True)
    reader.start()
    asked = False
    while reader.is_alive() and n < 200_000:  # in flight while the leader dies
        send(10)
        if not asked and n >= 1100:  # 100 records handed to the producer, not waited for
            print(f"{len(acked)} acknowledged of {n} sent; HOOK kill-leader", flush=True)
            print(f"HOOK kill-leader {topic} 0", flush=True)
            asked = True
        time.sleep(0.005)
    reader.join(WAIT_S)
    expect(bool(answers) and answers[0].startswith("killed"), f"the harness answered {answers}")
    killed_at = n
    for _ in range(100):  # and after: against the new leader once elected
        send(10)
    expect(producer.flush(90) == 0, f"{len(producer)} records still unacknowledged 90 s on")
    expect(not failed, f"{len(failed)} records failed: {failed[:3]}")
    expect(len(acked) == n, f"{len(acked)} acknowledged of {n}")
    new_leader, in_sync = isr()
    print(f"{answers[0]}; {killed_at - 1000} records sent after the first 1000 until the kill was answered, {n} in all; "
          f"new leader {new_leader}, ISR {in_sync}", flush=True)
    expect(new_leader not in (leader, -1), f"leader {new_leader} after the kill of {leader}")
    watcher = Consumer({**base(bootstrap), "group.id": "unused-watermarks"})
    try:
        low, high = watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT_S)
    finally:
        watcher.close()
    expect(low == 0 and high >= n, f"offsets {low}..{high} for {n} acknowledged records")
    got = read_assigned(bootstrap, topic, 1, high)  # everything the log holds
    values = [int(v) for _, _, v, _ in got]
    expect(len(values) == len(set(values)), f"{len(values) - len(set(values))} records read twice")
    expect(values == list(range(n)), f"read {len(values)} records, want 0..{n - 1} in order "
                                     f"(first difference at {_first_difference(values, n)})")


def _first_difference(values: list[int], n: int) -> int:
    return next((i for i, v in enumerate(values) if v != i), min(len(values), n))


# --- share groups (KIP-932): a topic of one partition whose record values are their numbers

def share_setup(bootstrap: str, prefix: str, count: int) -> tuple[str, str]:
    """A topic of ``count`` records (values 0..count-1) in batches of ten (a share fetch hands
    out whole batches), and a share group that starts at its beginning
    (``share.auto.offset.reset=earliest``, a group config)."""
    topic, group = f"{prefix}-t", f"{prefix}-g"
    admin = AdminClient(base(bootstrap))
    create_topic(admin, topic, 1)
    done(admin.incremental_alter_configs([ConfigResource(
        ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest",
            incremental_operation=AlterConfigOpType.SET)])]))
    producer = Producer({**base(bootstrap), "linger.ms": 0})
    for n in range(count):
        producer.produce(topic, str(n).encode())
        if n % 10 == 9:
            expect(producer.flush(WAIT_S) == 0, "records not delivered")
    expect(producer.flush(WAIT_S) == 0, "records not delivered")
    return topic, group


def share_consumer(bootstrap: str, group: str, topic: str, mode: str):
    from confluent_kafka import ShareConsumer
    consumer = ShareConsumer({**base(bootstrap), "group.id": group,
                              "share.acknowledgement.mode": mode})
    consumer.subscribe([topic])
    return consumer


def share_group(bootstrap: str, prefix: str) -> None:
    """Two ShareConsumers of one share group on one partition of 300 records, acknowledging
    explicitly: n % 10 == 3 RELEASEd at its first delivery, n % 10 == 7 REJECTed, the rest
    ACCEPTed. Every acknowledgement is answered ok; none is lost; each is accepted once (a
    released one at its second delivery), a rejected one never comes again; both consumers
    get records."""
    from confluent_kafka import AcknowledgeType
    count = 300
    topic, group = share_setup(bootstrap, prefix, count)
    deliveries: dict[int, list] = {}  # n -> [(consumer, delivery count, kind)]
    settled: dict[int, list[bool]] = {}

    def on_commit(offsets, error):
        for tp_offsets in offsets.values():
            for offset in tp_offsets:
                settled.setdefault(offset, []).append(error is None)

    consumers = [share_consumer(bootstrap, group, topic, "explicit") for _ in range(2)]
    for consumer in consumers:
        consumer.set_acknowledgement_commit_callback(on_commit)
    deadline = time.monotonic() + 60
    quiet_since = time.monotonic()
    try:  # until nothing came for 5 s, counted from the first delivery
        while time.monotonic() < deadline and (not deliveries
                                               or time.monotonic() - quiet_since < 5):
            for who, consumer in enumerate(consumers):
                messages = consumer.poll(0.2)
                for m in messages:
                    if m.error():
                        raise KafkaException(m.error())
                    n, delivered = int(m.value()), m.delivery_count()
                    kind = AcknowledgeType.ACCEPT
                    if n % 10 == 7:
                        kind = AcknowledgeType.REJECT
                    elif n % 10 == 3 and delivered == 1:
                        kind = AcknowledgeType.RELEASE
                    consumer.acknowledge(m, kind)
                    deliveries.setdefault(n, []).append((who, delivered, kind))
                if len(messages):
                    consumer.commit_sync()
                    quiet_since = time.monotonic()
    finally:
        for consumer in consumers:
            consumer.close()
    print(f"{sum(map(len, deliveries.values()))} deliveries of {len(deliveries)} records",
          flush=True)
    expect(sorted(deliveries) == list(range(count)),
           f"delivered {len(deliveries)} of {count} records")
    expect(sorted(settled) == list(range(count)),
           f"acknowledgements answered for {len(settled)} offsets, want {count}")
    expect(all(all(s) for s in settled.values()),
           f"acknowledgements failed: {[o for o, s in settled.items() if not all(s)][:10]}")
    for n, got in sorted(deliveries.items()):
        kinds = [k for _, _, k in got]
        if n % 10 == 7:
            expect(kinds == [AcknowledgeType.REJECT], f"rejected {n} came again: {got}")
        elif n % 10 == 3:
            expect(kinds == [AcknowledgeType.RELEASE, AcknowledgeType.ACCEPT]
                   and [c for _, c, _ in got] == [1, 2], f"released {n}: {got}")
        else:
            expect(kinds == [AcknowledgeType.ACCEPT], f"record {n} accepted more than once: {got}")
    who = {w for got in deliveries.values() for w, _, _ in got}
    expect(who == {0, 1}, f"only consumer(s) {who} got records")


def share_group_implicit(bootstrap: str, prefix: str) -> None:
    """A ShareConsumer with implicit acknowledgement reads 50 records; commit_sync() accepts
    them (librdkafka 2.16's close() alone ends the share session without: they would come
    back), so a second consumer of the group finds none left."""
    count = 50
    topic, group = share_setup(bootstrap, prefix, count)
    seen: list[int] = []
    consumer = share_consumer(bootstrap, group, topic, "implicit")
    deadline = time.monotonic() + WAIT_S
    try:
        while len(seen) < count and time.monotonic() < deadline:
            seen += [int(m.value()) for m in consumer.poll(0.5) if m.error() is None]
        consumer.commit_sync()
    finally:
        consumer.close()
    expect(sorted(seen) == list(range(count)), f"read {sorted(seen)}, want 0..{count - 1}")
    again = share_consumer(bootstrap, group, topic, "implicit")
    late = []
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            late += [m for m in again.poll(0.5) if m.error() is None]
    finally:
        again.close()
    expect(late == [], f"a second consumer got {len(late)} accepted records again")


SCENARIOS = kit.standard_scenarios(produce_consume, idempotent=idempotent, group=group,
                                   admin=admin_topics, alter_configs=alter_configs,
                                   transactions=transactions)
SCENARIOS.update({
    "security-ssl": over("ssl"),
    "security-mtls": over("mtls"),
    "security-sasl-ssl-scram-sha-512": over("sasl_ssl"),
    "security-sasl-plaintext-plain": over("sasl_plaintext"),
    "security-wrong-password": wrong_password,
    "cluster-leader-kill-9": leader_kill_9,
    "share-group": share_group,
    "share-group-implicit": share_group_implicit,
})

if __name__ == "__main__":
    sys.exit(kit.main(SCENARIOS))
