"""Real group consumers (kafka-python, aiokafka, confluent-kafka) against a real broker.

Each consumer runs in its own process (so it can be killed with SIGKILL, like a crashed
application) and reports what happens to it as JSON lines: its assignment, the records it
reads, the offsets it commits, and (confluent-kafka) the rebalance callbacks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

SESSION_MS = 3000
SETTINGS = {"group.initial.rebalance.delay.ms": "1000", "group.min.session.timeout.ms": "1000",
            "offsets.topic.num.partitions": "5"}

CONSUMER = r'''
import json, sys, time
kind, bootstrap, topic, group, session_ms, options = sys.argv[1:7]
session_ms = int(session_ms)
options = json.loads(options)

def out(**event):
    event["t"] = time.time()
    print(json.dumps(event), flush=True)

last_assigned = None
def report(parts):
    global last_assigned
    parts = sorted(parts)
    if parts != last_assigned:
        last_assigned = parts
        out(assigned=parts)

if kind == "kafka-python":
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=session_ms,
                      heartbeat_interval_ms=300, max_poll_records=5,
                      partition_assignment_strategy=[RoundRobinPartitionAssignor])
    c.subscribe([topic])
    while True:
        batches = c.poll(200)
        report(tp.partition for tp in c.assignment())
        done = {}
        for tp, msgs in batches.items():
            out(records=[[tp.partition, m.offset] for m in msgs])
            done[tp.partition] = msgs[-1].offset + 1
        if done:
            try:
                c.commit()
                out(committed=done)
            except Exception as e:
                out(commit_failed=repr(e))
        time.sleep(0.05)
elif kind == "aiokafka":
    import asyncio
    from aiokafka import AIOKafkaConsumer
    async def main():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=session_ms, heartbeat_interval_ms=300,
                             max_poll_records=5)
        await c.start()
        while True:
            batches = await c.getmany(timeout_ms=200)
            report(tp.partition for tp in c.assignment())
            done = {}
            for tp, msgs in batches.items():
                out(records=[[tp.partition, m.offset] for m in msgs])
                done[tp.partition] = msgs[-1].offset + 1
            if done:
                try:
                    await c.commit()
                    out(committed=done)
                except Exception as e:
                    out(commit_failed=repr(e))
            await asyncio.sleep(0.05)
    asyncio.run(main())
else:
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": 300, "partition.assignment.strategy": "roundrobin"}
    if options.get("group.protocol") == "consumer":  # KIP-848: these are the broker's settings
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            del conf[key]
    conf.update(options)
    c = Consumer(conf)
    c.subscribe([topic],
                on_assign=lambda _c, ps: out(on_assign=sorted(p.partition for p in ps)),
                on_revoke=lambda _c, ps: out(on_revoke=sorted(p.partition for p in ps)))
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            msgs = c.consume(5, 0.2)
            report(tp.partition for tp in c.assignment())
            done = {}
            msgs = [m for m in msgs if not m.error()]
            if msgs:
                out(records=[[m.partition(), m.offset()] for m in msgs])
                for m in msgs:
                    done[m.partition()] = m.offset() + 1
                try:
                    c.commit(asynchronous=False)
                    out(committed=done)
                except Exception as e:
                    out(commit_failed=repr(e))
            time.sleep(0.05)
    finally:
        c.close()
        out(closed=True)
'''


class Member:
    """One consumer process and the events it reported."""

    def __init__(self, tmp_path, kind, bootstrap, topic, group, options=None):
        script = tmp_path / "consumer.py"
        script.write_text(CONSUMER)
        self.kind = kind
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(script), kind, bootstrap, topic, group, str(SESSION_MS),
             json.dumps(options or {})],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    @property
    def assigned(self) -> list[int] | None:
        for e in reversed(self.events):
            if "assigned" in e:
                return e["assigned"]
        return None

    def of(self, key):
        return [e for e in list(self.events) if key in e]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """SIGTERM: the consumer closes (and leaves the group) before it exits."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


def produce(bootstrap, topic, partitions, per_partition, start=0):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(start, start + per_partition):
        for part in range(partitions):
            p.send(topic, b"v%d" % i, partition=part)
    p.flush()
    p.close()


def create_topic(bootstrap, topic, partitions):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def balanced(members, partitions):
    got = [m.assigned for m in members]
    if any(not a for a in got):
        return False
    flat = [p for a in got for p in a]
    return sorted(flat) == list(range(partitions))


