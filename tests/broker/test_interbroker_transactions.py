"""A transaction whose coordinator and partitions are on different brokers.

Two real brokers in this process (their own data directories, ports and event loop thread),
talked to by raw clients over sockets. Broker 1 coordinates the transactions; broker 2 leads
the data partition and ``__consumer_offsets`` (the cluster's leader table is plugged in as the
``leader_of`` / ``is_coordinator`` callables, and each broker's client gets the other's
address). Broker 1 writes its markers to broker 2 with WriteTxnMarkers; broker 2 checks
transactional produces by the partition's producer epoch only, and its group coordinator holds
the transactional offsets until the marker, also across its own restart.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kafkawire import WireClient
from test_transactions_wire import FAST, add_partitions, end_txn, fetch, init_pid, produce
from test_write_txn_markers import add_offsets, committed, txn_offset_commit, write_markers

from headrace.broker.config.config import BrokerConfig
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.broker.app.server import BrokerServer
from headrace.broker.coordinator.txn.transaction_log import TRANSACTION_TOPIC
from headrace.broker.coordinator.txn.transaction_state import COMPLETE_COMMIT, PREPARE_COMMIT
from headrace.protocol import ErrorCode

E = ErrorCode
COORDINATOR, LEADER = 1, 2


def leader_of(topic: str, partition: int) -> int | None:
    """The cluster's leader table: None for a partition it does not know."""
    if topic in ("t", OFFSETS_TOPIC):
        return LEADER
    return COORDINATOR if topic == TRANSACTION_TOPIC else None


