"""The group coordinator built alone (no broker, no sockets): a TopicManager, the config and a
clock are all it needs. Offset expiry on a controlled clock, the purge of a deleted topic's
offsets, a committed transaction's offsets, each read back by a fresh coordinator that
replays ``__consumer_offsets``."""

from __future__ import annotations

import pytest

from headrace.broker.cluster.single_node import SingleNode
from headrace.broker.cluster.znodes import Endpoint
from headrace.broker.config.config import BrokerConfig
from headrace.broker.coordinator.group.group_coordinator import CommittedOffset, GroupCoordinator
from headrace.broker.log.topics import TopicManager
from headrace.pipeline.flush import GroupCommit

SETTINGS = {"offsets.topic.num.partitions": "2", "offsets.retention.minutes": "1"}


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


CONFIG = BrokerConfig(SETTINGS)


@pytest.fixture
async def topics(tmp_path):
    flush_stage = GroupCommit()
    node = SingleNode(1, tmp_path)
    manager = TopicManager(tmp_path, CONFIG, flush_stage, node)
    await node.start(manager, Endpoint("127.0.0.1", 9092))
    yield manager
    await flush_stage.close()
    manager.close()


async def coordinator(topics, clock) -> GroupCoordinator:
    """A coordinator over ``topics``, started (so it replays ``__consumer_offsets``)."""
    groups = GroupCoordinator(1, topics, CONFIG, now_ms=clock)
    await groups.start()
    return groups


def offset(n: int, at: int) -> CommittedOffset:
    return CommittedOffset(n, -1, "", at)


async def commit(groups, group_id, entries, at) -> None:
    error, group = groups.check_commit(group_id, -1, "", None)
    assert error == 0
    assert await groups.write_offsets(group, [(t, p, offset(n, at)) for t, p, n in entries]) == 0


async def test_offsets_expire_on_the_coordinators_clock(topics):
    clock = Clock()
    groups = await coordinator(topics, clock)
    try:
        await topics.create("t", 1, {})
        await commit(groups, "g", [("t", 0, 5)], clock.now)
        assert await groups.expire_offsets() == 0
        clock.now += 60_000
        assert await groups.expire_offsets() == 1
        assert "g" not in groups.groups
        again = await coordinator(topics, clock)
        assert again.fetch_offsets("g") == {} and "g" not in again.groups
        again.stop()
    finally:
        groups.stop()


async def test_a_deleted_topics_offsets_are_purged_and_stay_purged(topics):
    clock = Clock()
    groups = await coordinator(topics, clock)
    try:
        for name in ("t", "u"):
            await topics.create(name, 2, {})
        await commit(groups, "only-t", [("t", 0, 1), ("t", 1, 2)], clock.now)
        await commit(groups, "both", [("t", 0, 3), ("u", 1, 4)], clock.now)
        await topics.delete(topics.get("t"))
        await groups.on_topics_deleted({"t"})
        assert "only-t" not in groups.groups
        assert groups.fetch_offsets("both") == {("u", 1): offset(4, clock.now)}
        # a transaction's offsets for the deleted topic are dropped; a new group id is made
        assert await groups.commit_offsets("txn", {("t", 0): offset(7, clock.now),
                                                   ("u", 0): offset(8, clock.now)}) == 0
        assert groups.fetch_offsets("txn") == {("u", 0): offset(8, clock.now)}
        assert groups.groups["txn"].state == "Empty"
        assert await groups.commit_offsets("none", {("t", 0): offset(9, clock.now)}) == 0
        assert "none" not in groups.groups
        again = await coordinator(topics, clock)
        assert sorted(again.groups) == ["both", "txn"]
        assert again.fetch_offsets("both") == {("u", 1): offset(4, clock.now)}
        again.stop()
    finally:
        groups.stop()
