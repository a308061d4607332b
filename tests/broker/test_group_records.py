"""Consumer, share and streams groups' records in ``__consumer_offsets``, with the group
coordinator built alone (as in test_group_coordinator): Kafka's byte layouts, what a change
writes, a fresh coordinator replaying them, and the bound on what a hostile client leaves.
"""

from __future__ import annotations

import struct
import uuid

from headrace.broker.config.config import BrokerConfig
from headrace.broker.coordinator.group import modern_records as r
from headrace.broker.coordinator.group.group_coordinator import GroupCoordinator
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.protocol import messages

from test_group_coordinator import Clock, topics  # noqa: F401

H = messages.ConsumerGroupHeartbeatRequest
MAX_GROUPS = 10
CONFIG = BrokerConfig({"offsets.topic.num.partitions": "2", "group.max.groups": str(MAX_GROUPS),
                       "group.consumer.max.size": "5"})


async def coordinator(topics) -> GroupCoordinator:  # noqa: F811
    groups = GroupCoordinator(1, topics, CONFIG, now_ms=Clock())
    await groups.start()
    await groups.offsets.topic()
    return groups


async def heartbeat(groups, group_id, member_id, epoch, topics_=None, owned=None) -> tuple:
    request = H(group_id=group_id, member_id=member_id, member_epoch=epoch,
                rebalance_timeout_ms=30_000, subscribed_topic_names=topics_,
                topic_partitions=owned)
    answer = groups.consumer.heartbeat(request, "client")
    assert await groups.consumer.persisted(group_id, answer[2]) == 0
    return answer


def test_keys_and_values_are_kafkas_layout():
    key = r.key(r.CONSUMER_METADATA, "g")
    assert key == b"\x00\x03" + b"\x00\x01g"  # record type 3, then the group id (int16 string)
    member_key = r.key(r.CONSUMER_CURRENT, "g", "m")
    assert member_key == b"\x00\x08\x00\x01g\x00\x01m"
    value = r.value(messages.ConsumerGroupMetadataValue(epoch=7, metadata_hash=0))
    assert value == b"\x00\x00" + struct.pack(">i", 7) + b"\x00"  # version 0, no tagged fields
    tagged = r.value(messages.ConsumerGroupMetadataValue(epoch=7, metadata_hash=5))
    assert tagged == b"\x00\x00" + struct.pack(">i", 7) + b"\x01\x00\x08" + struct.pack(">q", 5)
    assert r.parse_key(member_key) == (r.CONSUMER_CURRENT, "g", "m")
    assert r.parse_value(r.CONSUMER_METADATA, tagged).metadata_hash == 5


def log_records(topics) -> list[tuple[bytes, bytes | None]]:  # noqa: F811
    from headrace.broker.log.replay import stored_records

    t = topics.get(OFFSETS_TOPIC)
    return [(bytes(k), v and bytes(v)) for p in t.partitions for k, v in stored_records(p.log)
            if k is not None and struct.unpack_from(">h", k)[0] in r.MODERN_TYPES]


async def test_a_steady_member_writes_nothing_and_a_fresh_coordinator_loads_the_group(topics):  # noqa: F811
    groups = await coordinator(topics)
    try:
        await topics.create("t", 2, {})
        tid = topics.get("t").topic_id
        a = await heartbeat(groups, "g", "a", 0, ["t"])
        assert a[0] == 0 and a[4] == {(tid, 0), (tid, 1)}
        written = len(log_records(topics))
        assert written == 5  # group metadata, target metadata; member, target, current
        owned = [H.TopicPartitions(topic_id=tid, partitions=[0, 1])]
        await heartbeat(groups, "g", "a", a[3], owned=owned)
        await heartbeat(groups, "g", "a", a[3], owned=owned)
        assert len(log_records(topics)) == written  # nothing changed: nothing written
    finally:
        groups.stop()
    again = await coordinator(topics)
    try:
        group = again.consumer.groups["g"]
        member = group.members["a"]
        assert (member.epoch, member.assigned, group.target["a"]) == (
            a[3], {(tid, 0), (tid, 1)}, {(tid, 0), (tid, 1)})
        assert member.timer is not None  # a fresh session
        b = await heartbeat(again, "g", "a", a[3], owned=owned)
        assert b[0] == 0 and b[3] == a[3]  # same epoch: no rebalance
    finally:
        again.stop()