class Cluster:
    """Two brokers on one event loop in a thread; the test talks to them over sockets."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.brokers: dict[int, BrokerServer] = {}
        self.addresses: dict[int, tuple[str, int]] = {}

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, node: int, **settings: str) -> BrokerServer:
        config = BrokerConfig({**FAST, "node.id": str(node), "log.dirs": str(self.tmp_path / f"n{node}"),
                               "listeners": "PLAINTEXT://127.0.0.1:0", **settings})
        broker = BrokerServer(config)
        broker.broker_client.address_of = self.addresses.get
        broker.transactions.leader_of = leader_of
        broker.transactions.is_coordinator = lambda tid, node=node: node == COORDINATOR
        self.run(broker.start())
        self.brokers[node] = broker
        self.addresses[node] = ("127.0.0.1", broker.port)
        return broker

    def stop(self, node: int) -> None:
        self.run(self.brokers.pop(node).stop())

    def close(self) -> None:
        for node in list(self.brokers):
            self.stop(node)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def txn_state(cluster, tid):
    return cluster.brokers[COORDINATOR].transactions.describe(tid).state


def test_markers_reach_the_partitions_leader(cluster):
    coord, leader = cluster.start(COORDINATOR), cluster.start(LEADER)
    for broker in (coord, leader):  # the topic is known everywhere; its data lives on the leader
        cluster.run(broker.topics.create("t", 1, {}))
    with WireClient(coord.port) as c, WireClient(leader.port) as d:
        _, pid, epoch = init_pid(c, "x")
        assert add_partitions(c, "x", pid, epoch, [("t", [0])]) == {("t", 0): 0}
        add_offsets(c, "x", pid, epoch, "g")
        assert produce(d, "t", [b"one", b"two"], pid, epoch, 0, "x", True) == (0, 0)
        assert txn_offset_commit(d, "x", "g", pid, epoch, {("t", 0): 2}) == [0]
        assert fetch(d, "t", 1).last_stable_offset == 0
        assert end_txn(c, "x", pid, epoch, True) == 0
        p = fetch(d, "t", 1)
        assert (p.last_stable_offset, p.high_watermark, p.aborted_transactions) == (3, 3, [])
        assert committed(d, "g") == {("t", 0): 2}
        assert cluster.run(_log_end(coord, "t")) == 0, "nothing written on the coordinator"
        assert committed(c, "g") == {}, "nor the offsets"

        # an abort: the leader indexes it, the offsets never show
        assert add_partitions(c, "x", pid, epoch, [("t", [0])]) == {("t", 0): 0}
        add_offsets(c, "x", pid, epoch, "g")
        assert produce(d, "t", [b"gone"], pid, epoch, 2, "x", True) == (0, 3)
        assert txn_offset_commit(d, "x", "g", pid, epoch, {("t", 0): 99}) == [0]
        assert end_txn(c, "x", pid, epoch, False) == 0
        p = fetch(d, "t", 1)
        assert p.last_stable_offset == 5
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 3)]
        assert committed(d, "g") == {("t", 0): 2}

        # a new epoch; the partition fences the old one on its own
        _, pid2, epoch2 = init_pid(c, "x")
        assert (pid2, epoch2) == (pid, epoch + 1)
        assert add_partitions(c, "x", pid, epoch2, [("t", [0])]) == {("t", 0): 0}
        assert produce(d, "t", [b"new"], pid, epoch2, 0, "x", True)[0] == 0
        assert produce(d, "t", [b"zombie"], pid, epoch, 3, "x", True)[0] == E.INVALID_PRODUCER_EPOCH
        assert end_txn(c, "x", pid, epoch2, True) == 0

        # the coordinator is not the leader of t-0, the leader does not know "nope"
        assert write_markers(c, [(pid, epoch2, True, {"t": [0]})]) == {
            (pid, "t", 0): E.NOT_LEADER_OR_FOLLOWER}
        assert write_markers(d, [(pid, epoch2, True, {"nope": [0]})]) == {
            (pid, "nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_decision_survives_the_leader_being_down_and_completes_when_it_is_back(cluster):
    """The coordinator keeps trying the missing markers (``MARKER_RETRY_S``), so the commit
    completes as soon as the leader is back: not at the timer's next run (10 minutes here;
    Kafka's default is 10 s), which a restarted cluster's commits waited for before."""
    timer = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "600000"}
    coord, leader = cluster.start(COORDINATOR, **timer), cluster.start(LEADER)
    for broker in (coord, leader):
        cluster.run(broker.topics.create("t", 1, {}))
    with WireClient(coord.port) as c:
        with WireClient(leader.port) as d:
            _, pid, epoch = init_pid(c, "y")
            assert add_partitions(c, "y", pid, epoch, [("t", [0])]) == {("t", 0): 0}
            add_offsets(c, "y", pid, epoch, "g")
            assert produce(d, "t", [b"v"], pid, epoch, 0, "y", True) == (0, 0)
            assert txn_offset_commit(d, "y", "g", pid, epoch, {("t", 0): 1}) == [0]
        cluster.stop(LEADER)
        assert end_txn(c, "y", pid, epoch, True) == E.COORDINATOR_NOT_AVAILABLE
        assert txn_state(cluster, "y") is PREPARE_COMMIT  # decided, not complete
        assert end_txn(c, "y", pid, epoch, True) == E.CONCURRENT_TRANSACTIONS

        time.sleep(1)  # (tries meanwhile fail: nothing listens at the leader's address)
        leader = cluster.start(LEADER)  # another port: the client follows the new address
        deadline = time.monotonic() + 5
        while txn_state(cluster, "y") is not COMPLETE_COMMIT:
            assert time.monotonic() < deadline, "the decision was not completed"
            time.sleep(0.1)
        assert end_txn(c, "y", pid, epoch, True) == 0  # a retried commit: done
    with WireClient(leader.port) as d:
        p = fetch(d, "t", 1)
        assert (p.last_stable_offset, p.aborted_transactions) == (2, [])
        assert committed(d, "g") == {("t", 0): 1}, "held offsets were read back at the restart"


async def _log_end(broker, topic):
    return broker.topics.partition(topic, 0).log.log_end_offset
