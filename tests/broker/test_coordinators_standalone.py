"""The transaction coordinator, the log cleaner and a leader's ISR bookkeeping built on their
own: a TopicManager over a temporary directory, no Broker, no server."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from headrace.broker.cluster.partition_state import PartitionState
from headrace.broker.cluster.single_node import SingleNode
from headrace.broker.cluster.znodes import Endpoint
from headrace.broker.config.config import BrokerConfig
from headrace.broker.coordinator.group import group_offsets
from headrace.broker.coordinator.txn.markers import write_here
from headrace.broker.coordinator.txn.producer_ids import ProducerIdManager
from headrace.broker.log.leader_state import LeaderState
from headrace.broker.log.log_cleaner import LogCleaner
from headrace.broker.log.topics import TopicManager
from headrace.broker.coordinator.txn.transaction_coordinator import TransactionCoordinator
from headrace.broker.coordinator.txn.transaction_log import TRANSACTION_TOPIC
from headrace.broker.coordinator.txn.transaction_state import COMPLETE_COMMIT, EMPTY
from headrace.pipeline import GroupCommit
from headrace.protocol import ErrorCode
from headrace.protocol.records import Record, build_batch

NOW = 1_700_000_000_000
LEADER, MEMBER, JOINER = 7, 8, 9  # (the TopicManager's node is 7)


@asynccontextmanager
async def topic_manager(data_dir, settings: dict[str, str]):
    flush_stage = GroupCommit()
    node = SingleNode(LEADER, data_dir)
    manager = TopicManager(data_dir, BrokerConfig(settings), flush_stage, node)
    manager.load(recover=False)
    await node.start(manager, Endpoint("127.0.0.1", 9092))
    try:
        yield manager
    finally:
        await flush_stage.close()
        manager.close()


@pytest.fixture
async def topics(tmp_path):
    async with topic_manager(tmp_path, {}) as manager:
        yield manager


@pytest.fixture
async def durable_topics(tmp_path):
    """Every append fsynced before it is answered (``log.flush.interval.messages=1``)."""
    data_dir = tmp_path / "durable"
    data_dir.mkdir()
    async with topic_manager(data_dir, {"log.flush.interval.messages": "1"}) as manager:
        yield manager


def coordinator(topics, data_dir) -> TransactionCoordinator:
    return TransactionCoordinator(
        topics, ProducerIdManager(topics.cluster.producer_id_block), groups=None, node_id=7,
        max_timeout_ms=60_000, expiration_ms=3_600_000, check_interval_ms=10_000,
        state_partitions=3, state_segment_bytes=1 << 20, now_ms=lambda: NOW,
    )


async def test_transaction_coordinator_without_a_broker(topics, tmp_path):
    txns = coordinator(topics, tmp_path)
    assert await txns.coordinator_for("tx") == 7
    error, pid, epoch = await txns.init_producer_id("tx", 30_000)
    assert (error, epoch) == (ErrorCode.NONE, 0)
    assert txns.describe("tx").state is EMPTY
    assert len(topics.get(TRANSACTION_TOPIC).partitions) == 3

    await topics.create("t", 1, {})
    assert await txns.add_partitions("tx", pid, 0, {("t", 0)}) == ErrorCode.NONE
    assert await txns.end_txn("tx", pid, 0, commit=True) == (ErrorCode.NONE, -1, -1)
    txn = txns.describe("tx")
    assert (txn.state, txn.update_ms) == (COMPLETE_COMMIT, NOW)
    assert topics.get("t").partitions[0].log.log_end_offset == 1  # the commit marker

    # a second coordinator on the same topics reads the state back
    again = coordinator(topics, tmp_path)
    await again.start()
    try:
        assert again.describe("tx").state is COMPLETE_COMMIT
        assert [t.transactional_id for t in again.transactions()] == ["tx"]
    finally:
        again.stop()


async def test_a_commit_follows_the_flush_settings(topics, durable_topics, tmp_path):
    """The coordinator's records and the markers are as durable as any record under the same
    settings, as in Kafka: by default a commit fsyncs nothing (a crash keeps the page cache,
    a power loss may not); with ``log.flush.interval.messages=1`` the decision and the
    markers are fsynced before EndTxn is answered, and each marker's fsync covers the
    transaction's records before it in that partition's log."""
    for manager, durable in ((topics, False), (durable_topics, True)):
        txns = coordinator(manager, tmp_path)
        _, pid, _ = await txns.init_producer_id("tx", 30_000)
        data = (await manager.create(f"t{int(durable)}", 1, {})).partitions[0]
        assert await txns.add_partitions("tx", pid, 0, {(data.topic.name, 0)}) == ErrorCode.NONE
        batch = bytearray(build_batch([Record(value=b"v", timestamp=NOW)], producer_id=pid,
                                      producer_epoch=0, base_sequence=0, is_transactional=True))
        error, _, _ = data.append(memoryview(batch), 1 << 20, verify=lambda p, e: ErrorCode.NONE)
        assert error == ErrorCode.NONE
        assert await txns.end_txn("tx", pid, 0, commit=True) == (ErrorCode.NONE, -1, -1)
        state = manager.get(TRANSACTION_TOPIC).partitions[group_offsets.partition_for("tx", 3)]
        assert data.log.log_end_offset == 2  # the record and the commit marker
        if durable:
            assert data.log.recovery_point == 2
            assert state.log.recovery_point == state.log.log_end_offset - 1  # all but Complete*
        else:
            assert (data.log.recovery_point, state.log.recovery_point) == (0, 0)


async def test_a_commit_whose_complete_record_was_never_flushed_completes_again(
    durable_topics, tmp_path
):
    """With every append fsynced, EndTxn is answered once the decision and the markers are
    flushed; the CompleteCommit after them is only appended. A power loss that takes it (the
    state log cut back to what was fsynced) leaves the PrepareCommit, and the next
    coordinator finishes the commit again: a second marker, the transaction complete,
    nothing else changed."""
    topics = durable_topics
    txns = coordinator(topics, tmp_path)
    _, pid, _ = await txns.init_producer_id("tx", 30_000)
    await topics.create("t", 1, {})
    assert await txns.add_partitions("tx", pid, 0, {("t", 0)}) == ErrorCode.NONE
    assert await txns.end_txn("tx", pid, 0, commit=True) == (ErrorCode.NONE, -1, -1)
    log = topics.get(TRANSACTION_TOPIC).partitions[group_offsets.partition_for("tx", 3)].log
    assert log.recovery_point == log.log_end_offset - 1  # the CompleteCommit: not flushed
    log.truncate_to(log.recovery_point)  # what a power loss would leave
    data = topics.get("t").partitions[0].log
    assert data.log_end_offset == 1  # the commit marker

    again = coordinator(topics, tmp_path)
    await again.start()
    try:
        assert again.describe("tx").state is COMPLETE_COMMIT
        assert data.log_end_offset == 2  # the marker written again
        assert log.log_end_offset == log.recovery_point + 1  # the completion, once more
    finally:
        again.stop()


async def test_a_marker_for_a_partition_held_but_not_led_yet_is_not_taken_as_deleted(topics):
    """A broker can learn that it leads a partition (the partition's state) a moment before
    it serves it as the leader. A marker that arrives then gets NOT_LEADER_OR_FOLLOWER, which
    the coordinator tries again; UNKNOWN_TOPIC_OR_PARTITION, which it takes as a deleted
    partition and never tries again, lost a committed transaction's marker in a rolling
    restart (its record then read as aborted)."""
    data = (await topics.create("t", 1, {})).partitions[0]
    data.leader = False  # held here, not led yet
    keys = [("t", 0), ("gone", 0)]
    codes = await write_here(topics, None, 5, 0, True, 0, keys, lambda topic, index: True)
    assert codes == {("t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER,
                     ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert data.log.log_end_offset == 0
    data.leader = True
    codes = await write_here(topics, None, 5, 0, True, 0, keys[:1], lambda topic, index: True)
    assert codes == {("t", 0): ErrorCode.NONE} and data.log.log_end_offset == 1


async def test_log_cleaner_without_a_broker(topics):
    cleaner = LogCleaner(topics, retention_check_ms=60_000, backoff_ms=60_000,
                         compaction=True, dedupe_buffer_bytes=1 << 20, now_ms=lambda: NOW)
    topic = await topics.create("old", 1, {"retention.ms": 1000})
    partition = topic.partitions[0]
    batch = bytearray(build_batch([Record(value=b"v", timestamp=NOW - 10_000)]))
    error, _, _ = partition.append(memoryview(batch), len(batch))
    assert error == ErrorCode.NONE
    await topics.flush([partition])

    await cleaner.run_once(retention=True, compaction=False)
    try:
        assert cleaner.passes == 1
        assert partition.log.log_start_offset == 1  # the expired segment is gone
    finally:
        await cleaner.stop()


def append_records(partition, records: int) -> None:
    batch = bytearray(build_batch([Record(value=b"v") for _ in range(records)]))
    error, _, _ = partition.append(memoryview(batch), len(batch))
    assert error == ErrorCode.NONE


async def test_the_high_watermark_waits_for_a_follower_whose_joining_is_being_written(topics):
    """A follower joins the ISR once its log end reaches the HW, and the new ISR is written to
    ZooKeeper, which takes a while. Had the HW gone past the joiner's log end meanwhile, the
    joiner would enter the ISR without records already acknowledged, and a move that then made
    it the leader would lose them (a CI run saw an idempotent producer get
    OUT_OF_ORDER_SEQUENCE_NUMBER from a joining broker that had just become leader). The
    ISR's ZooKeeper write is held open here to see what happens while it is in flight."""
    partition = (await topics.create("t", 1, {})).partitions[0]
    append_records(partition, 10)
    in_flight, written = asyncio.Event(), asyncio.Event()

    async def write_isr(state: PartitionState, version: int) -> PartitionState:
        in_flight.set()
        await written.wait()
        return replace(state, version=version + 1)

    async def reread() -> None:
        pass

    state = PartitionState(leader=LEADER, leader_epoch=0, isr=(LEADER, MEMBER), version=0)
    leader = LeaderState(partition, LEADER, state, [LEADER, MEMBER, JOINER], 30.0, write_isr, reread)
    try:
        assert leader.follower_fetched(MEMBER, 0, 10) == ErrorCode.NONE
        assert partition.high_watermark == 10
        append_records(partition, 10)
        leader.follower_fetched(JOINER, 0, 10)  # at the HW: its joining is written
        await asyncio.wait_for(in_flight.wait(), 5)
        assert not leader.solo

        leader.follower_fetched(MEMBER, 0, 20)  # the ISR's member has everything
        assert partition.high_watermark == 10  # not past the joiner's log end
        ack = leader.wait(20)
        assert not ack.done()

        leader.follower_fetched(JOINER, 0, 20)
        assert partition.high_watermark == 20
        assert ack.result() == ErrorCode.NONE

        written.set()
        for _ in range(100):
            if leader.isr == (LEADER, MEMBER, JOINER):
                break
            await asyncio.sleep(0.01)
        assert leader.isr == (LEADER, MEMBER, JOINER)
        assert partition.high_watermark == 20
    finally:
        written.set()
        leader.stop()