@pytest.mark.parametrize("victim", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_three_clients_share_a_group_and_survive_a_killed_member(broker_factory, tmp_path, victim):
    b = broker_factory(SETTINGS)
    topic, group, parts, per = "shared", "mixed", 6, 50
    create_topic(b.bootstrap, topic, parts)
    produce(b.bootstrap, topic, parts, per)
    members = {k: Member(tmp_path, k, b.bootstrap, topic, group)
               for k in ("kafka-python", "aiokafka", "confluent-kafka")}
    try:
        wait_for(lambda: balanced(members.values(), parts), 60, "a complete assignment")
        assigned = [m.assigned for m in members.values()]
        assert sorted(p for a in assigned for p in a) == list(range(parts))  # disjoint, complete
        assert all(len(a) == 2 for a in assigned)
        dead = members[victim]
        wait_for(lambda: dead.of("committed"), 30, "the victim to commit")
        dead.kill()
        killed = time.monotonic()
        survivors = [m for k, m in members.items() if k != victim]
        took = wait_for(lambda: balanced(survivors, parts), 30, "the survivors to take over") - killed
        print(f"\n{victim} killed: partitions taken over in {took:.2f} s (session timeout {SESSION_MS} ms)")
        assert took < SESSION_MS / 1000 + 3
        produce(b.bootstrap, topic, parts, per, start=per)

        def everything_read():
            seen = {tuple(r) for m in members.values() for e in m.of("records") for r in e["records"]}
            return len(seen) == parts * 2 * per
        wait_for(everything_read, 60, "every record to be read")
    finally:
        for m in members.values():
            m.kill()
    # no record lost; a record read twice was never covered by a commit before the second read
    reads = sorted((e["t"], p, o) for m in members.values() for e in m.of("records") for p, o in e["records"])
    commits = sorted((e["t"], int(p), off) for m in members.values() for e in m.of("committed")
                     for p, off in e["committed"].items())
    seen = set()
    for t, p, o in reads:
        if (p, o) in seen:
            covered = [c for c in commits if c[1] == p and c[2] > o and c[0] < t]
            assert not covered, f"record {p}/{o} read again at {t} after a commit covering it: {covered[0]}"
        seen.add((p, o))
    assert seen == {(p, o) for p in range(parts) for o in range(2 * per)}


def test_committed_offsets_survive_kill_9_with_clients(broker_factory):
    from confluent_kafka import Consumer, TopicPartition as CTP
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    b = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "durable", 3)
    produce(b.bootstrap, "durable", 3, 20)
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="kp", enable_auto_commit=False)
    kc.commit({TopicPartition("durable", p): OffsetAndMetadata(5 + p, "", -1) for p in range(3)})
    kc.close()
    cc = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ck", "enable.auto.commit": False})
    cc.commit(offsets=[CTP("durable", p, 10 + p) for p in range(3)], asynchronous=False)
    cc.close()
    b.kill()
    b.start()
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="kp", enable_auto_commit=False)
    assert [kc.committed(TopicPartition("durable", p)) for p in range(3)] == [5, 6, 7]
    kc.close()
    cc = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ck", "enable.auto.commit": False})
    got = cc.committed([CTP("durable", p) for p in range(3)], timeout=10)
    assert [tp.offset for tp in got] == [10, 11, 12]
    cc.close()


def test_static_member_restart_causes_no_rebalance(broker_factory, tmp_path):
    b = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "static", 4)
    a = Member(tmp_path, "confluent-kafka", b.bootstrap, "static", "sg", {"group.instance.id": "a"})
    m1 = Member(tmp_path, "confluent-kafka", b.bootstrap, "static", "sg", {"group.instance.id": "b"})
    m2 = None
    try:
        wait_for(lambda: balanced([a, m1], 4), 30, "both static members assigned")
        before_a, before_b = a.assigned, m1.assigned
        revokes = len(a.of("on_revoke"))
        m1.kill()  # a crash: no LeaveGroup
        m2 = Member(tmp_path, "confluent-kafka", b.bootstrap, "static", "sg", {"group.instance.id": "b"})
        wait_for(lambda: m2.assigned, 20, "the restarted member's assignment")
        time.sleep(SESSION_MS / 1000 + 1)  # past the old session: nothing may happen meanwhile
        assert m2.assigned == before_b
        assert a.assigned == before_a and len(a.of("on_revoke")) == revokes
    finally:
        for m in (a, m1, m2):
            if m:
                m.kill()


def test_cooperative_sticky_moves_only_what_it_must(broker_factory, tmp_path):
    b = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "coop", 6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    a = Member(tmp_path, "confluent-kafka", b.bootstrap, "coop", "cg", coop)
    c = None
    try:
        wait_for(lambda: a.assigned == list(range(6)), 30, "the first member to own everything")
        c = Member(tmp_path, "confluent-kafka", b.bootstrap, "coop", "cg", coop)
        wait_for(lambda: balanced([a, c], 6) and len(c.assigned) == 3, 30, "the second member's share")
        revoked = [p for e in a.of("on_revoke") for p in e["on_revoke"]]
        assert sorted(revoked) == sorted(c.assigned)  # only what moved was revoked
        assert len(revoked) == 3
        history = [e["assigned"] for e in a.of("assigned")]
        after = history[history.index(list(range(6))):]
        assert all(len(k) >= 3 for k in after), history  # never without its partitions in between
    finally:
        for m in (a, c):
            if m:
                m.kill()


