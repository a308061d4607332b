"""Three Headrace brokers and one ZooKeeper (real processes on 127.0.0.1, real clients):
placement, routing, coordinators on different brokers, restarts, deletions, bad starts."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafkawire import WireClient

from headrace.broker.cluster.placement import BrokerInfo, assign_replicas, rebalance
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

SESSION_MS = 4000


@pytest.fixture
def cluster(tmp_path, zk_connect):
    """Start brokers of the cluster: ``cluster(3)`` starts nodes 1-3 (one more per call:
    ``cluster(1)`` again starts node 4); all are killed at the end."""
    brokers: list[BrokerProcess] = []

    def start(count: int, **overrides) -> list[BrokerProcess]:
        made = []
        for _ in range(count):
            node = len(brokers) + 1
            b = BrokerProcess(
                tmp_path / f"node{node}",
                {
                    "zookeeper.connect": zk_connect,
                    "node.id": node,
                    "zookeeper.session.timeout.ms": SESSION_MS,
                    **overrides,
                },
                args=["--workers", "1"],  # the default in cluster mode is one per core
            )
            brokers.append(b)
            made.append(b.start())
        return made

    yield start
    for b in brokers:
        b.kill()


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def create(brokers, name: str, partitions: int, **kw) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    futures = admin.create_topics([NewTopic(name, partitions, **kw)], operation_timeout=10)
    futures[name].result(timeout=30)
    for b in brokers:  # the other brokers follow through their watches, a moment later
        wait_for(lambda b=b: len(leaders(b, name)) == partitions, 10, f"{name} on every broker")


def wait_for(check, timeout: float = 20, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def metadata(broker, topics=None) -> messages.MetadataResponse:
    with WireClient(broker.port) as c:
        topics_ = None if topics is None else [messages.MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return c.request(ApiKey.METADATA, 12, messages.MetadataRequest(topics=topics_, allow_auto_topic_creation=False))


def leaders(broker, topic: str) -> dict[int, int]:
    md = metadata(broker, [topic])
    return {p.partition_index: p.leader_id for p in md.topics[0].partitions}


def test_topics_are_placed_by_rendezvous_hashing_and_each_broker_holds_its_own(cluster):
    brokers = cluster(3)
    create(brokers, "spread", 30)
    expected = assign_replicas([("spread", i) for i in range(30)], {n: BrokerInfo() for n in (1, 2, 3)}, 1)
    for b in brokers:  # every broker tells the same story, once its watch has fired
        wait_for(lambda b=b: len(leaders(b, "spread")) == 30, 10, "the topic everywhere")
        md = metadata(b, ["spread"])
        assert sorted(x.node_id for x in md.brokers) == [1, 2, 3]
        assert md.controller_id in (1, 2, 3)
        assert {p.partition_index: p.replica_nodes for p in md.topics[0].partitions} == {
            i: expected[("spread", i)] for i in range(30)
        }
    counts = {n: sum(1 for r in expected.values() if r == [n]) for n in (1, 2, 3)}
    assert sorted(counts.values()) == [10, 10, 10], counts  # 30 partitions over 3: even
    for node, b in enumerate(brokers, 1):
        held = sorted(int(d.name.rsplit("-", 1)[1]) for d in b.data_dir.glob("spread-*"))
        assert held == sorted(i for i in range(30) if expected[("spread", i)] == [node])


def test_clients_produce_and_consume_through_the_cluster(cluster):
    brokers = cluster(3)
    create(brokers, "orders", 9)
    producer = Producer({"bootstrap.servers": bootstrap(brokers[:1]), "enable.idempotence": True, "linger.ms": 5})
    sent = {}
    for i in range(3000):
        key = f"k{i % 97}".encode()
        producer.produce("orders", key=key, value=str(i).encode())
        sent.setdefault(key, []).append(str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers[2:]),
            "group.id": "readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    got: dict[bytes, list[bytes]] = {}
    deadline = time.monotonic() + 60
    n = 0
    while n < 3000 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error():
            continue
        got.setdefault(m.key(), []).append(m.value())
        n += 1
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("orders", p) for p in range(9)], timeout=10)
    consumer.close()
    assert got == sent  # every record, in order per key
    assert sum(tp.offset for tp in committed) == 3000
    # the group's coordinator is the leader of its partition of __consumer_offsets
    md = metadata(brokers[0], ["__consumer_offsets"])
    assert len({p.leader_id for p in md.topics[0].partitions}) == 3  # spread over the brokers


def test_a_broker_behind_an_election_answers_unknown_leader_epoch(cluster):
    """A Fetch or OffsetForLeaderEpoch naming a newer leader epoch than a broker has seen, at a
    broker that does not lead the partition (as a follower asking its new leader before that
    leader has heard of its election), gets UNKNOWN_LEADER_EPOCH, retried at once, as Kafka
    answers; with the epoch it knows, NOT_LEADER_OR_FOLLOWER."""
    brokers = cluster(3)
    create(brokers, "epochs", 1)
    leader = leaders(brokers[0], "epochs")[0]
    other = next(b for n, b in enumerate(brokers, 1) if n != leader)
    F, O = messages.FetchRequest, messages.OffsetForLeaderEpochRequest

    def codes(epoch: int) -> tuple[int, int]:
        fetch = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[F.FetchTopic(
            topic="epochs", partitions=[F.FetchPartition(partition=0, current_leader_epoch=epoch,
                                                         fetch_offset=0, partition_max_bytes=1024)])])
        ofle = O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic="epochs", partitions=[
            O.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch, leader_epoch=0)])])
        with WireClient(other.port) as c:
            f = c.request(ApiKey.FETCH, 12, fetch).responses[0].partitions[0].error_code
            o = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, ofle).topics[0].partitions[0].error_code
        return f, o

    E = ErrorCode
    assert codes(0) == (E.NOT_LEADER_OR_FOLLOWER, E.NOT_LEADER_OR_FOLLOWER)
    assert codes(1) == (E.UNKNOWN_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH)


def test_a_request_at_the_wrong_broker_gets_not_leader_or_follower_and_a_leader_hint(cluster):
    brokers = cluster(3)
    create(brokers, "routed", 6)
    placed = leaders(brokers[0], "routed")
    index, leader = next((i, n) for i, n in placed.items())
    wrong = next(b for n, b in enumerate(brokers, 1) if n != leader)
    right = brokers[leader - 1]
    batch = build_batch([Record(key=None, value=b"x")])
    request = messages.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name="routed",
                partition_data=[messages.ProduceRequest.PartitionProduceData(index=index, records=batch)],
            )
        ],
    )
    codes = {}
    for b in (wrong, right):
        with WireClient(b.port) as c:
            r = c.request(ApiKey.PRODUCE, 9, request)
        codes[b] = r.responses[0].partition_responses[0].error_code
    assert codes == {wrong: ErrorCode.NOT_LEADER_OR_FOLLOWER, right: ErrorCode.NONE}
    # KIP-951: from Produce v10 and Fetch v12/v16 the answer names the leader and its address
    fetch = messages.FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[
            messages.FetchRequest.FetchTopic(
                topic_id=metadata(wrong, ["routed"]).topics[0].topic_id,
                partitions=[messages.FetchRequest.FetchPartition(partition=index, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
    )
    with WireClient(wrong.port) as c:
        old = c.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0]
        new = c.request(ApiKey.PRODUCE, 10, request)
        fetched = c.request(ApiKey.FETCH, 16, fetch)
    assert old.current_leader.leader_id == -1
    hinted = new.responses[0].partition_responses[0]
    assert (hinted.error_code, hinted.current_leader.leader_id, hinted.current_leader.leader_epoch) == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        leader,
        0,
    )
    assert [(e.node_id, e.host, e.port) for e in new.node_endpoints] == [(leader, "127.0.0.1", right.port)]
    part = fetched.responses[0].partitions[0]
    assert (part.error_code, part.current_leader.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, leader)
    assert [(e.node_id, e.port) for e in fetched.node_endpoints] == [(leader, right.port)]
    with WireClient(wrong.port) as c:  # and a group it does not coordinate
        found = c.request(ApiKey.FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key="g1", key_type=0))
        node = found.node_id
        other = next(b for n, b in enumerate(brokers, 1) if n != node)
    with WireClient(other.port) as c:
        r = c.request(
            ApiKey.HEARTBEAT, 4, messages.HeartbeatRequest(group_id="g1", generation_id=1, member_id="m")
        )
    assert r.error_code == ErrorCode.NOT_COORDINATOR


def test_a_restarted_broker_serves_its_partitions_again(cluster):
    brokers = cluster(3)
    create(brokers, "durable", 6)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(600):
        producer.produce("durable", value=str(i).encode(), partition=i % 6)
    assert producer.flush(30) == 0
    victim = brokers[1]
    mine = [i for i, n in leaders(brokers[0], "durable").items() if n == 2]
    victim.kill()  # its session ends only after the timeout: the restart waits for that
    wait_for(lambda: all(leaders(brokers[0], "durable")[i] == -1 for i in mine), 15, "leaderless")
    victim.start()
    wait_for(lambda: all(leaders(brokers[0], "durable")[i] == 2 for i in mine), 15, "leader back")
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("durable", i, 0) for i in range(6)])
    values = set()
    deadline = time.monotonic() + 30
    while len(values) < 600 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.add(int(m.value()))
    consumer.close()
    assert values == set(range(600))


def test_deleting_a_topic_removes_it_from_every_broker_and_growing_it_places_new_partitions(cluster):
    brokers = cluster(3)
    create(brokers, "doomed", 6)
    create(brokers, "growing", 3)
    first = leaders(brokers[0], "growing")
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_partitions([NewPartitions("growing", 12)])["growing"].result(timeout=30)
    for b in brokers:
        wait_for(lambda b=b: len(leaders(b, "growing")) == 12, 10, "12 partitions everywhere")
    current = {("growing", i): [first[i]] if i < 3 else [] for i in range(12)}
    placed = rebalance(current, {n: BrokerInfo() for n in (1, 2, 3)}, 1)
    now = leaders(brokers[0], "growing")
    assert {i: now[i] for i in range(3)} == first  # the partitions there were stay
    assert {i: [n] for i, n in now.items() if i >= 3} == {i: placed[("growing", i)] for i in range(3, 12)}
    assert sorted(Counter(now.values()).values()) == [4, 4, 4]  # beside them, evenly
    dirs = sum(len(list(b.data_dir.glob("growing-*"))) for b in brokers)
    assert dirs == 12
    admin.delete_topics(["doomed"])["doomed"].result(timeout=30)
    for b in brokers:
        wait_for(lambda b=b: not list(b.data_dir.glob("doomed-*")), 10, "directories removed")
        md = metadata(b, ["doomed"])
        assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_explicit_assignments_and_bad_ones(cluster):
    brokers = cluster(3)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    fs = admin.create_topics([NewTopic("manual", 3, replica_assignment=[[3], [3], [1]])])
    fs["manual"].result(timeout=30)
    assert leaders(brokers[0], "manual") == {0: 3, 1: 3, 2: 1}
    fs = admin.create_topics([NewTopic("nowhere", 1, replica_assignment=[[7]])])
    with pytest.raises(Exception) as e:
        fs["nowhere"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "Broker 7 is not a live broker" in e.value.args[0].str()


def test_producer_ids_are_unique_across_brokers(cluster):
    brokers = cluster(3)
    seen = set()
    for b in brokers:
        for _ in range(3):
            with WireClient(b.port) as c:
                r = c.request(ApiKey.INIT_PRODUCER_ID, 4, messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1))
            assert r.error_code == ErrorCode.NONE
            seen.add(r.producer_id)
    assert len(seen) == 9


def test_a_broker_id_already_registered_is_refused(cluster, tmp_path, zk_connect):
    cluster(1)
    twin = BrokerProcess(
        tmp_path / "twin", {"zookeeper.connect": zk_connect, "node.id": 1, "zookeeper.session.timeout.ms": 2000},
        args=["--workers", "1"],
    )
    with pytest.raises(RuntimeError) as e:
        twin.start(timeout=20)
    assert "broker id 1 is already registered" in str(e.value)
    assert twin.proc is None or twin.proc.poll() == 3


def test_an_unreachable_zookeeper_is_a_clear_start_up_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
         "--override", f"zookeeper.connect=127.0.0.1:{port}", "--override", "zookeeper.connection.timeout.ms=2000", "--workers", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 3
    assert f"cannot reach ZooKeeper at 127.0.0.1:{port} within 2 s" in done.stderr


def test_workers_run_one_broker_per_core_in_one_cluster(tmp_path, zk_connect):
    parent = BrokerProcess(
        tmp_path / "data",
        {"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": SESSION_MS},
        args=["--workers", "2"],
    )
    parent.start()
    try:
        assert len(parent.ports) == 2
        with WireClient(parent.ports[1]) as c:
            md = c.request(ApiKey.METADATA, 12, messages.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert sorted((b.node_id, b.port) for b in md.brokers) == [(1, parent.ports[0]), (2, parent.ports[1])]
        servers = ",".join(f"127.0.0.1:{p}" for p in parent.ports)
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic("w", 8)])["w"].result(timeout=30)
        producer = Producer({"bootstrap.servers": servers})
        for i in range(800):
            producer.produce("w", value=b"%d" % i, partition=i % 8)
        assert producer.flush(30) == 0
        assert sorted(d.name for d in (tmp_path / "data").iterdir()) == ["node-1", "node-2"]
        held = [len(list((tmp_path / "data" / n).glob("w-*"))) for n in ("node-1", "node-2")]
        assert sum(held) == 8 and min(held) >= 3
    finally:
        assert parent.stop() == 0  # both workers stopped cleanly
    for n in ("node-1", "node-2"):
        assert (tmp_path / "data" / n / ".clean_shutdown").exists()


def test_transactions_span_brokers(cluster):
    """A transactional copy from one topic to another, offsets sent to the transaction: the
    coordinators and the partitions are on different brokers."""
    brokers = cluster(3)
    create(brokers, "in", 6)
    create(brokers, "out", 6)
    servers = bootstrap(brokers)
    producer = Producer({"bootstrap.servers": servers})
    for i in range(300):
        producer.produce("in", value=b"%d" % i, partition=i % 6)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "copier", "auto.offset.reset": "earliest",
         "enable.auto.commit": False, "isolation.level": "read_committed"}
    )
    consumer.subscribe(["in"])
    txn = Producer({"bootstrap.servers": servers, "transactional.id": "copy-1"})
    txn.init_transactions(30)
    copied = 0
    aborted_once = False
    deadline = time.monotonic() + 90
    while copied < 300 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(100, 1.0) if not m.error()]
        if not batch:
            continue
        txn.begin_transaction()
        for m in batch:
            txn.produce("out", value=m.value(), partition=m.partition())
        txn.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        if not aborted_once:  # the first transaction is aborted: its records never show
            txn.abort_transaction(30)
            aborted_once = True
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            continue
        txn.commit_transaction(30)
        copied += len(batch)
    consumer.close()
    assert copied == 300
    reader = Consumer(
        {"bootstrap.servers": servers, "group.id": "check", "auto.offset.reset": "earliest",
         "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    reader.assign([TopicPartition("out", p, 0) for p in range(6)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 300 and time.monotonic() < deadline:
        m = reader.poll(0.5)
        if m is not None and not m.error():
            values.append(int(m.value()))
    reader.close()
    assert sorted(values) == list(range(300))  # each once: the aborted copy never appears
    check = Consumer({"bootstrap.servers": servers, "group.id": "copier"})
    committed = check.committed([TopicPartition("in", p) for p in range(6)], timeout=10)
    check.close()
    assert sum(tp.offset for tp in committed) == 300
    md = metadata(brokers[0], ["__transaction_state", "__consumer_offsets", "out"])
    assert all(len({p.leader_id for p in t.partitions}) > 1 for t in md.topics)


def test_a_topic_that_would_put_a_broker_over_its_partition_limit_is_refused(cluster):
    brokers = cluster(3, **{"max.broker.partitions": 12})
    create(brokers, "fits", 24)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    fs = admin.create_topics([NewTopic("too-many", 30)])
    with pytest.raises(Exception) as e:
        fs["too-many"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "max.broker.partitions" in e.value.args[0].str()
    assert leaders(brokers[0], "too-many") == {}  # nothing was written
    assert not any(list(b.data_dir.glob("too-many-*")) for b in brokers)


def test_a_setting_changed_at_one_broker_applies_to_the_next_produce_at_another(cluster):
    """AlterConfigs reaches ZooKeeper through the broker that took it; the leader of a partition
    on another broker follows the change and its very next Produce obeys it."""
    brokers = cluster(2)
    create(brokers, "tuned", 4)
    index = next(i for i, n in leaders(brokers[0], "tuned").items() if n == 2)
    big = build_batch([Record(key=None, value=b"x" * 2000)])

    def produce() -> messages.ProduceResponse.PartitionProduceResponse:
        P = messages.ProduceRequest
        with WireClient(brokers[1].port) as c:
            r = c.request(ApiKey.PRODUCE, 9, P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                P.TopicProduceData(name="tuned", partition_data=[P.PartitionProduceData(index=index, records=big)])]))
        return r.responses[0].partition_responses[0]

    first = produce()
    assert (first.error_code, first.log_append_time_ms) == (ErrorCode.NONE, -1)

    def alter(**configs) -> None:
        A = messages.AlterConfigsRequest
        with WireClient(brokers[0].port) as c:
            r = c.request(ApiKey.ALTER_CONFIGS, 2, A(validate_only=False, resources=[
                A.AlterConfigsResource(resource_type=2, resource_name="tuned", configs=[
                    A.AlterableConfig(name=n, value=v) for n, v in configs.items()])]))
        assert r.responses[0].error_code == ErrorCode.NONE

    alter(**{"message.timestamp.type": "LogAppendTime"})
    appended = wait_for(lambda: (r := produce()).log_append_time_ms > 0 and r, 10, "LogAppendTime at node 2")
    assert appended.error_code == ErrorCode.NONE
    alter(**{"max.message.bytes": "1000"})  # AlterConfigs replaces: CreateTime again, and a bound
    refused = wait_for(lambda: (r := produce()).error_code != ErrorCode.NONE and r, 10, "the bound at node 2")
    assert (refused.error_code, refused.log_append_time_ms) == (ErrorCode.MESSAGE_TOO_LARGE, -1)
    alter()  # back to the defaults: the same batch is taken again
    taken = wait_for(lambda: (r := produce()).error_code == ErrorCode.NONE and r, 10, "defaults at node 2")
    assert taken.base_offset > appended.base_offset
