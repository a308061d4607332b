"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Checks the reconciliation rule (a partition moves only after its owner reported it revoked,
and partitions that stay are not revoked), fencing, leaving, commits with member epochs.
"""

from __future__ import annotations

import time

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

from test_group_protocol import FAST, commit, commit_errors, create_topic

H = messages.ConsumerGroupHeartbeatRequest


def hb(c, member_id, epoch, topics=None, owned=None, group="cg", instance_id=None,
       rebalance_ms=30000):
    return c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, H(
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=rebalance_ms,
        subscribed_topic_names=topics, instance_id=instance_id,
        topic_partitions=None if owned is None else [
            H.TopicPartitions(topic_id=tid, partitions=ps) for tid, ps in owned.items()]))


def parts(response):
    if response.assignment is None:
        return None
    return sorted(p for t in response.assignment.topic_partitions for p in t.partitions)


def test_two_members_reconcile_without_double_ownership(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 4)
        a = hb(c, "member-a", 0, ["t"])
        assert a.error_code == 0 and a.member_id == "member-a" and parts(a) == [0, 1, 2, 3]
        tid = a.assignment.topic_partitions[0].topic_id
        a_epoch = a.member_epoch
        a2 = hb(c, "member-a", a_epoch, owned={tid: [0, 1, 2, 3]})
        assert a2.assignment is None  # nothing changed: nothing sent
        d = hb(c, "member-d", 0, ["t"])
        assert d.error_code == 0 and parts(d) == []  # its target is still owned by a
        a3 = hb(c, "member-a", a_epoch)
        kept = parts(a3)
        assert len(kept) == 2 and a3.member_epoch == a_epoch  # revoke first, same epoch
        d2 = hb(c, "member-d", d.member_epoch)
        assert parts(d2) in (None, [])  # a has not confirmed yet
        a4 = hb(c, "member-a", a_epoch, owned={tid: kept})
        assert a4.member_epoch > a_epoch
        d3 = hb(c, "member-d", d.member_epoch)
        assert sorted(parts(d3) + kept) == [0, 1, 2, 3]
        desc = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, messages.ConsumerGroupDescribeRequest(
            group_ids=["cg", "nope"])).groups
        assert desc[0].error_code == 0 and desc[0].group_state == "Stable"
        assert sorted(m.member_id for m in desc[0].members) == ["member-a", "member-d"]
        assert desc[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        L = messages.ListGroupsRequest
        listed = c.request(ApiKey.LIST_GROUPS, 5, L(states_filter=[], types_filter=["consumer"])).groups
        assert [(g.group_id, g.group_type) for g in listed] == [("cg", "consumer")]
        # commits carry the member epoch
        assert commit_errors(commit(c, "cg", [("t", 0, 3)], a4.member_epoch, "member-a")) == [0]
        assert commit_errors(commit(c, "cg", [("t", 0, 3)], a_epoch - 1, "member-a")) == [
            ErrorCode.STALE_MEMBER_EPOCH]
        # fencing and unknown members
        assert hb(c, "member-a", a4.member_epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert hb(c, "ghost", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # d leaves: a gets everything back
        assert hb(c, "member-d", -1).member_epoch == -1
        a5 = hb(c, "member-a", a4.member_epoch)
        assert parts(a5) == [0, 1, 2, 3]


def describe(c, group_id, version):
    return c.request(ApiKey.DESCRIBE_GROUPS, version, messages.DescribeGroupsRequest(
        groups=[group_id], include_authorized_operations=False)).groups[0]


def consumer_describe(c, group_id):
    return c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, messages.ConsumerGroupDescribeRequest(
        group_ids=[group_id])).groups[0]


def test_describe_groups_on_a_consumer_group_is_dead_as_in_kafka(broker_factory):
    """Kafka 4.0's DescribeGroups only describes classic groups: a KIP-848 group is Dead, and from
    v6 GROUP_ID_NOT_FOUND "is not a classic group"; ConsumerGroupDescribe says the converse."""
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        assert hb(c, "m", 0, ["t"]).error_code == 0
        old = describe(c, "cg", 5)
        assert (old.error_code, old.group_state, old.members) == (0, "Dead", [])
        new = describe(c, "cg", 6)
        assert (new.error_code, new.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
        assert new.error_message == "Group cg is not a classic group."
        assert describe(c, "nope", 6).error_message == "Group nope not found."
        commit(c, "classic-offsets", [("t", 0, 1)])
        d = consumer_describe(c, "classic-offsets")
        assert d.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert d.error_message == "Group classic-offsets is not a consumer group."
        assert consumer_describe(c, "nope").error_message == "Group nope not found."


def test_member_that_never_revokes_is_removed_after_its_rebalance_timeout(broker_factory):
    b = broker_factory({**FAST, "group.consumer.session.timeout.ms": "60000"})
    with WireClient(b.port) as c:
        create_topic(c, "t", 4)
        a = hb(c, "a", 0, ["t"], rebalance_ms=1000)
        tid = a.assignment.topic_partitions[0].topic_id
        hb(c, "a", a.member_epoch, owned={tid: [0, 1, 2, 3]}, rebalance_ms=1000)
        d = hb(c, "d", 0, ["t"])
        assert parts(d) == []
        a2 = hb(c, "a", a.member_epoch, rebalance_ms=1000)  # told to revoke two partitions
        assert len(parts(a2)) == 2
        # a keeps heartbeating (its session is alive) but never confirms the revocation
        deadline = time.monotonic() + 5
        removed = None
        while time.monotonic() < deadline:
            r = hb(c, "a", a.member_epoch, owned={tid: [0, 1, 2, 3]}, rebalance_ms=1000)
            if r.error_code:
                removed = r.error_code
                break
            time.sleep(0.2)
        assert removed == ErrorCode.UNKNOWN_MEMBER_ID
        d2 = hb(c, "d", d.member_epoch)
        assert parts(d2) == [0, 1, 2, 3]  # the partitions move on without a's confirmation


def test_member_that_revokes_in_time_stays(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 4)
        a = hb(c, "a", 0, ["t"], rebalance_ms=800)
        tid = a.assignment.topic_partitions[0].topic_id
        hb(c, "a", a.member_epoch, owned={tid: [0, 1, 2, 3]}, rebalance_ms=800)
        hb(c, "d", 0, ["t"])
        kept = parts(hb(c, "a", a.member_epoch, rebalance_ms=800))
        a3 = hb(c, "a", a.member_epoch, owned={tid: kept}, rebalance_ms=800)
        assert a3.error_code == 0 and a3.member_epoch > a.member_epoch
        time.sleep(1.2)  # past the rebalance timeout: nothing happens to a member that revoked
        a4 = hb(c, "a", a3.member_epoch, rebalance_ms=800)
        assert a4.error_code == 0 and a4.member_epoch == a3.member_epoch


def test_static_member_rejoins_with_its_assignment_and_no_rebalance(broker_factory):
    b = broker_factory({**FAST, "group.consumer.session.timeout.ms": "1500"})
    with WireClient(b.port) as c:
        create_topic(c, "t", 4)
        s1 = hb(c, "s-1", 0, ["t"], instance_id="inst")
        tid = s1.assignment.topic_partitions[0].topic_id
        hb(c, "s-1", s1.member_epoch, owned={tid: [0, 1, 2, 3]})
        o = hb(c, "o", 0, ["t"])
        mine = parts(hb(c, "s-1", s1.member_epoch))
        s1b = hb(c, "s-1", s1.member_epoch, owned={tid: mine})
        o2 = hb(c, "o", o.member_epoch)
        theirs = parts(o2)
        assert sorted(mine + theirs) == [0, 1, 2, 3]
        hb(c, "o", o2.member_epoch, owned={tid: theirs})
        before = consumer_describe(c, "cg")
        assert before.group_state == "Stable"
        # a new instance id while the old member has not left: refused
        clash = hb(c, "s-2", 0, ["t"], instance_id="inst")
        assert clash.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
        # the static member leaves for a restart (epoch -2) and comes back under a new id
        assert hb(c, "s-1", -2, instance_id="inst").member_epoch == -2
        held = consumer_describe(c, "cg")
        assert held.group_epoch == before.group_epoch  # no rebalance for a static leave
        assert hb(c, "o", o2.member_epoch).assignment is None  # o is given nothing more
        back = hb(c, "s-2", 0, ["t"], instance_id="inst")
        assert back.error_code == 0 and back.member_id == "s-2"
        assert parts(back) == mine and back.member_epoch == s1b.member_epoch
        after = consumer_describe(c, "cg")
        assert after.group_epoch == before.group_epoch and after.group_state == "Stable"
        assert sorted(m.member_id for m in after.members) == ["o", "s-2"]
        assert hb(c, "s-1", s1b.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_that_does_not_return_expires_and_its_partitions_move(broker_factory):
    b = broker_factory({**FAST, "group.consumer.session.timeout.ms": "1000"})
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        s1 = hb(c, "s-1", 0, ["t"], instance_id="inst")
        tid = s1.assignment.topic_partitions[0].topic_id
        o = hb(c, "o", 0, ["t"])
        mine = parts(hb(c, "s-1", s1.member_epoch, owned={tid: [0, 1]}))
        hb(c, "s-1", s1.member_epoch, owned={tid: mine})
        assert hb(c, "s-1", -2, instance_id="inst").error_code == 0
        got = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and got != [0, 1]:
            r = hb(c, "o", o.member_epoch if not got else r.member_epoch)
            got = parts(r) if r.assignment is not None else got
            time.sleep(0.2)
        assert got == [0, 1]
        assert hb(c, "s-3", 0, ["t"], instance_id="inst").error_code == 0  # a fresh static member
