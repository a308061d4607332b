"""The share coordinator (KIP-932) on the wire: InitializeShareGroupState, Read, Write, Delete
and ReadSummary (keys 83-87), FindCoordinator key type 2, fencing by leader and state epoch,
the bounds against a hostile client, the state across a restart and across the loss of the
coordinator's broker in a cluster, and the persister of a broker that is not the coordinator."""

from __future__ import annotations

import asyncio
import threading
import uuid

from kafkawire import WireClient
from test_cluster import cluster, create, wait_for  # noqa: F401

from headrace.broker.app.server import BrokerServer
from headrace.broker.config.config import BrokerConfig
from headrace.broker.coordinator.share.share_state_log import coordinator_key, kafka_uuid
from headrace.broker.coordinator.share.state_batches import StateBatch
from headrace.protocol import ApiKey, ErrorCode, messages

E = ErrorCode
FAST = {"share.coordinator.state.topic.num.partitions": "3"}
IQ = messages.InitializeShareGroupStateRequest
RQ = messages.ReadShareGroupStateRequest
WQ = messages.WriteShareGroupStateRequest
DQ = messages.DeleteShareGroupStateRequest
SQ = messages.ReadShareGroupStateSummaryRequest


# the wire -------------------------------------------------------------------------------------


def topic_id(port: int, name: str, partitions: int = 1) -> uuid.UUID:
    """Make topic ``name`` (CreateTopics) and return its id (Metadata v12)."""
    with WireClient(port) as c:
        c.request(ApiKey.CREATE_TOPICS, 5, messages.CreateTopicsRequest(
            topics=[messages.CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=-1)],
            timeout_ms=10000))
        md = c.request(ApiKey.METADATA, 12, messages.MetadataRequest(
            topics=[messages.MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=False))
    return md.topics[0].topic_id


def _one(response):
    [t] = response.results
    [p] = t.partitions
    return p


def initialize(port, group, tid, partition=0, state_epoch=0, start_offset=0) -> int:
    with WireClient(port) as c:
        r = c.request(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, IQ(group_id=group, topics=[
            IQ.InitializeStateData(topic_id=tid, partitions=[
                IQ.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)])]))
    return _one(r).error_code


def read(port, group, tid, partition=0, leader_epoch=0):
    with WireClient(port) as c:
        r = c.request(ApiKey.READ_SHARE_GROUP_STATE, 0, RQ(group_id=group, topics=[
            RQ.ReadStateData(topic_id=tid, partitions=[
                RQ.PartitionData(partition=partition, leader_epoch=leader_epoch)])]))
    return _one(r)


def state(port, group, tid, partition=0, leader_epoch=0):
    """(state epoch, start offset, batches) as a read answers, asserting no error."""
    p = read(port, group, tid, partition, leader_epoch)
    assert p.error_code == E.NONE, (p.error_code, p.error_message)
    return p.state_epoch, p.start_offset, [
        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


def write(port, group, tid, batches, partition=0, state_epoch=0, leader_epoch=0, start_offset=-1, version=1):
    with WireClient(port) as c:
        r = c.request(ApiKey.WRITE_SHARE_GROUP_STATE, version, WQ(group_id=group, topics=[
            WQ.WriteStateData(topic_id=tid, partitions=[WQ.PartitionData(
                partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                start_offset=start_offset, delivery_complete_count=-1,
                state_batches=[WQ.StateBatch(first_offset=f, last_offset=last, delivery_state=s,
                                             delivery_count=n) for f, last, s, n in batches])])]))
    return _one(r)


def delete(port, group, tid, partition=0) -> int:
    with WireClient(port) as c:
        r = c.request(ApiKey.DELETE_SHARE_GROUP_STATE, 0, DQ(group_id=group, topics=[
            DQ.DeleteStateData(topic_id=tid, partitions=[DQ.PartitionData(partition=partition)])]))
    return _one(r).error_code


def summary(port, group, tid, partition=0):
    with WireClient(port) as c:
        r = c.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, SQ(group_id=group, topics=[
            SQ.ReadStateSummaryData(topic_id=tid, partitions=[SQ.PartitionData(partition=partition, leader_epoch=0)])]))
    return _one(r)


