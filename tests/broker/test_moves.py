"""Partitions move between brokers (real processes, real clients): AlterPartitionReassignments
under load keeps every acknowledged record in order; coordinators follow their partitions;
bad reassignments are clear errors with nothing changed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, create, leaders, metadata, wait_for  # noqa: F401

from headrace.broker.coordinator.group.group_offsets import partition_for
from headrace.broker.cluster.placement import BrokerInfo, assign_replicas, rebalance
from headrace.protocol import ApiKey, ErrorCode, messages

# small bounds: a stuck move gives up fast, copies fetch often
FAST = {"replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200}

ROOT = Path(__file__).resolve().parents[2]
AR = messages.AlterPartitionReassignmentsRequest
LR = messages.ListPartitionReassignmentsRequest


def reassign(broker, topic: str, targets: dict[int, list[int] | None]):
    request = AR(
        timeout_ms=10000,
        topics=[
            AR.ReassignableTopic(
                name=topic,
                partitions=[AR.ReassignablePartition(partition_index=i, replicas=r) for i, r in targets.items()],
            )
        ],
    )
    with WireClient(broker.port) as c:
        response = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, request)
    return {p.partition_index: (p.error_code, p.error_message) for p in response.responses[0].partitions}


def ongoing(broker) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    with WireClient(broker.port) as c:
        response = c.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, LR(timeout_ms=10000, topics=None))
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    }


class Load:
    """An idempotent acks=all producer sending numbered records in a thread; ``acked`` holds
    (partition, offset, value) of every acknowledged record. ``padding``: bytes added to each
    value, sent fewer at a time and lingered over, so requests carry hundreds of KiB per
    partition (the append stage's writes)."""

    def __init__(self, brokers, topic: str, partitions: int, padding: int = 0) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap(brokers),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 50 if padding else 2,
                "retry.backoff.ms": 20,
            }
        )
        self.topic, self.partitions = topic, partitions
        self.padding, self.burst = b"." * padding, 3 if padding else 20
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(self.burst):
                self.producer.produce(
                    self.topic,
                    value=b"%08d" % self.sent + self.padding,
                    partition=self.sent % self.partitions,
                    on_delivery=self._delivered,
                )
                self.sent += 1
            self.producer.poll(0.005)
        assert self.producer.flush(30) == 0

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_acked(self, n: int) -> None:
        wait_for(lambda: len(self.acked) >= n, 30, f"{n} records acknowledged")


def read_all(brokers, topic: str, partitions: int, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(brokers), "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {i: [] for i in range(partitions)}
    n, deadline = 0, time.monotonic() + 60
    while n < expected and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.value()))
        n += 1
    consumer.close()
    return got


def check_every_acked_record(load: Load, got: dict[int, list[tuple[int, bytes]]]) -> None:
    assert not load.failed, load.failed[:3]
    assert len(load.acked) == load.sent
    for partition, records in got.items():
        acked = sorted((o, v) for p, o, v in load.acked if p == partition)
        assert records == acked, f"partition {partition}: {len(records)} read, {len(acked)} acknowledged"
        values = [v for _, v in records]
        assert values == sorted(values)  # in the order they were sent


