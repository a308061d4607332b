"""Groups are bounded by ``group.max.groups``: a client making up group ids (FindCoordinator,
JoinGroup, OffsetCommit, ConsumerGroupHeartbeat) cannot make the coordinator keep more."""

from __future__ import annotations

import time
import uuid

from headrace.protocol import ApiKey, ErrorCode, messages

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

MAX_GROUPS = 20
SETTINGS = {
    "group.max.groups": str(MAX_GROUPS),
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
    "offsets.topic.num.partitions": "3",
    "offsets.retention.check.interval.ms": "700",
}
JG = messages.JoinGroupRequest
OC = messages.OffsetCommitRequest
H = messages.ConsumerGroupHeartbeatRequest


def random_id() -> str:
    return f"hostile-{uuid.uuid4()}"


def create(c, name):
    C = messages.CreateTopicsRequest
    r = c.request(ApiKey.CREATE_TOPICS, 7, C(topics=[
        C.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]))
    assert r.topics[0].error_code == ErrorCode.NONE


def commit(c, group, topic="t") -> int:
    r = c.request(ApiKey.OFFSET_COMMIT, 8, OC(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[
            OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]))
    return r.topics[0].partitions[0].error_code


def join(c, group) -> int:
    return c.request(ApiKey.JOIN_GROUP, 5, JG(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")])).error_code


def heartbeat(c, group) -> int:
    return c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, H(
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=10_000,
        subscribed_topic_names=["t"], topic_partitions=[])).error_code


def groups(c) -> list[str]:
    L = messages.ListGroupsRequest
    return [g.group_id for g in c.request(ApiKey.LIST_GROUPS, 5, L(
        states_filter=[], types_filter=[])).groups]


def test_a_client_making_up_group_ids_cannot_pass_group_max_groups(tmp_path):
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        with WireClient(b.port) as c:
            create(c, "t")
            # FindCoordinator makes nothing
            F = messages.FindCoordinatorRequest
            r = c.request(ApiKey.FIND_COORDINATOR, 4, F(
                key_type=0, coordinator_keys=[random_id() for _ in range(500)]))
            assert all(x.error_code == ErrorCode.NONE for x in r.coordinators)
            assert groups(c) == []
            # offsets for made-up groups: as many groups as allowed, then refusals
            codes = [commit(c, random_id()) for _ in range(3 * MAX_GROUPS)]
            assert codes[:MAX_GROUPS] == [ErrorCode.NONE] * MAX_GROUPS
            assert set(codes[MAX_GROUPS:]) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
            kept = groups(c)
            assert len(kept) == MAX_GROUPS
            # the other ways of making a group are refused too, and nothing grows
            assert join(c, random_id()) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert heartbeat(c, random_id()) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert len(groups(c)) == MAX_GROUPS
            # known groups carry on; a deleted group makes room for a new one
            assert commit(c, kept[0]) == ErrorCode.NONE
            D = messages.DeleteGroupsRequest
            r = c.request(ApiKey.DELETE_GROUPS, 2, D(groups_names=[kept[0]]))
            assert r.results[0].error_code == ErrorCode.NONE
            assert join(c, "legit") == ErrorCode.MEMBER_ID_REQUIRED  # the group is made
            assert "legit" in groups(c)
            assert commit(c, random_id()) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert b.alive
    finally:
        b.kill()


def test_groups_holding_nothing_make_room(tmp_path):
    """Commits that store nothing (an unknown topic) still make groups, as do joins that are
    never completed; at the bound those are forgotten to make room (at most once a second),
    and the periodic pass forgets them anyway."""
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        with WireClient(b.port) as c:
            create(c, "t")
            for _ in range(3 * MAX_GROUPS):
                code = commit(c, random_id(), topic="no-such-topic")
                assert code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE)
                assert len(groups(c)) <= MAX_GROUPS
            # a group that stores offsets gets in, within a second
            deadline = time.monotonic() + 3
            while (code := commit(c, "legit")) == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert code == ErrorCode.NONE and "legit" in groups(c)
            # and groups that hold nothing go at the periodic pass too
            deadline = time.monotonic() + 10
            while groups(c) != ["legit"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert groups(c) == ["legit"]
    finally:
        b.kill()


def test_members_per_group_are_bounded(tmp_path):
    """``group.max.size`` counts classic members and the member ids handed out for a rejoin;
    ``group.consumer.max.size`` the members of a consumer group."""
    b = BrokerProcess(tmp_path / "data", {
        **SETTINGS, "group.max.size": "5", "group.consumer.max.size": "5"}).start()
    try:
        with WireClient(b.port) as c:
            create(c, "t")
            codes = [join(c, "classic") for _ in range(20)]
            assert codes == [ErrorCode.MEMBER_ID_REQUIRED] * 5 + [
                ErrorCode.GROUP_MAX_SIZE_REACHED] * 15
            codes = [heartbeat(c, "consumer") for _ in range(20)]
            assert codes == [ErrorCode.NONE] * 5 + [ErrorCode.GROUP_MAX_SIZE_REACHED] * 15
    finally:
        b.kill()