def find_share_coordinator(port, key: str, version: int = 6):
    with WireClient(port) as c:
        r = c.request(ApiKey.FIND_COORDINATOR, version, messages.FindCoordinatorRequest(
            key_type=2, coordinator_keys=[key]))
    [coordinator] = r.coordinators
    return coordinator


# a broker on its own ---------------------------------------------------------------------------


def test_initialize_write_read_round_trip_merges_batches(broker_factory):
    b = broker_factory(FAST)
    tid = topic_id(b.port, "t")
    # nothing yet: a read is INVALID_REQUEST (as Kafka), the summary says -1
    p = read(b.port, "g", tid)
    assert (p.error_code, p.error_message) == (
        E.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
    s = summary(b.port, "g", tid)
    assert (s.error_code, s.start_offset, s.delivery_complete_count) == (E.NONE, -1, -1)
    assert write(b.port, "g", tid, [(0, 1, 2, 1)]).error_code == E.INVALID_REQUEST

    assert initialize(b.port, "g", tid, state_epoch=0, start_offset=0) == E.NONE
    assert state(b.port, "g", tid) == (0, 0, [])
    assert write(b.port, "g", tid, [(0, 9, 0, 1)], start_offset=0).error_code == E.NONE
    # acknowledged beats available at one delivery count; adjacent equal runs join
    assert write(b.port, "g", tid, [(5, 7, 2, 1)], version=0).error_code == E.NONE
    assert state(b.port, "g", tid) == (0, 0, [(0, 4, 0, 1), (5, 7, 2, 1), (8, 9, 0, 1)])
    # a stale batch (lower delivery count) does not take a record back
    assert write(b.port, "g", tid, [(0, 9, 0, 0)]).error_code == E.NONE
    assert state(b.port, "g", tid) == (0, 0, [(0, 4, 0, 1), (5, 7, 2, 1), (8, 9, 0, 1)])
    # the start offset moves forward (only): batches below it go, one across it is cut
    assert write(b.port, "g", tid, [(8, 9, 2, 2)], start_offset=6).error_code == E.NONE
    assert write(b.port, "g", tid, [], start_offset=3).error_code == E.NONE
    assert state(b.port, "g", tid) == (0, 6, [(6, 7, 2, 1), (8, 9, 2, 2)])
    s = summary(b.port, "g", tid)
    assert (s.error_code, s.start_offset, s.state_epoch) == (E.NONE, 6, 0)
    # another group, another partition: apart
    assert read(b.port, "g2", tid).error_code == E.INVALID_REQUEST
    # delete: gone (twice is fine)
    assert delete(b.port, "g", tid) == E.NONE
    assert delete(b.port, "g", tid) == E.NONE
    assert read(b.port, "g", tid).error_code == E.INVALID_REQUEST


def test_older_leader_and_state_epochs_are_fenced(broker_factory):
    b = broker_factory(FAST)
    tid = topic_id(b.port, "t")
    assert initialize(b.port, "g", tid, state_epoch=1, start_offset=0) == E.NONE
    # a new leader (epoch 3) reads: the epoch is recorded, the old leader (2) is fenced
    assert state(b.port, "g", tid, leader_epoch=3) == (1, 0, [])
    assert write(b.port, "g", tid, [(0, 0, 2, 1)], state_epoch=1, leader_epoch=2).error_code == E.FENCED_LEADER_EPOCH
    assert read(b.port, "g", tid, leader_epoch=2).error_code == E.FENCED_LEADER_EPOCH
    assert write(b.port, "g", tid, [(0, 0, 2, 1)], state_epoch=1, leader_epoch=3).error_code == E.NONE
    # an older state epoch: fenced, for writes and initializations
    assert write(b.port, "g", tid, [(1, 1, 2, 1)], state_epoch=0, leader_epoch=3).error_code == E.FENCED_STATE_EPOCH
    assert initialize(b.port, "g", tid, state_epoch=0) == E.FENCED_STATE_EPOCH
    # a newer state epoch starts afresh; the leader epoch seen is kept
    assert initialize(b.port, "g", tid, state_epoch=2, start_offset=10) == E.NONE
    assert state(b.port, "g", tid, leader_epoch=3) == (2, 10, [])
    assert write(b.port, "g", tid, [], state_epoch=2, leader_epoch=2).error_code == E.FENCED_LEADER_EPOCH
    # negative epochs and partitions: INVALID_REQUEST
    assert write(b.port, "g", tid, [], state_epoch=2, leader_epoch=-1).error_code == E.INVALID_REQUEST
    assert initialize(b.port, "g", tid, state_epoch=-1) == E.INVALID_REQUEST
    assert read(b.port, "g", tid, partition=-1).error_code == E.INVALID_REQUEST
    # a topic the cluster does not know, or a partition beyond it
    assert initialize(b.port, "g", uuid.uuid4()) == E.UNKNOWN_TOPIC_OR_PARTITION
    assert initialize(b.port, "g", tid, partition=1) == E.UNKNOWN_TOPIC_OR_PARTITION


def test_find_coordinator_share_keys(broker_factory):
    b = broker_factory(FAST)
    tid = topic_id(b.port, "t")
    key = coordinator_key(("my:group", tid, 0))
    assert key == f"my:group:{kafka_uuid(tid)}:0"
    c = find_share_coordinator(b.port, key)
    assert (c.error_code, c.host, c.port) == (E.NONE, "127.0.0.1", b.port)
    for bad in ("nonsense", f"g:{tid}:0", f":{kafka_uuid(tid)}:0", f"g:{kafka_uuid(tid)}:x"):
        assert find_share_coordinator(b.port, bad).error_code == E.INVALID_REQUEST, bad
    assert find_share_coordinator(b.port, key, version=5).error_code == E.INVALID_REQUEST


def test_state_survives_a_killed_broker_snapshots_and_updates_replayed(broker_factory):
    b = broker_factory({**FAST, "share.coordinator.snapshot.update.records.per.snapshot": "2"})
    tid = topic_id(b.port, "t", 2)
    assert initialize(b.port, "g", tid, partition=1, state_epoch=4, start_offset=0) == E.NONE
    assert state(b.port, "g", tid, partition=1, leader_epoch=1) == (4, 0, [])
    for i in range(5):  # updates and snapshots alternate (a snapshot after every 2 updates)
        assert write(b.port, "g", tid, [(i * 10, i * 10 + 9, 2, 1)], partition=1, state_epoch=4,
                     leader_epoch=1).error_code == E.NONE
    assert write(b.port, "g", tid, [], partition=1, state_epoch=4, leader_epoch=1, start_offset=15).error_code == E.NONE
    before = state(b.port, "g", tid, partition=1, leader_epoch=1)
    assert before == (4, 15, [(15, 49, 2, 1)])
    b.kill()  # acknowledged writes were flushed before the answer: a SIGKILL loses none
    b.start()
    assert state(b.port, "g", tid, partition=1, leader_epoch=1) == before
    assert write(b.port, "g", tid, [], partition=1, state_epoch=4, leader_epoch=0).error_code == E.FENCED_LEADER_EPOCH
    assert write(b.port, "g", tid, [], partition=1, state_epoch=3, leader_epoch=1).error_code == E.FENCED_STATE_EPOCH
    assert delete(b.port, "g", tid, partition=1) == E.NONE
    b.restart()
    assert read(b.port, "g", tid, partition=1).error_code == E.INVALID_REQUEST


def test_a_hostile_client_meets_the_bounds(broker_factory):
    b = broker_factory({**FAST, "share.coordinator.state.max.count": "3",
                        "share.coordinator.state.max.batches": "10"})
    tid = topic_id(b.port, "t", 8)
    for p in range(3):
        assert initialize(b.port, "g", tid, partition=p) == E.NONE
    assert initialize(b.port, "g", tid, partition=3) == E.INVALID_REQUEST  # a 4th key
    assert initialize(b.port, "g", tid, partition=0, state_epoch=1) == E.NONE  # a known one
    assert delete(b.port, "g", tid, partition=2) == E.NONE
    assert initialize(b.port, "g", tid, partition=3) == E.NONE  # room again
    # too many batches in one write, or merged into the state, or a batch ending before it
    # starts: INVALID_REQUEST, nothing changes
    many = [(i * 2, i * 2, 2, 1) for i in range(11)]
    assert write(b.port, "g", tid, many, state_epoch=1).error_code == E.INVALID_REQUEST
    assert write(b.port, "g", tid, many[:10:2] , state_epoch=1).error_code == E.NONE
    assert write(b.port, "g", tid, many[1:11:2] + [(100, 100, 0, 1)], state_epoch=1).error_code == E.INVALID_REQUEST
    assert write(b.port, "g", tid, [(5, 4, 2, 1)], state_epoch=1).error_code == E.INVALID_REQUEST
    assert len(state(b.port, "g", tid)[2]) == 5
    # an empty group id or no partitions: an empty answer, as Kafka gives
    with WireClient(b.port) as c:
        r = c.request(ApiKey.WRITE_SHARE_GROUP_STATE, 1, WQ(group_id="", topics=[]))
        assert r.results == []


# a cluster ------------------------------------------------------------------------------------


def test_state_survives_the_loss_of_the_coordinators_broker(cluster):  # noqa: F811
    brokers = cluster(3, **FAST)
    create(brokers, "t", 1, replication_factor=3)
    tid = topic_id(brokers[0].port, "t")
    key = coordinator_key(("g", tid, 0))
    found = wait_for(lambda: (c := find_share_coordinator(brokers[0].port, key)).error_code == E.NONE and c,
                     30, "a share coordinator")
    by_id = {i + 1: b for i, b in enumerate(brokers)}
    coordinator = by_id[found.node_id]
    wait_for(lambda: initialize(coordinator.port, "g", tid, state_epoch=1, start_offset=0) == E.NONE,
             30, "the state topic's ISR")
    assert state(coordinator.port, "g", tid, leader_epoch=2) == (1, 0, [])
    assert write(coordinator.port, "g", tid, [(0, 4, 2, 1), (5, 9, 0, 1)], state_epoch=1,
                 leader_epoch=2).error_code == E.NONE
    assert write(coordinator.port, "g", tid, [(5, 6, 4, 5)], state_epoch=1, leader_epoch=2).error_code == E.NONE
    expected = (1, 0, [(0, 4, 2, 1), (5, 6, 4, 5), (7, 9, 0, 1)])
    coordinator.kill()
    survivor = next(b for b in brokers if b is not coordinator)

    def new_coordinator():
        c = find_share_coordinator(survivor.port, key)
        return c.error_code == E.NONE and c.node_id != found.node_id and by_id[c.node_id]

    successor = wait_for(new_coordinator, 60, "a new share coordinator")
    answer = wait_for(lambda: (p := read(successor.port, "g", tid, leader_epoch=2)).error_code == E.NONE and p,
                      30, "the state loaded")
    assert (answer.state_epoch, answer.start_offset) == expected[:2]
    assert state(successor.port, "g", tid, leader_epoch=2) == expected
    assert write(successor.port, "g", tid, [], state_epoch=1, leader_epoch=1).error_code == E.FENCED_LEADER_EPOCH


class InProcessBroker:
    """A cluster broker in this process (its own event loop thread), so the test can call its
    persister as a partition leader would."""

    def __init__(self, tmp_path, zk_connect: str, node: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = BrokerConfig({**FAST, "zookeeper.connect": zk_connect, "node.id": str(node),
                               "zookeeper.session.timeout.ms": "4000",
                               "log.dirs": str(tmp_path / f"inprocess{node}"),
                               "listeners": "PLAINTEXT://127.0.0.1:0"})
        self.server = BrokerServer(config)
        self.run(self.server.start())

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def test_the_persister_of_a_broker_that_is_not_the_coordinator(cluster, zk_connect, tmp_path):  # noqa: F811
    brokers = cluster(2, **FAST)
    here = InProcessBroker(tmp_path, zk_connect, 3)
    try:
        create(brokers, "t", 4, replication_factor=3)
        tid = topic_id(brokers[0].port, "t")
        persister, coordinator = here.server.share_state, here.server.share_coordinator
        # the state topic, then a key coordinated elsewhere and one coordinated here
        wait_for(lambda: find_share_coordinator(brokers[0].port, coordinator_key(("g", tid, 0))).error_code == E.NONE,
                 30, "the state topic")
        by_node: dict[int, tuple] = {}
        for p in range(4):
            for group in ("a", "b", "c", "d", "e", "f", "g", "h"):
                node = here.run(coordinator.coordinator_for((group, tid, p)))
                by_node.setdefault(node, (group, p))
        assert 3 in by_node and len(by_node) > 1, by_node
        for node, (group, p) in by_node.items():
            result = here.run(persister.read(group, tid, p, 0))
            assert (result.error, result.initialized, result.start_offset) == (E.NONE, False, -1)
            assert here.run(persister.initialize(group, tid, p, 1, 100)) == E.NONE
            result = here.run(persister.read(group, tid, p, 5))
            assert (result.error, result.initialized, result.state_epoch, result.start_offset) == (E.NONE, True, 1, 100)
            assert here.run(persister.write(group, tid, p, 1, 5, 102, [(100, 104, 2, 1), (105, 109, 0, 2)])) == E.NONE
            assert here.run(persister.write(group, tid, p, 1, 4, -1, [])) == E.FENCED_LEADER_EPOCH
            assert here.run(persister.write(group, tid, p, 0, 5, -1, [])) == E.FENCED_STATE_EPOCH
            result = here.run(persister.read(group, tid, p, 5))
            assert result.batches == [StateBatch(102, 104, 2, 1), StateBatch(105, 109, 0, 2)]
            # the coordinator answers the same on the wire
            port = here.server.port if node == 3 else brokers[node - 1].port
            assert state(port, group, tid, p, leader_epoch=5) == (1, 102, [(102, 104, 2, 1), (105, 109, 0, 2)])
            summary_answer = here.run(persister.read_summary(group, tid, p))
            assert (summary_answer.error, summary_answer.start_offset, summary_answer.leader_epoch) == (E.NONE, 102, 5)
            assert here.run(persister.delete(group, [(tid, [p])])) == E.NONE
            assert here.run(persister.read(group, tid, p, 5)).initialized is False
    finally:
        here.close()


def log_start(port: int, partition: int) -> int:
    """The log start offset of a partition of ``__share_group_state`` (ListOffsets earliest)."""
    L = messages.ListOffsetsRequest
    with WireClient(port) as c:
        r = c.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=0, topics=[
            L.ListOffsetsTopic(name="__share_group_state", partitions=[
                L.ListOffsetsPartition(partition_index=partition, timestamp=-2)])]))
    return r.topics[0].partitions[0].offset


