"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Checks the reconciliation rule (a partition moves only after its owner reported it revoked,
and partitions that stay are not revoked), fencing, leaving, commits with member epochs.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

from test_group_protocol import FAST, commit, commit_errors, create_topic

H = messages.ConsumerGroupHeartbeatRequest


def hb(c, member_id, epoch, topics=None, owned=None, group="cg"):
    return c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, H(
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30000,
        subscribed_topic_names=topics,
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
