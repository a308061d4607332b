"""KIP-932 share groups at the group coordinator, on the wire: ShareGroupHeartbeat and
ShareGroupDescribe, ListGroups, DeleteGroups and the other group APIs meeting a share group's
id; members sharing a partition, leaving, fencing, session expiry, the bounds
(``group.share.max.size``, ``group.max.groups``), ``share.version`` 0; and Kafka 4.4's
``kafka-share-groups`` listing and describing a group built by wire heartbeats."""

from __future__ import annotations

import time

from kafkawire import WireClient
from test_features import KAFKA_4_4, java, update
from test_group_configs import alter
from test_group_consumer_protocol import hb
from test_group_protocol import FAST, commit, commit_errors, create_topic, describe, join
from test_moves import _kafka_tool

from headrace.protocol import ApiKey, ErrorCode, messages

H = messages.ShareGroupHeartbeatRequest
D = messages.ShareGroupDescribeRequest
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
# bounds low enough for a test to see a session end
QUICK = {**FAST, "group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "1500",
         "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "200"}


def shb(c, member_id, epoch, topics=None, group="sg", rack_id=None):
    return c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, H(
        group_id=group, member_id=member_id, member_epoch=epoch, rack_id=rack_id,
        subscribed_topic_names=topics))


def parts(response):
    if response.assignment is None:
        return None
    return sorted(p for t in response.assignment.topic_partitions for p in t.partitions)


def described(c, *groups):
    return c.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, D(group_ids=list(groups),
                                                       include_authorized_operations=True)).groups


def listed(c, types=(), states=()):
    r = c.request(ApiKey.LIST_GROUPS, 5, messages.ListGroupsRequest(states_filter=list(states),
                                                                   types_filter=list(types)))
    return sorted((g.group_id, g.group_type, g.group_state, g.protocol_type) for g in r.groups)


def test_three_members_share_the_partition_of_a_one_partition_topic(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        first = shb(c, "member-a", 0, ["t"])
        assert (first.error_code, first.member_id, first.member_epoch, parts(first)) == (0, "member-a", 1, [0])
        assert first.heartbeat_interval_ms == 200
        second = shb(c, "member-b", 0, ["t"])
        third = shb(c, "member-c", 0, ["t"])
        assert (parts(second), parts(third), third.member_epoch) == ([0], [0], 3)  # shared, no revocation
        again = shb(c, "member-a", first.member_epoch)
        assert again.member_epoch == 3 and again.assignment is None  # unchanged: not sent
        assert parts(shb(c, "member-a", 3, ["t"])) == [0]  # a full request is answered in full
        (group,) = described(c, "sg")
        assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch,
                group.assignor_name) == (0, "Stable", 3, 3, "simple")
        assert group.authorized_operations > 0
        members = {m.member_id: m for m in group.members}
        assert sorted(members) == ["member-a", "member-b", "member-c"]
        assert members["member-b"].member_epoch == 2  # takes epoch 3 at its next heartbeat
        assert members["member-a"].client_host == "/127.0.0.1"
        for m in members.values():
            assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [("t", [0])]
            assert m.subscribed_topic_names == ["t"]
        assert listed(c) == [("sg", "share", "Stable", "share")]
        assert listed(c, types=["share"], states=["stable"]) == [("sg", "share", "Stable", "share")]
        assert listed(c, types=["consumer"]) == [] and listed(c, states=["empty"]) == []

        left = shb(c, "member-c", -1)
        assert (left.error_code, left.member_id, left.member_epoch) == (0, "member-c", -1)
        assert shb(c, "member-a", 3).member_epoch == 4
        for m in ("member-a", "member-b"):
            shb(c, m, -1)
        (group,) = described(c, "sg")
        assert (group.group_state, group.members) == ("Empty", [])
        assert listed(c, states=["empty"]) == [("sg", "share", "Empty", "share")]


def test_members_are_balanced_and_take_their_new_assignment_at_once(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "t", 4)
        a = shb(c, "a", 0, ["t"])
        assert parts(a) == [0, 1, 2, 3]
        d = shb(c, "d", 0, ["t"])
        a2 = shb(c, "a", a.member_epoch)
        assert a2.member_epoch == d.member_epoch == 2  # no revocation round
        assert len(parts(a2)) == 2 and sorted(parts(a2) + parts(d)) == [0, 1, 2, 3]
        e = shb(c, "e", 0, ["t"])  # 4 partitions, 3 members: 2, 1, 1
        counts = sorted(len(parts(x)) for x in (shb(c, "a", a2.member_epoch, ["t"]),
                                                 shb(c, "d", d.member_epoch, ["t"]), e))
        assert counts == [1, 1, 2]
        create_topic(c, "u", 2)  # a subscription change, then a partition count change
        a3 = shb(c, "a", e.member_epoch, ["t", "u"])
        assert a3.member_epoch == e.member_epoch + 1
        R = messages.CreatePartitionsRequest
        r = c.request(ApiKey.CREATE_PARTITIONS, 3, R(topics=[R.CreatePartitionsTopic(
            name="t", count=6, assignments=None)], timeout_ms=5000, validate_only=False))
        assert r.results[0].error_code == 0
        assert shb(c, "a", a3.member_epoch).member_epoch == a3.member_epoch + 1