def test_records_no_state_needs_are_pruned_and_the_state_kept(broker_factory):
    """The topic is not compacted: records before the oldest snapshot a live key needs go."""
    b = broker_factory({"share.coordinator.state.topic.num.partitions": "1",
                        "share.coordinator.snapshot.update.records.per.snapshot": "1",
                        "share.coordinator.state.topic.prune.interval.ms": "100"})
    tid = topic_id(b.port, "t")
    assert initialize(b.port, "g", tid) == E.NONE
    for i in range(6):  # update, snapshot, update, snapshot...
        assert write(b.port, "g", tid, [(i, i, 2, 1)]).error_code == E.NONE
    expected = state(b.port, "g", tid)
    assert expected == (0, 0, [(0, 5, 2, 1)])
    wait_for(lambda: log_start(b.port, 0) == 6, 10, "records below the last snapshot (offset 6) pruned")
    b.kill()
    b.start()
    assert state(b.port, "g", tid) == expected
    assert delete(b.port, "g", tid) == E.NONE  # no live key: everything goes
    wait_for(lambda: log_start(b.port, 0) == 8, 10, "every record pruned (the tombstone is 7)")


def test_only_brokers_may_ask_cluster_action(broker_factory):
    """With an authorizer, a client without CLUSTER_ACTION on the cluster is refused every
    share-state API and share FindCoordinator keys, as in Kafka."""
    b = broker_factory({**FAST, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    tid = uuid.uuid4()
    denied = E.CLUSTER_AUTHORIZATION_FAILED
    assert initialize(b.port, "g", tid) == denied
    assert read(b.port, "g", tid).error_code == denied
    assert write(b.port, "g", tid, [(0, 0, 2, 1)]).error_code == denied
    assert delete(b.port, "g", tid) == denied
    assert summary(b.port, "g", tid).error_code == denied
    assert find_share_coordinator(b.port, coordinator_key(("g", tid, 0))).error_code == denied