async def test_joining_and_leaving_rapidly_leaves_nothing_behind(topics):  # noqa: F811
    """A hostile client joins and leaves over and over, in one group and under made-up group
    ids: the groups, their stored records and the writes in flight stay bounded, and what a
    fresh coordinator loads is only what is left."""
    groups = await coordinator(topics)
    try:
        await topics.create("t", 2, {})
        await heartbeat(groups, "kept", "stays", 0, ["t"])
        for i in range(200):
            member = f"m{i}"
            assert (await heartbeat(groups, "kept", member, 0, ["t"]))[0] == 0
            assert (await heartbeat(groups, "kept", member, -1))[0] == 0
            made_up = f"hostile-{uuid.uuid4()}"
            answer = await heartbeat(groups, made_up, member, 0, ["t"])
            if answer[0] == 0:
                assert (await heartbeat(groups, made_up, member, -1))[0] == 0
            groups.room_for_group()
            groups._reclaimed_at = -1.0  # let the next one reclaim at once
            assert len(groups.consumer.groups) <= MAX_GROUPS
            kept = groups.consumer.groups["kept"]
            assert list(kept.members) == ["stays"]
            assert set(kept.stored) == {None, "stays"}
            assert len(groups.consumer._flushing) <= MAX_GROUPS
        assert not groups.offsets._writes
    finally:
        groups.stop()
    again = await coordinator(topics)
    try:
        assert set(again.consumer.groups) <= {"kept"} | set(groups.consumer.groups)
        assert list(again.consumer.groups["kept"].members) == ["stays"]
    finally:
        again.stop()


async def test_share_members_joining_and_leaving_rapidly_leave_nothing_behind(topics):  # noqa: F811
    """The same for a share group: its stored records, its share-partition state record and
    the initializations in flight stay bounded."""
    S = messages.ShareGroupHeartbeatRequest
    groups = await coordinator(topics)
    try:
        await topics.create("t", 2, {})
        tid = topics.get("t").topic_id

        async def shb(member_id, epoch, names=None):
            answer = groups.share.heartbeat(S(group_id="sg", member_id=member_id,
                                              member_epoch=epoch, subscribed_topic_names=names),
                                            "client", "/127.0.0.1")
            assert await groups.share.settled("sg", answer[2]) == 0
            return answer

        assert (await shb("stays", 0, ["t"]))[0] == 0
        for i in range(100):
            assert (await shb(f"m{i}", 0, ["t"]))[0] == 0
            assert (await shb(f"m{i}", -1))[0] == 0
        group = groups.share.groups["sg"]
        assert set(group.stored) == {None, "stays"}
        assert group.state_partitions == {tid: {0, 1}} and not group.initializing
        assert not group.in_flight and not group.init_tasks
    finally:
        groups.stop()
    again = await coordinator(topics)
    try:
        group = again.share.groups["sg"]
        assert list(group.members) == ["stays"] and group.state_partitions == {tid: {0, 1}}
    finally:
        again.stop()


def test_a_large_change_is_appended_in_batches_of_bounded_size():
    from headrace.broker.coordinator.group.modern_group_log import BATCH_BYTES, _chunks

    changes = [(b"k%d" % i, b"v" * 10_000 if i % 3 else None) for i in range(200)]
    runs = list(_chunks(changes))
    assert len(runs) > 1 and [kv for run in runs for kv in run] == changes
    assert all(sum(len(k) + len(v or b"") for k, v in run) <= BATCH_BYTES for run in runs)
    assert list(_chunks([])) == [] and list(_chunks(changes[:2])) == [changes[:2]]