def test_a_move_under_load_keeps_every_acknowledged_record_in_order(cluster):
    brokers = cluster(3, **FAST)
    create(brokers, "moving", 3)
    before = leaders(brokers[0], "moving")
    index = 0
    source = before[index]
    target = next(n for n in (1, 2, 3) if n != source)
    with Load(brokers, "moving", 3) as load:
        load.wait_acked(3000)
        assert reassign(brokers[0], "moving", {index: [target]}) == {index: (ErrorCode.NONE, None)}
        wait_for(lambda: leaders(brokers[0], "moving")[index] == target, 30, "the switch")
        wait_for(lambda: not ongoing(brokers[0]), 10, "no move listed")
        acked_at_switch = len(load.acked)
        load.wait_acked(acked_at_switch + 3000)  # producing carries on at the new leader
    # the old broker deleted its copy, the new one serves it; epochs went up by one
    wait_for(lambda: not (brokers[source - 1].data_dir / f"moving-{index}").exists(), 10, "old copy removed")
    assert (brokers[target - 1].data_dir / f"moving-{index}").exists()
    # the log line follows the switch's ZooKeeper write, and the broker's log is read by a
    # thread: it may come a little after the copy's removal
    old_log = brokers[source - 1].lines
    try:
        switched = wait_for(
            lambda: [line for line in old_log if f"moving-{index} moved to [{target}]" in line],
            10,
            "the old leader to log the switch",
        )
    except AssertionError:
        print("\n".join(line for line in old_log if f"moving-{index}" in line))
        raise
    print(switched[0])  # how long writes were stopped
    md = metadata(brokers[0], ["moving"])
    epochs = {p.partition_index: p.leader_epoch for p in md.topics[0].partitions}
    assert epochs == {0: 1, 1: 0, 2: 0}
    check_every_acked_record(load, read_all(brokers, "moving", 3, load.sent))


def test_a_move_under_large_requests_keeps_every_acknowledged_record(cluster):
    """Requests of several hundred KiB per partition, whose copies into the page cache the
    append stage makes: the switch waits for the writes in flight before it takes the log
    end offset as final (the flush before it nearly always outlasts them, so this walks the
    path rather than forcing the race)."""
    brokers = cluster(3, **FAST)
    create(brokers, "moving", 3)
    source = leaders(brokers[0], "moving")[0]
    target = next(n for n in (1, 2, 3) if n != source)
    with Load(brokers, "moving", 3, padding=40 * 1024) as load:
        load.wait_acked(300)
        assert reassign(brokers[0], "moving", {0: [target]}) == {0: (ErrorCode.NONE, None)}
        wait_for(lambda: leaders(brokers[0], "moving")[0] == target, 30, "the switch")
        load.wait_acked(len(load.acked) + 300)
    check_every_acked_record(load, read_all(brokers, "moving", 3, load.sent))


def replicas_of(broker, topic: str) -> dict[int, tuple[list[int], list[int], int, int]]:
    """Partition -> (replicas, ISR, leader, leader epoch), as Metadata tells them."""
    md = metadata(broker, [topic])
    return {
        p.partition_index: (list(p.replica_nodes), sorted(p.isr_nodes), p.leader_id, p.leader_epoch)
        for p in md.topics[0].partitions
    }