def test_fencing_unknown_members_and_malformed_requests(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        a = shb(c, "a", 0, ["t"])
        shb(c, "b", 0, ["t"])
        a2 = shb(c, "a", a.member_epoch)
        assert a2.member_epoch == 2
        assert shb(c, "a", a.member_epoch).error_code == 0  # the previous epoch still passes
        fenced = shb(c, "a", 7)
        assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH and fenced.member_id is None
        assert fenced.error_message.startswith("The share group member has a greater member epoch (7)")
        ghost = shb(c, "ghost", 3)
        assert (ghost.error_code, ghost.error_message) == (
            ErrorCode.UNKNOWN_MEMBER_ID, "Member ghost is not a member of group sg.")
        for request, message in [
            (("", 0, ["t"]), "Invalid member id in the request."),
            (("x" * 37, 0, ["t"]), "Invalid member id in the request."),
            (("a", 0, None), "SubscribedTopicNames must be set in first request."),
            (("a", 0, []), "SubscribedTopicNames must be set in first request."),
            (("a", -2, None), "MemberEpoch is invalid."),
        ]:
            r = shb(c, *request)
            assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)
        assert shb(c, "a", 0, ["t"], group="").error_message == "GroupId can't be empty."
        r = shb(c, "a", -1, group="nope")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
        # a group this coordinator does not hold (after a restart, say): the member rejoins
        assert shb(c, "a", 5, group="lost").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_after_its_session_timeout(broker_factory):
    b = broker_factory(QUICK)
    assert alter(b.port, "slow", share_session_timeout_ms=30000, share_heartbeat_interval_ms=300) == (0, None)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        a = shb(c, "a", 0, ["t"])
        quiet = shb(c, "quiet", 0, ["t"])
        slow = shb(c, "s", 0, ["t"], group="slow")
        assert slow.heartbeat_interval_ms == 300  # the group's own config
        epoch = shb(c, "a", a.member_epoch).member_epoch
        assert epoch == quiet.member_epoch
        deadline = time.monotonic() + 3  # past the 1.5 s session of the quiet member
        while time.monotonic() < deadline:
            r = shb(c, "a", epoch)
            assert r.error_code == 0
            epoch = r.member_epoch
            time.sleep(0.2)
        assert parts(shb(c, "a", epoch, ["t"])) == [0, 1]
        (group,) = described(c, "sg")
        assert [m.member_id for m in group.members] == ["a"]
        assert shb(c, "quiet", quiet.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert [m.member_id for m in described(c, "slow")[0].members] == ["s"]  # 30 s session


def test_group_share_max_size_and_group_max_groups(broker_factory):
    b = broker_factory({**QUICK, "group.share.max.size": "2", "group.max.groups": "3"})
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        first, second = shb(c, "a", 0, ["t"]), shb(c, "b", 0, ["t"])
        full = shb(c, "c", 0, ["t"])
        assert (full.error_code, full.error_message) == (
            ErrorCode.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 2 members.")
        assert shb(c, "a", first.member_epoch).error_code == 0  # members carry on
        shb(c, "b", -1)
        assert shb(c, "c", 0, ["t"]).error_code == 0  # room again
        # every kind of group counts in group.max.groups
        assert hb(c, "m", 0, ["t"], group="cg").error_code == 0
        assert shb(c, "x", 0, ["missing"], group="sg2").error_code == 0
        refused = shb(c, "x", 0, ["t"], group="sg3")
        assert refused.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        # an empty share group that never had a partition is forgotten when room is needed
        shb(c, "x", -1, group="sg2")
        time.sleep(1.1)
        assert shb(c, "x", 0, ["t"], group="sg3").error_code == 0
        # one that had partitions (it may have state) is kept until DeleteGroups, as in Kafka
        shb(c, "x", -1, group="sg3")
        time.sleep(1.1)
        assert shb(c, "y", 0, ["t"], group="sg4").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        r = c.request(ApiKey.DELETE_GROUPS, 2, messages.DeleteGroupsRequest(groups_names=["sg3"]))
        assert r.results[0].error_code == 0
        assert shb(c, "y", 0, ["t"], group="sg4").error_code == 0
        assert second.error_code == 0


def test_a_group_id_is_one_kind_of_group(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        assert hb(c, "m", 0, ["t"], group="cg").error_code == 0
        r = shb(c, "a", 0, ["t"], group="cg")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        assert commit_errors(commit(c, "offsets-only", [("t", 0, 1)])) == [0]  # an Empty classic group
        assert shb(c, "a", 0, ["t"], group="offsets-only").error_code == ErrorCode.GROUP_ID_NOT_FOUND

        assert shb(c, "a", 0, ["t"]).error_code == 0  # share group "sg"
        r = hb(c, "m", 0, ["t"], group="sg")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group sg is not a consumer group.")
        r = join(c, "sg", member_id="")
        assert (r.error_code, r.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        assert commit_errors(commit(c, "sg", [("t", 0, 1)])) == [ErrorCode.GROUP_ID_NOT_FOUND]
        F = messages.OffsetFetchRequest
        r = c.request(ApiKey.OFFSET_FETCH, 8, F(groups=[F.OffsetFetchRequestGroup(group_id="sg", topics=None)],
                                                require_stable=False))
        assert r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        d = describe(c, "sg", version=6)
        assert (d.error_code, d.error_message, d.group_state) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Group sg is not a classic group.", "Dead")
        cgd = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, messages.ConsumerGroupDescribeRequest(group_ids=["sg"]))
        assert cgd.groups[0].error_message == "Group sg is not a consumer group."
        cg, nope = described(c, "cg", "nope")
        assert (cg.error_code, cg.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        assert (nope.error_code, nope.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
        assert [g[:2] for g in listed(c)] == [("cg", "consumer"), ("offsets-only", "classic"), ("sg", "share")]

        def delete():
            r = c.request(ApiKey.DELETE_GROUPS, 2, messages.DeleteGroupsRequest(groups_names=["sg"]))
            return r.results[0].error_code

        assert delete() == ErrorCode.NON_EMPTY_GROUP
        shb(c, "a", -1)
        assert delete() == ErrorCode.NONE
        assert delete() == ErrorCode.GROUP_ID_NOT_FOUND
        assert [g[0] for g in listed(c, types=["share"])] == []
        assert hb(c, "m", 0, ["t"], group="sg").error_code == 0  # the id is free again


def test_share_version_0_turns_share_groups_off(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        assert shb(c, "a", 0, ["t"]).error_code == 0
    assert update(b.port, 2, 0, upgrade_type=2, feature="share.version").error_code == 0
    with WireClient(b.port) as c:
        r = shb(c, "a", 1)
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION and r.heartbeat_interval_ms == 0
        assert [g.error_code for g in described(c, "sg", "x")] == [ErrorCode.UNSUPPORTED_VERSION] * 2
    assert update(b.port, 2, 1, feature="share.version").error_code == 0
    with WireClient(b.port) as c:
        assert shb(c, "a", 1).error_code == 0


def test_share_groups_need_read_on_the_group(broker_factory):
    b = broker_factory({**QUICK, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with WireClient(b.port) as c:  # an anonymous client without ACLs
        assert shb(c, "a", 0, ["t"]).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        (group,) = described(c, "sg")
        assert group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


@java
def test_kafka_share_groups_lists_describes_and_deletes(broker_factory):
    """The offsets (``--describe`` alone, ``--reset-offsets``, ``--delete-offsets``) are in
    test_share_admin.py."""
    b = broker_factory(FAST)  # sessions of 45 s: the tool's JVM takes seconds to start
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        epochs = {m: shb(c, m, 0, ["t"], group="shared").member_epoch for m in ("m1", "m2", "m3")}
        for m, epoch in epochs.items():
            shb(c, m, epoch, group="shared")
        assert shb(c, "x", 0, ["t"], group="quiet").error_code == 0
        shb(c, "x", -1, group="quiet")

    def tool(*args):
        done = _kafka_tool(SHARE_GROUPS, ["--bootstrap-server", b.bootstrap, *args], version=KAFKA_4_4)
        assert done.returncode == 0, done.stdout + done.stderr
        return [line.split() for line in done.stdout.splitlines() if line.strip()]

    assert sorted(tool("--list")) == [["quiet"], ["shared"]]
    assert tool("--list", "--state", "Stable") == [["GROUP", "STATE"], ["shared", "Stable"]]
    rows = tool("--describe", "--group", "shared", "--members", "--verbose")
    assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
    assert sorted(r[1] for r in rows[1:]) == ["m1", "m2", "m3"]
    assert {(r[0], r[2], r[4], r[5], r[6]) for r in rows[1:]} == {("shared", "/127.0.0.1", "1", "3", "t:0")}
    rows = tool("--describe", "--group", "shared", "--state", "--verbose")
    assert rows[1][-4:] == ["Stable", "3", "3", "3"]  # state, group epoch, assignment epoch, members
    deleted = tool("--delete", "--group", "quiet")
    assert deleted == [["Deletion", "of", "requested", "share", "groups", "('quiet')", "was", "successful."]]
    assert tool("--list") == [["shared"]]
