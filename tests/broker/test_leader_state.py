"""The leader's ISR and high watermark (broker/log/leader_state.py), on a real log, with the
ISR's ZooKeeper write held open so that what happens while it is in flight can be seen."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from headrace.broker.cluster.partition_state import PartitionState
from headrace.broker.cluster.single_node import SingleNode
from headrace.broker.cluster.znodes import Endpoint
from headrace.broker.config.config import BrokerConfig
from headrace.broker.log.leader_state import LeaderState
from headrace.broker.log.topics import TopicManager
from headrace.pipeline import GroupCommit
from headrace.protocol import ErrorCode
from headrace.protocol.records import Record, build_batch

LEADER, MEMBER, JOINER = 7, 8, 9


@asynccontextmanager
async def topic_manager(data_dir):
    flush_stage = GroupCommit()
    node = SingleNode(LEADER, data_dir)
    manager = TopicManager(data_dir, BrokerConfig({}), flush_stage, node)
    manager.load(recover=False)
    await node.start(manager, Endpoint("127.0.0.1", 9092))
    try:
        yield manager
    finally:
        await flush_stage.close()
        manager.close()


@pytest.fixture
async def partition(tmp_path):
    async with topic_manager(tmp_path) as manager:
        yield (await manager.create("t", 1, {})).partitions[0]


def append(partition, records: int) -> None:
    batch = bytearray(build_batch([Record(value=b"v") for _ in range(records)]))
    error, _, _ = partition.append(memoryview(batch), len(batch))
    assert error == ErrorCode.NONE


async def test_the_high_watermark_waits_for_a_follower_whose_joining_is_being_written(partition):
    """A follower joins the ISR once its log end reaches the HW, and the new ISR is written to
    ZooKeeper, which takes a while. Had the HW gone past the joiner's log end meanwhile, the
    joiner would enter the ISR without records already acknowledged, and a move that then made
    it the leader would lose them (a CI run saw an idempotent producer get
    OUT_OF_ORDER_SEQUENCE_NUMBER from a joining broker that had just become leader)."""
    append(partition, 10)
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
        append(partition, 10)
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