def test_replicated_partitions_move_kafkas_way_under_load(cluster):
    """RF=3 partitions on four brokers: one gets a follower replaced (its leader stays), the
    other loses its leader; the adding replicas follow first, the new replica sets take
    effect once they are in the ISR, removed replicas delete their copies, nothing
    acknowledged is lost."""
    brokers = cluster(4, **FAST)
    create(brokers, "wide", 2, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_for(lambda: all(len(isr) == 3 for _, isr, _, _ in replicas_of(brokers[0], "wide").values()), 30, "full ISRs")
    before = replicas_of(brokers[0], "wide")
    (r0, _, leader0, epoch0), (r1, _, leader1, epoch1) = before[0], before[1]
    spare0 = next(n for n in (1, 2, 3, 4) if n not in r0)
    spare1 = next(n for n in (1, 2, 3, 4) if n not in r1)
    dropped0 = next(n for n in r0 if n != leader0)  # a follower of partition 0 leaves
    target0 = [leader0] + [n for n in r0 if n not in (leader0, dropped0)] + [spare0]
    target1 = [spare1] + [n for n in r1 if n != leader1]  # partition 1's leader leaves
    with Load(brokers, "wide", 2) as load:
        load.wait_acked(2000)
        paused = brokers[spare0 - 1]
        asked = brokers[leader0 - 1]  # (not the paused one)
        os.kill(paused.pid, signal.SIGSTOP)  # partition 0's move waits for it
        try:
            assert reassign(asked, "wide", {0: target0, 1: target1}) == {
                0: (ErrorCode.NONE, None),
                1: (ErrorCode.NONE, None),
            }
            listed = ongoing(asked)[("wide", 0)]
            assert listed == (target0 + [dropped0], [spare0], [dropped0])
            assert sorted(replicas_of(asked, "wide")[0][0]) == [1, 2, 3, 4]  # RS = ORS + TRS
            time.sleep(1)
            assert replicas_of(asked, "wide")[0][0] != target0  # not before the ISR has it
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        wait_for(lambda: not ongoing(asked), 60, "both moves done")

        def settled() -> bool:  # the topic's znode and the partitions' states are watched
            return all(  # apart: Metadata may show the new replicas with the old state a while
                leader in reps and set(isr) <= set(reps)
                for reps, isr, leader, _ in replicas_of(asked, "wide").values()
            )

        wait_for(settled, 10, "the moved partitions' states in the metadata")
        after = replicas_of(asked, "wide")
        load.wait_acked(len(load.acked) + 2000)  # producing carries on
    assert after[0][0] == target0 and after[0][2] == leader0 and after[0][3] == epoch0
    assert after[1][0] == target1 and after[1][2] == spare1 and after[1][3] == epoch1 + 1
    wait_for(lambda: all(isr == sorted(r) for r, isr, _, _ in replicas_of(asked, "wide").values()), 30, "full ISRs")
    for index, target, gone in ((0, target0, dropped0), (1, target1, leader1)):
        wait_for(lambda: not (brokers[gone - 1].data_dir / f"wide-{index}").exists(), 10, "the removed copy deleted")
        for n in target:
            assert (brokers[n - 1].data_dir / f"wide-{index}").exists()
    check_every_acked_record(load, read_all(brokers, "wide", 2, load.sent))


def test_a_reassignment_to_a_broker_that_does_not_exist_is_refused_and_nothing_changes(cluster):
    brokers = cluster(3, **FAST)
    create(brokers, "stay", 2)
    before = leaders(brokers[0], "stay")
    answer = reassign(brokers[1], "stay", {0: [9], 1: [1, 1]})
    assert answer[0][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "Broker 9 is not a registered broker" in answer[0][1]
    assert answer[1][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "names a broker twice" in answer[1][1]
    # a v1 request that keeps the replication factor refuses a target of another size
    request = AR(
        timeout_ms=10000,
        allow_replication_factor_change=False,
        topics=[AR.ReassignableTopic(name="stay", partitions=[AR.ReassignablePartition(partition_index=0, replicas=[1, 2])])],
    )
    with WireClient(brokers[0].port) as c:
        response = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, request)
    assert response.responses[0].partitions[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert reassign(brokers[1], "stay", {0: None})[0][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert reassign(brokers[1], "nosuch", {0: [1]})[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not ongoing(brokers[2])
    time.sleep(0.5)
    assert leaders(brokers[2], "stay") == before


def _kafka_tool(
    main_class: str, args: list[str], timeout: float = 60, version: str | None = None
) -> subprocess.CompletedProcess:
    """Run one of Apache Kafka's tools (``version``: Kafka's release, default the benchmarks')."""
    spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
    apache_kafka = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(apache_kafka)
    version = version or apache_kafka.KAFKA_VERSION
    cmd = [
        "java",
        *apache_kafka.TOOL_JVM_FLAGS,
        *apache_kafka.log_flags(version, tool=True),
        "-cp",
        apache_kafka.classpath(version),
        main_class,
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {main_class} {' '.join(args)}\n{done.stdout}{done.stderr}")
    return done


REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")
def test_kafka_reassign_partitions_generates_executes_and_verifies(cluster, tmp_path):
    brokers = cluster(3, **FAST)
    create(brokers, "tool", 6)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "enable.idempotence": True})
    for i in range(600):
        producer.produce("tool", value=b"%d" % i, partition=i % 6)
    assert producer.flush(30) == 0
    before = leaders(brokers[0], "tool")
    b = ["--bootstrap-server", brokers[0].bootstrap]
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": "tool"}]}))
    done = _kafka_tool(REASSIGN, [*b, "--generate", "--topics-to-move-json-file", str(tmp_path / "topics.json"), "--broker-list", "1,2,3"])
    assert done.returncode == 0
    current = json.loads(done.stdout.split("Current partition replica assignment")[1].split("\n")[1])
    assert {p["partition"]: p["replicas"] for p in current["partitions"]} == {i: [n] for i, n in before.items()}
    # move every partition to the next broker
    plan = {
        "version": 1,
        "partitions": [{"topic": "tool", "partition": i, "replicas": [n % 3 + 1]} for i, n in before.items()],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = _kafka_tool(REASSIGN, [*b, "--execute", "--reassignment-json-file", str(tmp_path / "plan.json")])
    assert done.returncode == 0 and "Successfully started partition reassignments" in done.stdout
    want = {i: n % 3 + 1 for i, n in before.items()}
    wait_for(lambda: leaders(brokers[0], "tool") == want, 30, "every partition moved")
    done = _kafka_tool(REASSIGN, [*b, "--verify", "--reassignment-json-file", str(tmp_path / "plan.json")])
    assert done.returncode == 0
    assert done.stdout.count("is completed") == 6, done.stdout
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "t", "enable.auto.commit": False})
    consumer.assign([TopicPartition("tool", i, 0) for i in range(6)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 600 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(int(m.value()))
    consumer.close()
    assert sorted(values) == list(range(600))


# the internal topics have their default replication factor (3, at most the brokers)
CONTROLLER = {
    **FAST,
    "controller.rebalance.interval.ms": 500,
    "offsets.topic.num.partitions": 6,
}
# the single-replica case: internal topics of one replica, moved by copy and switch
SINGLE = {**CONTROLLER, "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1}


def placement(brokers, topic: str) -> dict[int, int]:
    return leaders(brokers[0], topic)


def expected(topic: str, count: int, members) -> dict[int, int]:
    placed = assign_replicas([(topic, i) for i in range(count)], {n: BrokerInfo() for n in members}, 1)
    return {i: placed[(topic, i)][0] for i in range(count)}


def rebalanced(topic: str, now: dict[int, int], members) -> dict[int, int]:
    """Where the controller moves the partitions of a topic of one replica led as ``now`` (a
    topic whose partitions divide evenly over the members: no other topic counts)."""
    placed = rebalance({(topic, i): [n] for i, n in now.items()}, {n: BrokerInfo() for n in members}, 1)
    return {i: placed[(topic, i)][0] for i in now}


def replica_sets(broker, topic: str) -> dict[int, list[int]]:
    return {p.partition_index: sorted(p.replica_nodes) for p in metadata(broker, [topic]).topics[0].partitions}


class Reader:
    """A consumer in group ``readers`` polling in a thread, committing as it goes."""

    def __init__(self, brokers, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap(brokers),
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            }
        )
        self.consumer.subscribe([topic])
        self.got: dict[int, list[tuple[int, bytes]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self.consumer.poll(0.2)
            if m is not None and not m.error():
                self.got.setdefault(m.partition(), []).append((m.offset(), m.value()))

    def count(self) -> int:
        """Records read, each offset counted once (a rebalance may repeat some)."""
        return sum(len({o for o, _ in v}) for v in list(self.got.values()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def test_a_joining_broker_takes_exactly_the_partitions_placement_gives_it_under_load(cluster):
    brokers = cluster(3, **CONTROLLER)
    create(brokers, "load", 12)
    before = placement(brokers, "load")
    assert before == expected("load", 12, (1, 2, 3))
    reader = Reader(brokers, "load")
    with Load(brokers, "load", 12) as load:
        load.wait_acked(3000)
        wait_for(lambda: reader.count() > 1000, 30, "the group reading")
        offsets_before = replica_sets(brokers[0], "__consumer_offsets")
        brokers += cluster(1, **CONTROLLER)
        want = rebalanced("load", before, (1, 2, 3, 4))
        # node 4 takes 3 partitions, one from each, and nothing else moves
        assert sorted(Counter(want.values()).values()) == [3, 3, 3, 3]
        assert sum(want[i] != n for i, n in before.items()) == 3
        try:
            wait_for(lambda: placement(brokers, "load") == want, 60, "the partitions placement gives node 4")
        except AssertionError:
            print("DEBUG want", want, "got", placement(brokers, "load"))
            for b in brokers:
                print("DEBUG", b.port, "\n".join(b.lines[-80:]))
            raise
        # 18 replicas over 4: node 4 takes 4 or 5, each from a partition it did not hold, and
        # 1 or 2 of the 6 leaderships
        def offsets_even() -> bool:
            now = replica_sets(brokers[0], "__consumer_offsets")
            held = Counter(b for r in now.values() for b in r)
            moved = sum(len(set(now[i]) - set(offsets_before[i])) for i in now)
            leading = Counter(leaders(brokers[0], "__consumer_offsets").values())
            return (
                sorted(held) == [1, 2, 3, 4]
                and 4 <= min(held.values()) <= max(held.values()) <= 5
                and moved == held[4]
                and sorted(leading.values()) == [1, 1, 2, 2]
            )

        wait_for(offsets_even, 60, "__consumer_offsets placed")
        moved = load.acked[-1:]
        load.wait_acked(len(load.acked) + 3000)  # producing carries on
        assert moved
    acked_offsets = {}
    for p, o, _ in load.acked:
        acked_offsets.setdefault(p, set()).add(o)

    def missing() -> dict[int, list[int]]:
        return {
            p: sorted(want - {o for o, _ in list(reader.got.get(p, ()))})
            for p, want in acked_offsets.items()
            if not want <= {o for o, _ in list(reader.got.get(p, ()))}
        }

    try:
        wait_for(lambda: not missing(), 60, "the group read everything")
    except AssertionError:
        gaps = missing()
        print("DEBUG missing", {p: (len(m), m[0], m[-1], max(acked_offsets[p])) for p, m in gaps.items()})
        acked = {i: sum(1 for p, _, _ in load.acked if p == i) for i in range(12)}
        print("DEBUG read", {i: len(v) for i, v in reader.got.items()}, "acked", acked, placement(brokers, "load"))
        for b in brokers:
            print("DEBUG", b.port, "\n".join(b.lines[-60:]))
        raise
    reader.close()
    check_every_acked_record(load, read_all(brokers, "load", 12, load.sent))
    # the group saw every record once at least, in order per partition (a rebalance may
    # repeat some after the last commit)
    for partition, records in reader.got.items():
        offsets_read = [o for o, _ in records]
        assert sorted(set(offsets_read)) == sorted((o for p, o, _ in load.acked if p == partition))
    assert sorted(
        int(d.name.rsplit("-", 1)[1]) for d in brokers[3].data_dir.glob("load-*")
    ) == sorted(i for i, n in want.items() if n == 4)


def unregister(broker, node: int):
    with WireClient(broker.port) as c:
        return c.request(ApiKey.UNREGISTER_BROKER, 0, messages.UnregisterBrokerRequest(broker_id=node))


def test_a_removed_broker_is_drained_under_load_then_stops(cluster):
    brokers = cluster(4, **CONTROLLER)
    create(brokers, "drain", 12)
    create(brokers, "drain3", 4, replication_factor=3)
    before = placement(brokers, "drain")
    assert before == expected("drain", 12, (1, 2, 3, 4))
    assert any(4 in r for r in replica_sets(brokers[0], "drain3").values())
    with Load(brokers, "drain", 12) as load:
        load.wait_acked(3000)
        if shutil.which("java") and shutil.which("mvn"):  # Kafka's own tool
            done = _kafka_tool(CLUSTER_TOOL, ["unregister", "--bootstrap-server", brokers[1].bootstrap, "--id", "4"])
            assert done.returncode == 0, done.stderr
        else:
            r = unregister(brokers[1], 4)
            assert (r.error_code, r.error_message) == (ErrorCode.NONE, None)
        want = rebalanced("drain", before, (1, 2, 3))
        assert all(want[i] == n for i, n in before.items() if n != 4)  # only node 4's move
        wait_for(lambda: placement(brokers, "drain") == want, 60, "node 4 drained")
        wait_for(lambda: replica_sets(brokers[0], "drain3") == {i: [1, 2, 3] for i in range(4)}, 60, "drain3 off node 4")
        wait_for(lambda: not list(brokers[3].data_dir.glob("drain*-*")), 10, "node 4's copies removed")
        try:
            create(brokers, "fresh", 8)  # nothing new goes to a broker being removed
        except AssertionError:
            for b in brokers:
                print("DEBUG", b.port, leaders(b, "fresh"), "\n".join(b.lines[-30:]))
            raise
        assert 4 not in placement(brokers, "fresh").values()
        load.wait_acked(len(load.acked) + 2000)
    brokers[3].stop()
    assert unregister(brokers[0], 4).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert unregister(brokers[0], 9).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    check_every_acked_record(load, read_all(brokers[:3], "drain", 12, load.sent))


def test_a_group_keeps_its_committed_offsets_when_its_offsets_partition_moves(cluster):
    brokers = cluster(3, **SINGLE)
    create(brokers, "kept", 3)
    producer = Producer({"bootstrap.servers": bootstrap(brokers)})
    for i in range(300):
        producer.produce("kept", value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "keeper", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("kept", i, 10 * (i + 1)) for i in range(3)], asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed([TopicPartition("kept", i) for i in range(3)], 10)}
    consumer.close()
    assert committed == {0: 10, 1: 20, 2: 30}
    index = partition_for("keeper", 6)
    source = placement(brokers, "__consumer_offsets")[index]
    target = next(n for n in (1, 2, 3) if n != source)
    assert reassign(brokers[0], "__consumer_offsets", {index: [target]})[index][0] == ErrorCode.NONE
    wait_for(lambda: placement(brokers, "__consumer_offsets")[index] == target, 30, "the offsets partition moved")
    after = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "keeper", "enable.auto.commit": False})
    got = after.committed([TopicPartition("kept", i) for i in range(3)], 10)
    after.close()
    assert {tp.partition: tp.offset for tp in got} == committed
    with WireClient(brokers[0].port) as c:
        found = c.request(ApiKey.FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key="keeper", key_type=0))
    assert found.node_id == target


def test_an_open_transaction_and_an_idempotent_producer_carry_on_across_a_move(cluster):
    brokers = cluster(3, **FAST)
    create(brokers, "txn", 1)
    source = leaders(brokers[0], "txn")[0]
    target = next(n for n in (1, 2, 3) if n != source)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "transactional.id": "mover"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(100):
        producer.produce("txn", value=b"a%d" % i, partition=0)
    producer.flush(10)
    producer.abort_transaction(10)
    producer.begin_transaction()
    for i in range(100):
        producer.produce("txn", value=b"before%d" % i, partition=0)
    producer.flush(10)  # the transaction is open while the partition moves
    assert reassign(brokers[0], "txn", {0: [target]})[0][0] == ErrorCode.NONE
    wait_for(lambda: leaders(brokers[0], "txn")[0] == target, 30, "the switch")
    for i in range(100):
        producer.produce("txn", value=b"after%d" % i, partition=0)
    producer.commit_transaction(10)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(brokers), "group.id": "c", "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("txn", 0, 0)])
    values, deadline = [], time.monotonic() + 30
    while len(values) < 200 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    consumer.close()
    assert values == [b"before%d" % i for i in range(100)] + [b"after%d" % i for i in range(100)]
