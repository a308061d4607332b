"""The group APIs on the wire: the classic protocol's flows and errors, offsets, administration.

Each test talks to a real broker through the bare wire client, so the exact error codes of
the issue's "bad input" list are checked, not what a client library makes of them.
"""

from __future__ import annotations

import time

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

FAST = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
        "offsets.topic.num.partitions": "3"}
JG = messages.JoinGroupRequest
SG = messages.SyncGroupRequest


def join_msg(group, member_id="", instance_id=None, session_ms=10_000, rebalance_ms=10_000,
             protocols=(("range", b"meta"),)):
    return JG(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
              member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
              protocols=[JG.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])


def join(c: WireClient, group, version=9, **kw):
    """Join as a new member (going through MEMBER_ID_REQUIRED when the version needs it)."""
    r = c.request(ApiKey.JOIN_GROUP, version, join_msg(group, **kw))
    if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        kw["member_id"] = r.member_id
        r = c.request(ApiKey.JOIN_GROUP, version, join_msg(group, **kw))
    return r


def sync(c, group, generation, member_id, assignments=(), instance_id=None, version=5):
    return c.request(ApiKey.SYNC_GROUP, version, SG(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id, protocol_type="consumer", protocol_name="range",
        assignments=[SG.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments]))


def heartbeat(c, group, generation, member_id, instance_id=None):
    return c.request(ApiKey.HEARTBEAT, 4, messages.HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id)).error_code


def commit(c, group, offsets, generation=-1, member_id="", version=9):
    R = messages.OffsetCommitRequest
    return c.request(ApiKey.OFFSET_COMMIT, version, R(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        topics=[R.OffsetCommitRequestTopic(name=t, partitions=[
            R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                           committed_metadata="m")])
            for t, p, o in offsets]))


def commit_errors(response):
    return [p.error_code for t in response.topics for p in t.partitions]


def fetch_offsets(c, group, topics=None, version=8):
    R = messages.OffsetFetchRequest
    if version >= 8:
        r = c.request(ApiKey.OFFSET_FETCH, version, R(groups=[R.OffsetFetchRequestGroup(
            group_id=group, topics=None if topics is None else [
                R.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics])]))
        topics_out = r.groups[0].topics
    else:
        r = c.request(ApiKey.OFFSET_FETCH, version, R(group_id=group, topics=None if topics is None else [
            R.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics]))
        topics_out = r.topics
    return {(t.name, p.partition_index): p.committed_offset for t in topics_out for p in t.partitions}


