"""Replication and failover: three Headrace brokers and one ZooKeeper (real processes on
127.0.0.1), idempotent acks=all producers (confluent-kafka) whose every acknowledged record is
read back afterwards (bench/fault_load.py).

The brokers use ``zookeeper.session.timeout.ms=6000`` (Kafka's ZooKeeper-era default was
18000): a killed or paused broker is taken for gone, and its partitions get new leaders, about
6 s after it stops answering."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafkawire import WireClient

from fault_load import AckedLoad
from tcp_proxy import TcpProxy
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

SESSION_MS = 6000


@pytest.fixture
def cluster(tmp_path, zk_connect):
    """``cluster(3)`` starts nodes 1-3; all are killed at the end."""
    brokers: list[BrokerProcess] = []

    def start(count: int, **overrides) -> list[BrokerProcess]:
        for _ in range(count):
            node = len(brokers) + 1
            b = BrokerProcess(
                tmp_path / f"node{node}",
                {
                    "zookeeper.connect": zk_connect,
                    "node.id": node,
                    "zookeeper.session.timeout.ms": SESSION_MS,
                    "replica.lag.time.max.ms": 4000,
                    **overrides,
                },
                args=["--workers", "1"],
            )
            brokers.append(b.start())
        return brokers

    yield start
    for b in brokers:
        if b.proc is not None:
            try:
                os.kill(b.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        b.kill()


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers if b.alive)


def wait_for(check, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def partitions(broker, topic: str) -> dict[int, messages.MetadataResponse.MetadataResponsePartition]:
    with WireClient(broker.port) as c:
        md = c.request(
            ApiKey.METADATA,
            12,
            messages.MetadataRequest(
                topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            ),
        )
    return {p.partition_index: p for p in md.topics[0].partitions}


def create(brokers, name: str, count: int, rf: int, **configs) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    topic = NewTopic(name, count, replication_factor=rf, config={k: str(v) for k, v in configs.items()})
    admin.create_topics([topic], operation_timeout=10)[name].result(timeout=30)
    for b in brokers:
        wait_for(lambda b=b: len(partitions(b, name)) == count, 10, f"{name} on every broker")


def in_sync(brokers, name: str, count: int, rf: int):
    """Every partition of ``name`` has its full ISR, as every live broker tells it (not yet
    while one closes its connections: a fenced broker does until the controller confirms it)."""
    try:
        return all(
            len(ps) == count
            and all(len(p.isr_nodes) == rf and p.leader_id >= 0 for p in ps.values())
            for b in brokers
            if b.alive
            for ps in [partitions(b, name)]
        )
    except ConnectionError:
        return False


def produce_one(broker, topic: str, index: int, acks: int = -1, timeout_ms: int = 5000) -> int:
    request = messages.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(
                        index=index, records=build_batch([Record(key=None, value=b"x")])
                    )
                ],
            )
        ],
    )
    with WireClient(broker.port) as c:
        r = c.request(ApiKey.PRODUCE, 9, request)
    return r.responses[0].partition_responses[0].error_code


def test_replicas_are_placed_and_metadata_tells_leader_isr_and_epoch(cluster):
    brokers = cluster(3)
    create(brokers, "placed", 6, 3)
    wait_for(lambda: in_sync(brokers, "placed", 6, 3), 30, "full ISRs")
    ps = partitions(brokers[0], "placed")
    for p in ps.values():
        assert sorted(p.replica_nodes) == [1, 2, 3]
        assert p.leader_id == p.replica_nodes[0]  # the preferred leader leads
        assert p.leader_epoch == 0
    assert len({p.leader_id for p in ps.values()}) == 3  # leaders spread over the brokers
    for node, b in enumerate(brokers, 1):  # every broker holds a replica of every partition
        assert sorted(int(d.name.rsplit("-", 1)[1]) for d in b.data_dir.glob("placed-*")) == list(range(6))
    # a replication factor above the live brokers is refused
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    with pytest.raises(Exception) as e:
        admin.create_topics([NewTopic("toomany", 1, replication_factor=4)])["toomany"].result(30)
    assert e.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_followers_copy_the_leader_and_consumers_read_everything(cluster):
    brokers = cluster(3)
    create(brokers, "copied", 2, 3, **{"min.insync.replicas": 2})
    load = AckedLoad(bootstrap(brokers), "copied", producers=2, partitions=2).start()
    wait_for(lambda: load.acked_count() > 2000, 60, "acknowledgements")
    load.stop()
    result = load.check()
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, result
    assert result["read_all"] == 1 and not load.errors, (result, load.errors)
    # the followers have the same log ends as the leader (what ListOffsets latest says)
    wait_for(lambda: in_sync(brokers, "copied", 2, 3), 30, "full ISRs")
    for b in brokers:
        sizes = {d.name: sum(f.stat().st_size for f in d.glob("*.log")) for d in b.data_dir.glob("copied-*")}
        assert all(sizes.values()), sizes


def test_kill_9_of_the_leader_loses_no_acknowledged_record(cluster):
    brokers = cluster(3)
    create(brokers, "busy", 3, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "busy", 3, 3), 30, "full ISRs")
    load = AckedLoad(bootstrap(brokers), "busy", producers=3, partitions=3).start()
    failovers = []
    try:
        for _ in range(3):
            wait_for(lambda: in_sync(brokers, "busy", 3, 3), 60, "full ISRs before the kill")
            before = load.acked_count()
            wait_for(lambda before=before: load.acked_count() > before + 300, 60, "load")
            leader = partitions(next(b for b in brokers if b.alive), "busy")[0].leader_id
            victim = brokers[leader - 1]
            killed = time.monotonic()
            victim.kill()
            first = wait_for(lambda killed=killed: load.first_ack_after(killed + 0.5, 0), 60, "an ack on the new leader")
            failovers.append(first - killed)
            new_leader = partitions(next(b for b in brokers if b.alive), "busy")[0].leader_id
            assert new_leader not in (leader, -1)
            victim.start()  # it comes back as a follower and catches up
    finally:
        load.stop()
    result = load.check()
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, (result, failovers)
    assert result["read_all"] == 1 and not load.errors, (result, load.errors)
    assert result["acked"] > 1000


@pytest.mark.parametrize("flush", [{}, {"flush.messages": 1}], ids=["page-cache", "durable"])
def test_large_acks_all_produces_are_on_the_follower_that_takes_over(cluster, flush):
    """Requests of several hundred KiB, pipelined, whose copies the leader's append stage
    makes (durable: around the page cache, so the follower's fetches read the leader's disk):
    each acks=all answer comes once the follower has the batch, and after a kill -9 of the
    leader the follower that takes over serves every acknowledged record."""
    from test_append_stage import answers, read_all, send_produce, values_of

    brokers = cluster(2)
    create(brokers, "large", 1, 2, **{"min.insync.replicas": 2}, **flush)
    wait_for(lambda: in_sync(brokers, "large", 1, 2), 30, "a full ISR")
    leader = partitions(brokers[0], "large")[0].leader_id
    sent_values = [values_of(i) for i in range(8)]
    with WireClient(brokers[leader - 1].port, timeout=30) as c:
        sent = [send_produce(c, "large", v, 4 * i, acks=-1) for i, v in enumerate(sent_values)]
        parts = answers(c, sent)
    assert [(p.error_code, p.base_offset) for p in parts] == [(0, 4 * i) for i in range(8)]
    brokers[leader - 1].kill()
    survivor = brokers[2 - leader]
    wait_for(lambda: partitions(survivor, "large")[0].leader_id == 3 - leader,
             SESSION_MS / 1000 + 20, "the follower to lead")
    with WireClient(survivor.port, timeout=30) as c:
        assert read_all(c, "large") == [v for values in sent_values for v in values]


def test_a_stopped_leader_steps_down_truncates_and_rejoins_the_isr(cluster):
    brokers = cluster(3)
    create(brokers, "paused", 1, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "paused", 1, 3), 30, "full ISR")
    # A request in flight to the stopped leader is answered by no one: librdkafka's idempotent
    # producer moves the partition to the new leader only once that request times out
    # (socket.timeout.ms, 60 s by default), as it would against any broker.
    load = AckedLoad(
        bootstrap(brokers), "paused", producers=1, partitions=1, extra={"socket.timeout.ms": 10_000}
    ).start()
    try:
        wait_for(lambda: load.acked_count() > 300, 60, "load")
        old = partitions(brokers[0], "paused")[0]
        victim = brokers[old.leader_id - 1]
        os.kill(victim.pid, signal.SIGSTOP)
        others = [b for b in brokers if b is not victim]
        wait_for(
            lambda: partitions(others[0], "paused")[0].leader_id not in (old.leader_id, -1),
            SESSION_MS / 1000 + 20,
            "a new leader",
        )
        new = partitions(others[0], "paused")[0]
        assert new.leader_epoch > old.leader_epoch
        before = load.acked_count()
        wait_for(lambda: load.acked_count() > before + 200, 60, "acks on the new leader")
        os.kill(victim.pid, signal.SIGCONT)
        # the old leader follows now: back in the ISR, never acknowledging on its own
        wait_for(lambda: in_sync(brokers, "paused", 1, 3), 60, "the old leader back in the ISR")
        assert produce_one(victim, "paused", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        load.stop()
    result = load.check()
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, result
    assert result["read_all"] == 1 and not load.errors, (result, load.errors)


def test_min_insync_replicas_refuses_acks_all_when_the_isr_is_too_small(cluster):
    brokers = cluster(3)
    create(brokers, "strict", 1, 3, **{"min.insync.replicas": 3})
    create(brokers, "lenient", 1, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "strict", 1, 3) and in_sync(brokers, "lenient", 1, 3), 30, "full ISRs")
    strict_leader = partitions(brokers[0], "strict")[0].leader_id
    lenient_leader = partitions(brokers[0], "lenient")[0].leader_id
    assert produce_one(brokers[strict_leader - 1], "strict", 0) == ErrorCode.NONE
    victim = next(b for n, b in enumerate(brokers, 1) if n not in (strict_leader, lenient_leader))
    victim.kill()
    wait_for(lambda: len(partitions(brokers[strict_leader - 1], "strict")[0].isr_nodes) == 2, 30, "the ISR shrinks")
    wait_for(lambda: len(partitions(brokers[lenient_leader - 1], "lenient")[0].isr_nodes) == 2, 30, "the ISR shrinks")
    assert produce_one(brokers[strict_leader - 1], "strict", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_one(brokers[strict_leader - 1], "strict", 0, acks=1) == ErrorCode.NONE
    assert produce_one(brokers[lenient_leader - 1], "lenient", 0) == ErrorCode.NONE


def test_a_consumer_group_and_a_transaction_survive_a_kill_of_their_coordinator(cluster):
    brokers = cluster(3)
    create(brokers, "work", 3, 3, **{"min.insync.replicas": 2})
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "enable.idempotence": True})
    for i in range(300):
        producer.produce("work", value=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": "survivors",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["work"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 150 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed([TopicPartition("work", p) for p in range(3)], timeout=10)}
    txp = Producer({"bootstrap.servers": bootstrap(brokers), "transactional.id": "tx-survivor"})
    txp.init_transactions(30)
    txp.begin_transaction()
    txp.produce("work", value=b"1000", partition=0)
    # kill the group's coordinator (the leader of its partition of __consumer_offsets)
    from headrace.broker.coordinator.group.group_offsets import partition_for

    offsets_partition = partition_for("survivors", 50)
    coordinator = partitions(brokers[0], "__consumer_offsets")[offsets_partition].leader_id
    brokers[coordinator - 1].kill()
    txp.commit_transaction(60)
    while time.monotonic() < deadline + 60 and len(set(got)) < 301:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
    consumer.commit(asynchronous=False)
    after = {tp.partition: tp.offset for tp in consumer.committed([TopicPartition("work", p) for p in range(3)], timeout=30)}
    consumer.close()
    assert set(got) == set(range(300)) | {1000}
    assert all(after[p] >= committed[p] for p in range(3))
    assert sum(after.values()) >= 301


def test_transactions_across_brokers_commit_at_once_while_acks_all_producers_load_them(cluster):
    """A transaction's markers go to the leaders of its partitions and wait there for the ISR,
    the coordinator's broker among it. Were they sent on the connection its replica fetches
    to that leader use, a fetch answer carrying the marker would queue behind the marker's
    own answer (a broker answers a connection in request order) until the marker timed out
    (4 s): the commit, and every acks=all write of that partition, would wait that long."""
    brokers = cluster(3)
    create(brokers, "busy", 6, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "busy", 6, 3), 30, "full ISRs")
    leaders = {p.leader_id for p in partitions(brokers[0], "busy").values()}
    assert len(leaders) >= 2, leaders  # partitions led by brokers other than the coordinator
    load = AckedLoad(bootstrap(brokers), "busy", producers=6, partitions=6).start()
    took = []
    try:
        wait_for(lambda: load.acked_count() > 3000, 60, "load")
        started = time.monotonic()
        txp = Producer({"bootstrap.servers": bootstrap(brokers), "transactional.id": "across"})
        txp.init_transactions(30)
        for i in range(40):
            txp.begin_transaction()
            for p in range(6):
                txp.produce("busy", value=b"1000:%d" % i, partition=p)  # (not a load producer)
            txp.flush(30)
            t0 = time.monotonic()
            txp.commit_transaction(60)
            took.append(time.monotonic() - t0)
        gaps = load.longest_gaps(started)
    finally:
        load.stop()
    took.sort()
    print(f"commits: p50 {took[len(took) // 2] * 1000:.0f} ms, max {took[-1] * 1000:.0f} ms;"
          f" longest gaps without an ack (s): { {p: round(g, 2) for p, g in gaps.items()} }")
    assert took[-1] < 2.0, [round(t, 2) for t in took[-5:]]
    assert max(gaps.values()) < 2.0, gaps
    result = load.check()
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, result


def test_an_acknowledged_offset_commit_survives_a_kill_9_of_its_coordinator(cluster):
    """The commit is answered only once the followers of the group's partition of
    __consumer_offsets have it: with the followers paused it waits, and a kill -9 of the
    coordinator right after the answer loses nothing."""
    from headrace.broker.coordinator.group.group_offsets import partition_for

    brokers = cluster(3)
    create(brokers, "tracked", 1, 3)
    group = "durable"

    def consumer():
        return Consumer(
            {"bootstrap.servers": bootstrap(brokers), "group.id": group, "enable.auto.commit": False}
        )

    first = consumer()
    first.commit(offsets=[TopicPartition("tracked", 0, 5)], asynchronous=False)
    index = partition_for(group, 50)
    wait_for(lambda: len(partitions(brokers[0], "__consumer_offsets")[index].isr_nodes) == 3, 30, "a full ISR")
    coordinator_id = partitions(brokers[0], "__consumer_offsets")[index].leader_id
    coordinator = brokers[coordinator_id - 1]
    followers = [b for b in brokers if b is not coordinator]
    answered: list[float] = []

    def commit_then_kill():
        first.commit(offsets=[TopicPartition("tracked", 0, 42)], asynchronous=False)
        os.kill(coordinator.pid, signal.SIGKILL)  # at once: no time for anything to follow
        answered.append(time.monotonic())

    for b in followers:
        os.kill(b.pid, signal.SIGSTOP)
    paused = time.monotonic()
    committer = threading.Thread(target=commit_then_kill)
    committer.start()
    time.sleep(1.5)
    resumed = time.monotonic()
    for b in followers:
        os.kill(b.pid, signal.SIGCONT)
    committer.join(30)
    assert answered and answered[0] > resumed > paused  # not answered while they could not fetch
    coordinator.kill()
    first.close()
    # a follower takes the partition over (after the session timeout) and has the commit
    second = consumer()

    def committed():
        try:
            return [tp.offset for tp in second.committed([TopicPartition("tracked", 0)], timeout=5)]
        except KafkaException:
            return None  # no coordinator yet

    got = wait_for(committed, SESSION_MS / 1000 + 40, "the new coordinator")
    new_leader = partitions(followers[0], "__consumer_offsets")[index].leader_id
    assert new_leader not in (coordinator_id, -1)
    assert got == [42]
    second.close()


def log_end(broker, topic: str, index: int) -> int:
    return latest(broker, topic, index)[1]


def latest(broker, topic: str, index: int) -> tuple[int, int]:
    """ListOffsets latest (the high watermark) of one partition: (error code, offset)."""
    with WireClient(broker.port) as c:
        r = c.request(
            ApiKey.LIST_OFFSETS,
            7,
            messages.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    messages.ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[messages.ListOffsetsRequest.ListOffsetsPartition(partition_index=index, timestamp=-1)],
                    )
                ],
            ),
        )
    p = r.topics[0].partitions[0]
    return p.error_code, p.offset


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins(cluster):
    """Node 1 advertises a TCP proxy, so the other brokers reach it through it; the proxy
    blackholes node 3's inter-broker connections (a network partition between the leader and
    one follower; ZooKeeper still sees everyone)."""
    proxy = TcpProxy().start()
    try:
        brokers = cluster(1, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target = ("127.0.0.1", brokers[0].port)
        brokers = cluster(2)
        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
        for name, min_isr in (("cut2", 2), ("cut3", 3)):
            topic = NewTopic(name, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": str(min_isr)})
            admin.create_topics([topic], operation_timeout=10)[name].result(timeout=30)
        wait_for(lambda: in_sync(brokers, "cut2", 1, 3) and in_sync(brokers, "cut3", 1, 3), 30, "full ISRs")
        leader = brokers[0]
        load = AckedLoad(bootstrap(brokers), "cut2", producers=1, partitions=1).start()
        try:
            wait_for(lambda: load.acked_count() > 300, 60, "load")
            proxy.cut("headrace-broker-3")
            cut_at = time.monotonic()
            for name in ("cut2", "cut3"):
                wait_for(lambda name=name: sorted(partitions(leader, name)[0].isr_nodes) == [1, 2], 30, "node 3 out of the ISR")
            print(f"node 3 left the ISRs {time.monotonic() - cut_at:.1f} s after the cut")
            before = load.acked_count()
            wait_for(lambda: load.acked_count() > before + 300, 60, "acks=all with min.insync.replicas=2")
            # min.insync.replicas=3: refused before anything is appended, never acknowledged
            end = log_end(leader, "cut3", 0)
            assert produce_one(leader, "cut3", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
            failed = []
            refused = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "message.timeout.ms": 3000})
            refused.produce("cut3", value=b"never", partition=0, on_delivery=lambda err, msg: failed.append(err))
            refused.flush(30)
            assert len(failed) == 1 and failed[0] is not None, failed
            assert log_end(leader, "cut3", 0) == end
            proxy.heal()
            wait_for(lambda: in_sync(brokers, "cut2", 1, 3) and in_sync(brokers, "cut3", 1, 3), 60, "node 3 back in the ISRs")
            assert produce_one(leader, "cut3", 0) == ErrorCode.NONE
            assert partitions(brokers[1], "cut2")[0].leader_id == 1  # nobody was elected meanwhile
        finally:
            load.stop()
        result = load.check()
        assert result["lost"] == result["duplicated"] == result["reordered"] == 0, result
        assert result["read_all"] == 1 and not load.errors, (result, load.errors)
    finally:
        proxy.close()


def test_a_rolling_restart_under_load_loses_nothing_and_moves_leadership_first(cluster):
    """Each broker in turn is stopped cleanly (SIGTERM) and started again once every ISR is
    full; its controlled shutdown hands its leaderships over before it stops."""
    brokers = cluster(3)
    create(brokers, "rolling", 3, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "rolling", 3, 3), 30, "full ISRs")
    load = AckedLoad(bootstrap(brokers), "rolling", producers=3, partitions=3).start()
    try:
        wait_for(lambda: load.acked_count() > 1000, 60, "load")
        started = time.monotonic()
        for b in brokers:
            node = b.overrides["node.id"]
            led = sum(1 for p in partitions(b, "rolling").values() if p.leader_id == node)
            assert b.stop() == 0
            shutdown = [line for line in b.lines if "controlled shutdown in" in line]
            assert shutdown and "(0 partitions still led or in sync)" in shutdown[-1], shutdown
            print(f"node {node} (led {led}): {shutdown[-1].split('controlled shutdown')[1]}")
            b.start()
            wait_for(lambda: in_sync(brokers, "rolling", 3, 3), 60, "full ISRs again")
        before = load.acked_count()
        wait_for(lambda: load.acked_count() > before + 300, 60, "load after the restarts")
    finally:
        load.stop()
    gaps = load.longest_gaps(started)
    print("longest time without an acknowledgement, per partition (s):", {p: round(g, 2) for p, g in gaps.items()})
    result = load.check()
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, result
    assert result["read_all"] == 1 and not load.errors, (result, load.errors)


def checkpointed(broker) -> dict[tuple[str, int], int]:
    path = broker.data_dir / "replication-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")
    assert lines[0] == "0" and int(lines[1]) == len([line for line in lines[2:] if line])
    return {(t, int(p)): int(hw) for t, p, hw in (line.split() for line in lines[2:] if line)}


def test_every_replica_checkpoints_its_high_watermark_and_reads_it_back(cluster):
    """replication-offset-checkpoint: each broker writes the high watermark of each of its
    replicas (not its log end); acks=1 records the followers do not have stay above it, and a
    restarted broker's replicas start from what they had."""
    brokers = cluster(3, **{"replica.high.watermark.checkpoint.interval.ms": 200})
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    topic = NewTopic("marks", 1, replica_assignment=[[1, 2, 3]])
    admin.create_topics([topic], operation_timeout=10)["marks"].result(timeout=30)
    wait_for(lambda: in_sync(brokers, "marks", 1, 3), 30, "a full ISR")
    for _ in range(100):
        assert produce_one(brokers[0], "marks", 0) == ErrorCode.NONE
    for b in brokers:
        wait_for(lambda b=b: checkpointed(b).get(("marks", 0)) == 100, 10, "the high watermark checkpointed")
    for b in brokers[1:]:
        os.kill(b.pid, signal.SIGSTOP)  # the followers fetch nothing more
    try:
        for _ in range(5):
            assert produce_one(brokers[0], "marks", 0, acks=1) == ErrorCode.NONE
        time.sleep(1)  # several checkpoint intervals
        assert log_end(brokers[0], "marks", 0) == 100  # ListOffsets latest: the high watermark
        assert checkpointed(brokers[0])[("marks", 0)] == 100  # not the log end, 105
    finally:
        for b in brokers[1:]:
            os.kill(b.pid, signal.SIGCONT)
    wait_for(lambda: log_end(brokers[0], "marks", 0) == 105, 30, "the followers catch up")
    wait_for(lambda: all(checkpointed(b).get(("marks", 0)) == 105 for b in brokers), 10, "every checkpoint at 105")
    # a clean stop writes it last; the restarted broker reads it back, and the next writes
    # keep the partition (it is rewritten from what the replica knows)
    follower = brokers[2]
    assert follower.stop() == 0
    assert checkpointed(follower) == {("marks", 0): 105}
    follower.start()
    wait_for(lambda: in_sync(brokers, "marks", 1, 3), 30, "the follower back in the ISR")
    time.sleep(0.5)
    assert checkpointed(follower).get(("marks", 0)) == 105


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")
def test_kafka_leader_election_moves_leadership_back_to_the_preferred_replica(cluster):
    brokers = cluster(3)
    create(brokers, "elected", 1, 3)
    wait_for(lambda: in_sync(brokers, "elected", 1, 3), 30, "full ISR")
    first = partitions(brokers[0], "elected")[0]
    preferred = first.replica_nodes[0]
    brokers[preferred - 1].kill()
    other = next(b for n, b in enumerate(brokers, 1) if n != preferred)
    wait_for(lambda: partitions(other, "elected")[0].leader_id not in (preferred, -1), 30, "a new leader")
    brokers[preferred - 1].start()
    wait_for(lambda: in_sync(brokers, "elected", 1, 3), 60, "the preferred replica back in the ISR")
    assert partitions(other, "elected")[0].leader_id != preferred
    done = _kafka_tool(
        LEADER_ELECTION,
        ["--bootstrap-server", bootstrap(brokers), "--election-type", "PREFERRED", "--topic", "elected", "--partition", "0"],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully completed leader election (PREFERRED)" in done.stdout
    after = wait_for(
        lambda: (p := partitions(other, "elected")[0]).leader_id == preferred and p, 30, "the preferred leader"
    )
    assert after.leader_epoch > first.leader_epoch
    # nothing to do a second time
    again = _kafka_tool(
        LEADER_ELECTION,
        ["--bootstrap-server", bootstrap(brokers), "--election-type", "PREFERRED", "--topic", "elected", "--partition", "0"],
    )
    assert "Valid replica already elected" in again.stdout + again.stderr


LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
ROOT = Path(__file__).resolve().parents[2]


def _kafka_tool(main_class: str, args: list[str], timeout: float = 90) -> subprocess.CompletedProcess:
    spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
    apache_kafka = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(apache_kafka)
    version = apache_kafka.KAFKA_VERSION
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


def kill_all(brokers) -> None:
    """SIGKILL every broker at once (a stopped one too), then reap them."""
    for b in brokers:
        os.kill(b.pid, signal.SIGKILL)
    for b in brokers:
        b.kill()


def test_a_whole_cluster_killed_at_once_loses_nothing_acknowledged(cluster):
    """kill -9 of all three brokers together under the checked load, then all three started
    again: every acks=all record acknowledged before or after is read back once, in order."""
    brokers = cluster(3)
    create(brokers, "blackout", 3, 3, **{"min.insync.replicas": 2})
    wait_for(lambda: in_sync(brokers, "blackout", 3, 3), 30, "full ISRs")
    load = AckedLoad(bootstrap(brokers), "blackout", producers=3, partitions=3).start()
    try:
        wait_for(lambda: load.acked_count() > 1000, 60, "load")
        kill_all(brokers)
        killed, before = time.monotonic(), load.acked_count()
        for b in brokers:
            b.start()
        wait_for(lambda: in_sync(brokers, "blackout", 3, 3), 90, "full ISRs after the restart")
        for p in range(3):
            wait_for(lambda p=p: load.first_ack_after(killed, p), 90, f"acks on partition {p} again")
        wait_for(lambda: load.acked_count() > before + 600, 60, "load after the restart")
    finally:
        load.stop()
    result = load.check()
    print(f"{before} acknowledged before the kill; {result}")
    assert result["lost"] == result["duplicated"] == result["reordered"] == 0, (result, load.errors)
    assert result["read_all"] == 1 and not load.errors, (result, load.errors)


def test_a_leader_restarted_with_lagging_isr_members_exposes_only_the_checkpointed_high_watermark(cluster, zk_client):
    """Nodes 1-3 hold the partition (node 1 leads); node 4, holding nothing, is the controller
    once they die. Node 1 has 5 acks=1 records its followers lack (their fetches to it are
    blackholed by a proxy it advertises) when nodes 1-3 are killed together, the ISR still
    naming all three. The controller is paused until their sessions have all ended (they end
    up to a ping interval apart: seen one at a time, the first to go would leave the ISR) and
    again while the three start, so that it finds them all registered and, all of them
    restarted, elects node 1 (the first replica) with the ISR 1, 2, 3 while nodes 2 and 3
    still lack those records. Consumers must not see them before every ISR member has them:
    the restarted leader's high watermark comes from replication-offset-checkpoint (100), not
    its log end (105), until the lagging members leave the ISR (replica.lag.time.max.ms).
    Else an election of node 2 or 3 would take back offsets that consumers had read."""
    proxy = TcpProxy().start()
    # short sessions, so that the controller's pause while they end stays well within its own;
    # a long lag, so that the followers cut off stay in the ISR until the kill however slow
    # the machine is
    fast = {
        "replica.high.watermark.checkpoint.interval.ms": 200,
        "zookeeper.session.timeout.ms": 3000,
        "replica.lag.time.max.ms": 8000,
    }
    try:
        brokers = cluster(1, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, **fast)
        proxy.target = ("127.0.0.1", brokers[0].port)
        cluster(2, **fast)
        # the controller-to-be: a long session, so that a pause of a few seconds keeps it
        brokers = cluster(1, **{"zookeeper.session.timeout.ms": 10000})
        replicas, controller = brokers[:3], brokers[3]
        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
        topic = NewTopic("lagging", 1, replica_assignment=[[1, 2, 3]])
        admin.create_topics([topic], operation_timeout=10)["lagging"].result(timeout=30)
        wait_for(lambda: in_sync(brokers, "lagging", 1, 3), 30, "a full ISR")
        leader = brokers[0]
        for _ in range(100):
            assert produce_one(leader, "lagging", 0) == ErrorCode.NONE
        for b in replicas:
            wait_for(lambda b=b: checkpointed(b).get(("lagging", 0)) == 100, 10, "the high watermark checkpointed")
        proxy.cut("headrace-broker-2")
        proxy.cut("headrace-broker-3")
        for _ in range(5):
            assert produce_one(leader, "lagging", 0, acks=1) == ErrorCode.NONE
        time.sleep(0.5)  # checkpoints written meanwhile; within replica.lag.time.max.ms
        assert latest(leader, "lagging", 0) == (ErrorCode.NONE, 100)
        assert sorted(partitions(leader, "lagging")[0].isr_nodes) == [1, 2, 3]
        zk = zk_client()
        os.kill(controller.pid, signal.SIGSTOP)
        try:
            kill_all(replicas)
            wait_for(lambda: zk.get_children("/brokers/ids") == ["4"], 8, "sessions 1-3 ended")
        finally:
            os.kill(controller.pid, signal.SIGCONT)
        # node 4 controls and finds no live ISR member: no leader, the ISR kept
        wait_for(lambda: partitions(controller, "lagging")[0].leader_id == -1, 30, "no leader")
        assert sorted(partitions(controller, "lagging")[0].isr_nodes) == [1, 2, 3]
        os.kill(controller.pid, signal.SIGSTOP)
        try:
            starts = [threading.Thread(target=b.start) for b in replicas]
            for t in starts:
                t.start()
            wait_for(lambda: len(zk.get_children("/brokers/ids")) == 4, 4, "nodes 1-3 registered")
        finally:
            os.kill(controller.pid, signal.SIGCONT)
        for t in starts:
            t.join()
        seen: list[tuple[int, int, tuple[int, ...]]] = []  # (leader, latest offset, ISR read after)
        deadline = time.monotonic() + 12  # the ISR loses the lagging members after 8 s
        while time.monotonic() < deadline:
            time.sleep(0.05)
            for n, b in enumerate(replicas, 1):
                try:
                    error, offset = latest(b, "lagging", 0)
                    isr = tuple(sorted(partitions(b, "lagging")[0].isr_nodes))
                except (OSError, ConnectionError, KeyError):
                    continue
                if error == ErrorCode.NONE:
                    seen.append((n, offset, isr))
        print("(leader, latest offset, ISR) after the restart:", sorted(set(seen)))
        assert (1, 100, (1, 2, 3)) in seen, sorted(set(seen))  # the case this test is about
        # nodes 2 and 3 have 100: while either is in the ISR nothing above 100 is readable
        assert all(offset <= 100 for n, offset, isr in seen if isr != (n,)), sorted(set(seen))
        proxy.heal()
        wait_for(lambda: in_sync(brokers, "lagging", 1, 3), 60, "every replica back in the ISR")
        assert partitions(controller, "lagging")[0].leader_id == 1
        # the acks=1 records stay: node 1 kept leading, and its followers copied them
        final = latest(leader, "lagging", 0)
        assert final == (ErrorCode.NONE, 105) and all(offset <= 105 for _, offset, _ in seen), final
    finally:
        proxy.close()