KIP848 = {"group.protocol": "consumer"}


def test_kip848_consumers_share_partitions_and_take_over_from_a_killed_one(broker_factory, tmp_path):
    """confluent-kafka with group.protocol=consumer: the broker assigns; a SIGKILLed member's
    partitions move after the session timeout; every record read, none again past a commit."""
    b = broker_factory({**SETTINGS, "group.consumer.session.timeout.ms": str(SESSION_MS),
                        "group.consumer.heartbeat.interval.ms": "500"})
    topic, parts, per = "kip848", 4, 50
    create_topic(b.bootstrap, topic, parts)
    produce(b.bootstrap, topic, parts, per)
    x = Member(tmp_path, "confluent-kafka", b.bootstrap, topic, "g848", KIP848)
    y = None
    try:
        wait_for(lambda: x.assigned == list(range(parts)), 30, "the first member to own everything")
        y = Member(tmp_path, "confluent-kafka", b.bootstrap, topic, "g848", KIP848)
        wait_for(lambda: balanced([x, y], parts) and len(y.assigned) == 2, 30, "an even share")
        wait_for(lambda: x.of("committed"), 30, "the first member to commit")
        x.kill()
        killed = time.monotonic()
        took = wait_for(lambda: y.assigned == list(range(parts)), 30, "the takeover") - killed
        assert took < SESSION_MS / 1000 + 3
        produce(b.bootstrap, topic, parts, per, start=per)
        wait_for(lambda: len({tuple(r) for m in (x, y) for e in m.of("records") for r in e["records"]})
                 == parts * 2 * per, 60, "every record to be read")
    finally:
        for m in (x, y):
            if m:
                m.kill()


def test_kip848_static_member_restart_keeps_its_partitions(broker_factory, tmp_path):
    """A static member (group.instance.id) closed and started again within the session gets its
    partitions back; the other member is not disturbed."""
    b = broker_factory({**SETTINGS, "group.consumer.session.timeout.ms": "10000",
                        "group.consumer.heartbeat.interval.ms": "500"})
    create_topic(b.bootstrap, "s848", 4)
    a = Member(tmp_path, "confluent-kafka", b.bootstrap, "s848", "sg848",
               {**KIP848, "group.instance.id": "a"})
    m1 = Member(tmp_path, "confluent-kafka", b.bootstrap, "s848", "sg848",
                {**KIP848, "group.instance.id": "b"})
    m2 = None
    try:
        wait_for(lambda: balanced([a, m1], 4) and len(m1.assigned) == 2, 30, "both assigned")
        before_a, before_b = a.assigned, m1.assigned
        revokes = len(a.of("on_revoke"))
        m1.stop()
        m2 = Member(tmp_path, "confluent-kafka", b.bootstrap, "s848", "sg848",
                    {**KIP848, "group.instance.id": "b"})
        wait_for(lambda: m2.assigned, 20, "the restarted member's assignment")
        time.sleep(2)
        assert m2.assigned == before_b
        assert a.assigned == before_a and len(a.of("on_revoke")) == revokes
    finally:
        for m in (a, m1, m2):
            if m:
                m.kill()


def test_classic_group_survives_a_broker_restart_without_a_rebalance(broker_factory, tmp_path):
    """The group's stored metadata brings it back after kill -9: confluent-kafka's static members
    keep heartbeating (or rejoin) into the same generation, so nobody's partitions are revoked."""
    b = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "restart", 4)
    a = Member(tmp_path, "confluent-kafka", b.bootstrap, "restart", "rg", {"group.instance.id": "a"})
    d = Member(tmp_path, "confluent-kafka", b.bootstrap, "restart", "rg", {"group.instance.id": "d"})
    try:
        wait_for(lambda: balanced([a, d], 4) and len(a.assigned) == 2, 30, "both static members assigned")
        before = (a.assigned, d.assigned)
        revokes = (len(a.of("on_revoke")), len(d.of("on_revoke")))
        b.kill()
        b.start()
        produce(b.bootstrap, "restart", 4, 10)
        wait_for(lambda: len({tuple(r) for m in (a, d) for e in m.of("records") for r in e["records"]}) == 40,
                 30, "the records produced after the restart")
        time.sleep(SESSION_MS / 1000 + 1)  # past a session: nothing may happen meanwhile
        assert (a.assigned, d.assigned) == before
        assert (len(a.of("on_revoke")), len(d.of("on_revoke"))) == revokes
    finally:
        for m in (a, d):
            m.kill()