def create_topic(c, name, partitions):
    R = messages.CreateTopicsRequest
    r = c.request(ApiKey.CREATE_TOPICS, 7, R(topics=[R.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000))
    assert r.topics[0].error_code == 0


def describe(c, group, version=5):
    return c.request(ApiKey.DESCRIBE_GROUPS, version, messages.DescribeGroupsRequest(groups=[group])).groups[0]


def test_find_coordinator_single_and_batched(broker):
    with WireClient(broker.port) as c:
        for v in (0, 1, 2, 3):
            r = c.request(ApiKey.FIND_COORDINATOR, v, messages.FindCoordinatorRequest(key="g"))
            assert (r.error_code, r.node_id, r.port) == (0, 1, broker.port)
        r = c.request(ApiKey.FIND_COORDINATOR, 6, messages.FindCoordinatorRequest(
            key_type=0, coordinator_keys=["a", "b", "c"]))
        assert [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators] == [
            (k, 0, 1, broker.port) for k in "abc"]


def test_join_requires_member_id_then_one_member_generation(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        first = c.request(ApiKey.JOIN_GROUP, 9, join_msg("g1"))
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        r = c.request(ApiKey.JOIN_GROUP, 9, join_msg("g1", member_id=first.member_id))
        assert r.error_code == 0 and r.generation_id == 1 and r.leader == first.member_id
        assert [(m.member_id, m.metadata) for m in r.members] == [(first.member_id, b"meta")]
        s = sync(c, "g1", 1, r.member_id, [(r.member_id, b"assignment")])
        assert (s.error_code, s.assignment, s.protocol_name) == (0, b"assignment", "range")
        assert describe(c, "g1").group_state == "Stable"
        # v3 joins without the member id step
        r3 = c.request(ApiKey.JOIN_GROUP, 3, join_msg("g3"))
        assert r3.error_code == 0 and r3.member_id


def test_two_members_rebalance_and_rebalance_in_progress(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as a, WireClient(b.port) as d:
        ra = join(a, "g")
        sync(a, "g", ra.generation_id, ra.member_id, [(ra.member_id, b"all")])
        # a second member arrives: its join is held until the first rejoins
        first = d.request(ApiKey.JOIN_GROUP, 9, join_msg("g"))
        d.send(ApiKey.JOIN_GROUP, 9, join_msg("g", member_id=first.member_id))
        time.sleep(0.2)
        assert describe(a, "g").group_state == "PreparingRebalance"
        assert heartbeat(a, "g", ra.generation_id, ra.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
        assert sync(a, "g", ra.generation_id, ra.member_id).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        # an eager member may still commit for its generation before it rejoins
        create_topic(a, "t", 2)
        assert commit_errors(commit(a, "g", [("t", 0, 5)], ra.generation_id, ra.member_id)) == [0]
        ra2 = join(a, "g", member_id=ra.member_id)
        _, rd = d.receive(ApiKey.JOIN_GROUP, 9)
        assert ra2.generation_id == rd.generation_id == ra.generation_id + 1
        assert ra2.leader == rd.leader == ra.member_id  # the leader stays
        assert len(ra2.members) == 2 and rd.members == []
        # a follower's sync waits for the leader's; commits in between are refused
        d.send(ApiKey.SYNC_GROUP, 5, SG(group_id="g", generation_id=rd.generation_id,
                                        member_id=rd.member_id, protocol_type="consumer",
                                        protocol_name="range", assignments=[]))
        time.sleep(0.1)
        assert commit_errors(commit(a, "g", [("t", 0, 6)], ra2.generation_id, ra.member_id)) == [
            ErrorCode.REBALANCE_IN_PROGRESS]
        s = sync(a, "g", ra2.generation_id, ra.member_id, [(ra.member_id, b"p0"), (rd.member_id, b"p1")])
        _, sd = d.receive(ApiKey.SYNC_GROUP, 5)
        assert (s.assignment, sd.assignment) == (b"p0", b"p1")
        # stale generation, unknown member
        assert heartbeat(a, "g", ra.generation_id, ra.member_id) == ErrorCode.ILLEGAL_GENERATION
        assert heartbeat(a, "g", ra2.generation_id, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
        assert sync(a, "g", ra.generation_id, ra.member_id).error_code == ErrorCode.ILLEGAL_GENERATION
        assert commit_errors(commit(a, "g", [("t", 0, 7)], ra.generation_id, ra.member_id)) == [
            ErrorCode.ILLEGAL_GENERATION]
        assert commit_errors(commit(a, "g", [("t", 0, 7)], ra2.generation_id, "nobody")) == [
            ErrorCode.UNKNOWN_MEMBER_ID]
        assert c_join_unknown(a) == ErrorCode.UNKNOWN_MEMBER_ID
        # batched leave of both members
        r = a.request(ApiKey.LEAVE_GROUP, 5, messages.LeaveGroupRequest(group_id="g", members=[
            messages.LeaveGroupRequest.MemberIdentity(member_id=m) for m in (ra.member_id, rd.member_id, "x")]))
        assert [m.error_code for m in r.members] == [0, 0, ErrorCode.UNKNOWN_MEMBER_ID]
        assert describe(a, "g").group_state == "Empty"
        assert fetch_offsets(a, "g") == {("t", 0): 5}


def c_join_unknown(c):
    return c.request(ApiKey.JOIN_GROUP, 9, join_msg("g", member_id="not-a-member")).error_code


def test_vanished_member_expires_and_the_group_rebalances(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as a, WireClient(b.port) as d:
        ra = join(a, "g", session_ms=3000)
        sync(a, "g", ra.generation_id, ra.member_id, [(ra.member_id, b"x")])
        rd_id = d.request(ApiKey.JOIN_GROUP, 9, join_msg("g", session_ms=400)).member_id
        d.send(ApiKey.JOIN_GROUP, 9, join_msg("g", member_id=rd_id, session_ms=400))
        ra2 = join(a, "g", member_id=ra.member_id, session_ms=3000)
        d.receive(ApiKey.JOIN_GROUP, 9)
        sync(a, "g", ra2.generation_id, ra.member_id, [])
        # d never syncs nor heartbeats: after its session timeout it is gone
        start = time.monotonic()
        while heartbeat(a, "g", ra2.generation_id, ra.member_id) == 0:
            assert time.monotonic() - start < 3
            time.sleep(0.05)
        ra3 = join(a, "g", member_id=ra.member_id, session_ms=3000)
        assert ra3.generation_id == ra2.generation_id + 1
        assert [m.member_id for m in ra3.members] == [ra.member_id]


def test_join_timeout_drops_members_that_do_not_rejoin(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as a, WireClient(b.port) as d:
        ra = join(a, "g", rebalance_ms=500)
        sync(a, "g", ra.generation_id, ra.member_id, [])
        first = d.request(ApiKey.JOIN_GROUP, 9, join_msg("g", rebalance_ms=500))
        start = time.monotonic()
        # a keeps heartbeating (rebalance in progress) but never rejoins
        rd = d.request(ApiKey.JOIN_GROUP, 9, join_msg("g", member_id=first.member_id, rebalance_ms=500))
        assert 0.3 < time.monotonic() - start < 3
        assert rd.error_code == 0 and rd.leader == rd.member_id and len(rd.members) == 1
        assert heartbeat(a, "g", ra.generation_id, ra.member_id) == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_rejoins_without_rebalance(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as a, WireClient(b.port) as d:
        ra = join(a, "g", instance_id="i-a")  # static members get their id at once
        assert ra.error_code == 0
        sync(a, "g", ra.generation_id, ra.member_id, [(ra.member_id, b"A")], instance_id="i-a")
        d.send(ApiKey.JOIN_GROUP, 9, join_msg("g", instance_id="i-d"))
        ra2 = join(a, "g", member_id=ra.member_id, instance_id="i-a")
        _, rd = d.receive(ApiKey.JOIN_GROUP, 9)
        sync(a, "g", ra2.generation_id, ra.member_id, [(ra.member_id, b"A"), (rd.member_id, b"D")], instance_id="i-a")
        assert sync(d, "g", rd.generation_id, rd.member_id, instance_id="i-d").assignment == b"D"
        # d restarts: it rejoins with no member id and the same instance id
        again = join(d, "g", instance_id="i-d")
        assert again.error_code == 0 and again.generation_id == rd.generation_id
        assert again.member_id != rd.member_id
        assert describe(a, "g").group_state == "Stable"
        assert heartbeat(a, "g", ra2.generation_id, ra.member_id) == 0
        s = sync(d, "g", again.generation_id, again.member_id, instance_id="i-d")
        assert (s.error_code, s.assignment) == (0, b"D")
        # the old id is fenced
        assert heartbeat(d, "g", rd.generation_id, rd.member_id, instance_id="i-d") == ErrorCode.FENCED_INSTANCE_ID
        # leaving by instance id (admin removal)
        r = a.request(ApiKey.LEAVE_GROUP, 5, messages.LeaveGroupRequest(group_id="g", members=[
            messages.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i-d")]))
        assert r.members[0].error_code == 0
        assert heartbeat(a, "g", ra2.generation_id, ra.member_id) == ErrorCode.REBALANCE_IN_PROGRESS


def test_commit_errors_and_fetch_versions(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        r = commit(c, "solo", [("t", 0, 10), ("t", 1, 11), ("t", 2, 12), ("nope", 0, 1)])
        assert commit_errors(r) == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        for version in (2, 3, 8):
            assert commit_errors(commit(c, "solo", [("t", 0, 20)], version=version)) == [0]
        for version in (1, 3, 7, 8, 9):
            assert fetch_offsets(c, "solo", [("t", [0, 1, 5])], version=version) == {
                ("t", 0): 20, ("t", 1): 11, ("t", 5): -1}
        assert fetch_offsets(c, "solo") == {("t", 0): 20, ("t", 1): 11}
        assert fetch_offsets(c, "other", [("t", [0])]) == {("t", 0): -1}
        # several groups in one request (v8+)
        R = messages.OffsetFetchRequest
        r = c.request(ApiKey.OFFSET_FETCH, 9, R(groups=[R.OffsetFetchRequestGroup(group_id=g, topics=None)
                                                        for g in ("solo", "other")]))
        assert [(g.group_id, len(g.topics)) for g in r.groups] == [("solo", 1), ("other", 0)]
        big = commit(c, "solo", [("t", 0, 1)])  # metadata limit
        R = messages.OffsetCommitRequest
        r = c.request(ApiKey.OFFSET_COMMIT, 9, R(group_id="solo", generation_id_or_member_epoch=-1, member_id="", topics=[
            R.OffsetCommitRequestTopic(name="t", partitions=[R.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_metadata="x" * 5000)])]))
        assert commit_errors(big) == [0] and commit_errors(r) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
        # an active group refuses commits without a member
        ra = join(c, "busy")
        assert commit_errors(commit(c, "busy", [("t", 0, 1)])) == [ErrorCode.UNKNOWN_MEMBER_ID]
        del ra


def test_admin_list_describe_delete_offset_delete(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        commit(c, "offsets-only", [("t", 0, 1), ("t", 1, 2)])
        ra = join(c, "active")
        sync(c, "active", ra.generation_id, ra.member_id, [(ra.member_id, b"A")])
        L = messages.ListGroupsRequest
        listed = c.request(ApiKey.LIST_GROUPS, 5, L(states_filter=[], types_filter=[])).groups
        assert sorted((g.group_id, g.group_state) for g in listed) == [("active", "Stable"), ("offsets-only", "Empty")]
        stable = c.request(ApiKey.LIST_GROUPS, 4, L(states_filter=["stable"])).groups
        assert [g.group_id for g in stable] == ["active"]
        assert len(c.request(ApiKey.LIST_GROUPS, 0, L()).groups) == 2
        d = describe(c, "active")
        assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
        assert [(m.member_id, m.client_id, m.member_metadata, m.member_assignment) for m in d.members] == [
            (ra.member_id, "wire-test", b"meta", b"A")]
        assert describe(c, "missing").group_state == "Dead"
        assert describe(c, "missing", version=6).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # OffsetDelete
        OD = messages.OffsetDeleteRequest
        r = c.request(ApiKey.OFFSET_DELETE, 0, OD(group_id="offsets-only", topics=[OD.OffsetDeleteRequestTopic(
            name="t", partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])]))
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
        assert fetch_offsets(c, "offsets-only") == {("t", 1): 2}
        # DeleteGroups
        D = messages.DeleteGroupsRequest
        r = c.request(ApiKey.DELETE_GROUPS, 3, D(groups_names=["active", "offsets-only", "missing"]))
        assert [(x.group_id, x.error_code) for x in r.results] == [
            ("active", ErrorCode.NON_EMPTY_GROUP), ("offsets-only", 0), ("missing", ErrorCode.GROUP_ID_NOT_FOUND)]
        assert [x.error_message for x in r.results] == [  # (v3)
            "Group active has members: it can be deleted once it has none.", None, "Group missing does not exist."]
        assert fetch_offsets(c, "offsets-only") == {}
        # __consumer_offsets is internal in metadata
        M = messages.MetadataRequest
        md = c.request(ApiKey.METADATA, 12, M(topics=None))
        internal = {t.name: t.is_internal for t in md.topics}
        assert internal == {"t": False, "__consumer_offsets": True}
    b.kill()
    b.start()
    with WireClient(b.port) as c:  # deletions are replayed too; the live group's membership is kept
        assert fetch_offsets(c, "offsets-only") == {}
        listed = c.request(ApiKey.LIST_GROUPS, 5, L(states_filter=[], types_filter=[])).groups
        assert [(g.group_id, g.group_state) for g in listed] == [("active", "Stable")]


def test_offsets_survive_kill_9(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 3)
        for i in range(50):
            assert commit_errors(commit(c, f"g{i % 5}", [("t", i % 3, i)])) == [0]
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        expected = {}
        for i in range(50):
            expected.setdefault(f"g{i % 5}", {})[("t", i % 3)] = i
        for g, offs in expected.items():
            assert fetch_offsets(c, g) == offs
        L = messages.ListGroupsRequest
        groups = c.request(ApiKey.LIST_GROUPS, 5, L(states_filter=[], types_filter=[])).groups
        assert sorted((g.group_id, g.group_state) for g in groups) == [(f"g{i}", "Empty") for i in range(5)]


def test_offsets_of_empty_groups_expire(broker_factory):
    b = broker_factory({**FAST, "offsets.retention.minutes": "0",
                        "offsets.retention.check.interval.ms": "200"})
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        commit(c, "g", [("t", 0, 5)])
        ra = join(c, "live")
        sync(c, "live", ra.generation_id, ra.member_id, [])
        commit(c, "live", [("t", 0, 7)], ra.generation_id, ra.member_id)
        deadline = time.monotonic() + 5
        while fetch_offsets(c, "g") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fetch_offsets(c, "g") == {}
        assert fetch_offsets(c, "live") == {("t", 0): 7}  # a group with members keeps them
    b.kill()
    b.start()
    # expired for good: the expiry's tombstones were in the log, or (killed a moment after the
    # expiry, before its append was written, as Kafka could be) the offsets expire again
    with WireClient(b.port) as c:
        deadline = time.monotonic() + 5
        while fetch_offsets(c, "g") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fetch_offsets(c, "g") == {}


def test_oversized_member_metadata_is_cut_by_the_request_cap(broker_factory):
    b = broker_factory({**FAST, "socket.request.max.bytes": str(64 * 1024)})
    with WireClient(b.port) as c:
        c.send(ApiKey.JOIN_GROUP, 9, join_msg("g", protocols=[("range", b"x" * 100_000)]))
        assert c.closed_by_peer()
    with WireClient(b.port) as c:  # the broker is fine; metadata under the cap works
        assert join(c, "g", protocols=[("range", b"x" * 30_000)]).error_code == 0


@pytest.mark.parametrize("kw,error", [
    ({"session_ms": 50}, ErrorCode.INVALID_SESSION_TIMEOUT),
    ({"member_id": "made-up"}, ErrorCode.UNKNOWN_MEMBER_ID),
])
def test_join_rejections(broker_factory, kw, error):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        assert c.request(ApiKey.JOIN_GROUP, 9, join_msg("g", **kw)).error_code == error
        assert c.request(ApiKey.JOIN_GROUP, 9, join_msg("", **{})).error_code == ErrorCode.INVALID_GROUP_ID
        ok = join(c, "g2")
        other = c.request(ApiKey.JOIN_GROUP, 9, JG(group_id="g2", session_timeout_ms=10_000,
                                                    rebalance_timeout_ms=10_000, member_id="",
                                                    protocol_type="connect", protocols=[
                                                        JG.JoinGroupRequestProtocol(name="x", metadata=b"")]))
        assert ok.error_code == 0 and other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_classic_membership_survives_a_restart(broker_factory):
    """As in Kafka, the group's metadata record brings it back Stable after a restart (even
    kill -9): a member keeps heartbeating with its generation, a static member rejoining with
    an empty member id takes its old place without a rebalance, and a member that never comes
    back expires after its session timeout, which starts a rebalance."""
    b = broker_factory(FAST)
    with WireClient(b.port) as c, WireClient(b.port) as s:
        ra = join(c, "g", session_ms=4000)
        sync(c, "g", ra.generation_id, ra.member_id, [(ra.member_id, b"all")])
        s.send(ApiKey.JOIN_GROUP, 9, join_msg("g", instance_id="inst", session_ms=4000))
        time.sleep(0.2)
        ra = join(c, "g", member_id=ra.member_id, session_ms=4000)
        _, rs = s.receive(ApiKey.JOIN_GROUP, 9)
        gen = ra.generation_id
        assert ra.leader == ra.member_id and rs.generation_id == gen
        s.send(ApiKey.SYNC_GROUP, 5, SG(group_id="g", generation_id=gen, member_id=rs.member_id,
                                        group_instance_id="inst", protocol_type="consumer",
                                        protocol_name="range", assignments=[]))
        assert sync(c, "g", gen, ra.member_id, [(ra.member_id, b"A"), (rs.member_id, b"S")]).assignment == b"A"
        assert s.receive(ApiKey.SYNC_GROUP, 5)[1].assignment == b"S"
        assert describe(c, "g").group_state == "Stable"
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        d = describe(c, "g")
        assert d.group_state == "Stable" and d.protocol_data == "range"
        assert sorted((m.member_id, m.group_instance_id, m.member_assignment) for m in d.members) == sorted(
            [(ra.member_id, None, b"A"), (rs.member_id, "inst", b"S")])
        assert heartbeat(c, "g", gen, ra.member_id) == 0
        # the static member restarts: same generation, its old assignment, no rebalance
        again = join(c, "g", instance_id="inst", session_ms=4000)
        assert again.error_code == 0 and again.generation_id == gen
        assert again.member_id != rs.member_id
        assert sync(c, "g", gen, again.member_id, instance_id="inst").assignment == b"S"
        assert heartbeat(c, "g", gen, ra.member_id) == 0
        assert heartbeat(c, "g", gen, rs.member_id, "inst") == ErrorCode.FENCED_INSTANCE_ID
    b.kill()  # the new static member id is stored too
    b.start()
    with WireClient(b.port) as c:
        members = {m.member_id for m in describe(c, "g").members}
        assert members == {ra.member_id, again.member_id}
        # only the dynamic member keeps heartbeating: the static one expires, a rebalance starts
        deadline = time.monotonic() + 8
        code = 0
        while time.monotonic() < deadline and code == 0:
            code = heartbeat(c, "g", gen, ra.member_id)
            time.sleep(0.3)
        assert code == ErrorCode.REBALANCE_IN_PROGRESS
