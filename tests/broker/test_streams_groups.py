"""KIP-1071 streams groups at the group coordinator, on the wire: StreamsGroupHeartbeat with
a topology (missing source topics, internal topics created by the broker), the sticky
assignor spreading tasks and standbys, revocation before a task moves, fencing, leaving,
sessions, the bounds (``group.streams.max.size``, ``group.streams.max.topology.bytes``),
``streams.version`` 0, StreamsGroupDescribe, ListGroups, DeleteGroups and offset commits with
member epochs."""

from __future__ import annotations

import time

from kafkawire import WireClient
from test_features import update
from test_group_configs import alter
from test_group_protocol import FAST, commit, commit_errors, create_topic, fetch_offsets

from headrace.protocol import ApiKey, ErrorCode, messages

H = messages.StreamsGroupHeartbeatRequest
D = messages.StreamsGroupDescribeRequest
QUICK = {**FAST, "group.streams.initial.rebalance.delay.ms": "0",
         "group.streams.min.session.timeout.ms": "1000", "group.streams.session.timeout.ms": "1500",
         "group.streams.min.heartbeat.interval.ms": "100", "group.streams.heartbeat.interval.ms": "200"}
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, ASSIGNMENT_DELAYED = 1, 3, 5


def topology(epoch=1, sources=("input",), changelog=True, repartition=False):
    """Word count's shape: subtopology 0 reads the input (and, with ``repartition``, writes
    the repartition topic that subtopology 1 reads and counts into a store)."""
    cl = [H.TopicInfo(name="app-counts-changelog", partitions=0, replication_factor=0,
                      topic_configs=[H.KeyValue(key="cleanup.policy", value="compact")])] if changelog else []
    if not repartition:
        subs = [H.Subtopology(subtopology_id="0", source_topics=list(sources), source_topic_regex=[],
                              state_changelog_topics=cl, repartition_sink_topics=[],
                              repartition_source_topics=[], copartition_groups=[])]
    else:
        rep = H.TopicInfo(name="app-by-word-repartition", partitions=0, replication_factor=0,
                          topic_configs=[H.KeyValue(key="cleanup.policy", value="delete")])
        subs = [H.Subtopology(subtopology_id="0", source_topics=list(sources), source_topic_regex=[],
                              state_changelog_topics=[], repartition_sink_topics=[rep.name],
                              repartition_source_topics=[], copartition_groups=[]),
                H.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[],
                              state_changelog_topics=cl, repartition_sink_topics=[],
                              repartition_source_topics=[rep], copartition_groups=[])]
    return H.Topology(epoch=epoch, subtopologies=subs)


def shb(c, member_id, epoch, group="app", process=None, top=None, active=None, standby=None,
        instance_id=None, endpoint_epoch=-1, version=1):
    owned = None if active is None else [H.TaskIds(subtopology_id=s, partitions=ps) for s, ps in active]
    stand = None if active is None else [H.TaskIds(subtopology_id=s, partitions=ps) for s, ps in standby or ()]
    return c.request(ApiKey.STREAMS_GROUP_HEARTBEAT, version, H(
        group_id=group, member_id=member_id, member_epoch=epoch, endpoint_information_epoch=endpoint_epoch,
        instance_id=instance_id, rebalance_timeout_ms=5000 if epoch == 0 else -1,
        topology=(top or topology()) if epoch == 0 else None,
        active_tasks=owned, standby_tasks=stand, warmup_tasks=None if active is None else [],
        process_id=process or member_id if epoch == 0 else None))


def tasks(ids):
    return None if ids is None else sorted((t.subtopology_id, p) for t in ids for p in t.partitions)


def statuses(r):
    return [s.status_code for s in r.status or ()]


def described(c, *groups):
    return c.request(ApiKey.STREAMS_GROUP_DESCRIBE, 0, D(group_ids=list(groups),
                                                         include_authorized_operations=False)).groups


def wait_topic(c, name, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        r = c.request(ApiKey.METADATA, 12, messages.MetadataRequest(
            topics=[messages.MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False))
        if r.topics[0].error_code == 0:
            return len(r.topics[0].partitions)
        time.sleep(0.1)
    raise AssertionError(f"{name} not created")


def test_topology_waits_for_its_source_topic_then_its_changelog_is_created(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        r = shb(c, "m1", 0)
        assert r.error_code == 0 and r.member_epoch == 2 and r.heartbeat_interval_ms == 200
        assert statuses(r) == [MISSING_SOURCE_TOPICS] and r.status[0].status_detail == "Source topics input are missing."
        assert tasks(r.active_tasks) == []
        assert described(c, "app")[0].group_state == "NotReady"
        create_topic(c, "input", 4)
        r = shb(c, "m1", 2, active=[])
        assert statuses(r) == [MISSING_INTERNAL_TOPICS], r
        assert "Internal topics are missing: app-counts-changelog" in r.status[0].status_detail
        assert wait_topic(c, "app-counts-changelog") == 4  # as many partitions as tasks
        r = shb(c, "m1", r.member_epoch, active=[])
        assert statuses(r) == [] and r.member_epoch == 4
        assert tasks(r.active_tasks) == [("0", p) for p in range(4)]
        g = described(c, "app")[0]
        assert (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == ("Stable", 4, 4, None)
        assert g.topology.subtopologies[0].state_changelog_topics[0].partitions == 4


def test_tasks_move_only_after_they_are_revoked(broker_factory):
    b = broker_factory(QUICK)
    with WireClient(b.port) as c:
        create_topic(c, "input", 4)
        create_topic(c, "app-counts-changelog", 4)
        a = shb(c, "a", 0)
        assert tasks(a.active_tasks) == [("0", p) for p in range(4)]
        owned_a = [("0", [0, 1, 2, 3])]
        bb = shb(c, "b", 0)
        assert bb.member_epoch == 3 and tasks(bb.active_tasks) == []  # a still holds them all
        a = shb(c, "a", a.member_epoch, active=owned_a)
        kept = tasks(a.active_tasks)
        assert len(kept) == 2 and a.member_epoch == 2  # revoke two first, epoch stays
        bb = shb(c, "b", bb.member_epoch, active=[])
        assert tasks(bb.active_tasks) is None  # still unreleased
        a = shb(c, "a", a.member_epoch, active=[("0", [p for _, p in kept])])
        assert a.member_epoch == 3
        bb = shb(c, "b", bb.member_epoch, active=[])
        assert sorted(tasks(bb.active_tasks) + kept) == [("0", p) for p in range(4)]
        assert described(c, "app")[0].group_state == "Stable"
        # an offset commit needs the member's epoch; an older one only for tasks held since
        assert commit_errors(commit(c, "app", [("input", kept[0][1], 5)], a.member_epoch, "a")) == [0]
        assert commit_errors(commit(c, "app", [("input", kept[0][1], 5)], 9, "a")) == [ErrorCode.STALE_MEMBER_EPOCH]
        assert commit_errors(commit(c, "app", [("input", 0, 5)], 1, "nobody")) == [ErrorCode.UNKNOWN_MEMBER_ID]
        # leaving gives the tasks back at once
        assert shb(c, "a", -1).member_epoch == -1
        bb = shb(c, "b", bb.member_epoch, active=[("0", [p for _, p in tasks(bb.active_tasks)])])
        assert tasks(bb.active_tasks) == [("0", p) for p in range(4)]


def test_streams_version_0_turns_streams_groups_off(broker_factory):
    b = broker_factory(QUICK)
    assert update(b.port, 1, 0, upgrade_type=2, feature="streams.version").error_code == ErrorCode.NONE
    with WireClient(b.port) as c:
        create_topic(c, "input", 2)
        r = shb(c, "m1", 0)
        assert (r.error_code, r.error_message) == (
            ErrorCode.UNSUPPORTED_VERSION, "Streams groups are off in this cluster (streams.version 0).")
        assert described(c, "app")[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    assert update(b.port, 1, 1, feature="streams.version").error_code == ErrorCode.NONE
    with WireClient(b.port) as c:
        assert shb(c, "m1", 0).error_code == ErrorCode.NONE


def test_group_streams_max_size_refuses_members_past_it(broker_factory):
    b = broker_factory({**QUICK, "group.streams.max.size": "2"})
    with WireClient(b.port) as c:
        create_topic(c, "input", 4)
        create_topic(c, "app-counts-changelog", 4)
        a, bb = shb(c, "a", 0), shb(c, "b", 0)
        assert a.error_code == bb.error_code == ErrorCode.NONE
        for i in range(200):  # a hostile client joining again and again gets nowhere
            r = shb(c, f"x{i}", 0)
            assert (r.error_code, r.error_message) == (
                ErrorCode.GROUP_MAX_SIZE_REACHED, "The streams group has reached its maximum capacity of 2 members.")
        g = described(c, "app")[0]
        assert sorted(m.member_id for m in g.members) == ["a", "b"] and g.group_epoch == a.member_epoch + 1
        # a member already in keeps heartbeating; one leaving makes room
        assert shb(c, "b", bb.member_epoch, active=[]).error_code == ErrorCode.NONE
        assert shb(c, "a", -1).error_code == ErrorCode.NONE
        assert shb(c, "c", 0).error_code == ErrorCode.NONE


def test_a_topology_over_group_streams_max_topology_bytes_is_refused_before_any_work(broker_factory):
    b = broker_factory({**QUICK, "group.streams.max.topology.bytes": "1000"})
    with WireClient(b.port) as c:
        create_topic(c, "input", 1)
        fits = topology(sources=[f"t{i:03d}" for i in range(100)], changelog=False)  # 400 bytes
        r = shb(c, "m1", 0, top=fits)
        assert r.error_code == ErrorCode.NONE and statuses(r) == [MISSING_SOURCE_TOPICS]
        # hostile: 300,000 source topics (2 MB of names), a 2 MB topic config: refused at once
        many = topology(sources=[f"t{i:06d}" for i in range(300_000)], changelog=False)
        big = topology()
        big.subtopologies[0].state_changelog_topics[0].topic_configs.append(H.KeyValue(key="x", value="y" * 2_000_000))
        for member, top in (("m2", many), ("m3", big)):
            start = time.monotonic()
            r = shb(c, member, 0, group="other", top=top)
            assert r.error_code == ErrorCode.STREAMS_INVALID_TOPOLOGY, r
            assert r.error_message.startswith("The topology takes ") and r.error_message.endswith(
                "bytes, more than group.streams.max.topology.bytes (1000).")
            assert time.monotonic() - start < 5
        # no group was made for them; a member of the group with a big topology is refused too
        assert described(c, "other")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert shb(c, "m4", 0, top=many).error_code == ErrorCode.STREAMS_INVALID_TOPOLOGY
        assert [m.member_id for m in described(c, "app")[0].members] == ["m1"]


def test_list_groups_and_delete_groups_of_a_streams_group(broker_factory):
    b = broker_factory(QUICK)
    LG, DG = messages.ListGroupsRequest, messages.DeleteGroupsRequest
    with WireClient(b.port) as c:
        create_topic(c, "input", 2)
        create_topic(c, "app-counts-changelog", 2)
        r = shb(c, "m1", 0)
        assert commit_errors(commit(c, "app", [("input", 0, 7)], r.member_epoch, "m1", version=9)) == [0]

        def listed(states=(), types=()):
            got = c.request(ApiKey.LIST_GROUPS, 5, LG(states_filter=list(states), types_filter=list(types)))
            return [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in got.groups]

        assert listed() == [("app", "streams", "Stable", "streams")]
        assert listed(types=["streams"]) == listed()
        assert listed(types=["consumer", "classic"]) == []
        assert listed(states=["Empty"]) == []
        # DeleteGroups: not while it has members (NON_EMPTY_GROUP), then its offsets go too
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, DG(groups_names=["app"])).results[0]
        assert deleted.error_code == ErrorCode.NON_EMPTY_GROUP
        assert shb(c, "m1", -1).error_code == ErrorCode.NONE
        assert listed(states=["Empty"]) == [("app", "streams", "Empty", "streams")]
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, DG(groups_names=["app"])).results[0]
        assert deleted.error_code == ErrorCode.NONE
        assert listed() == []
        assert described(c, "app")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert fetch_offsets(c, "app", [("input", [0])]) == {("input", 0): -1}
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, DG(groups_names=["app"])).results[0]
        assert deleted.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # the id is free for another kind of group
        assert commit_errors(commit(c, "app", [("input", 0, 3)])) == [0]
        assert listed() == [("app", "", "Empty", "classic")]


def test_offset_commits_of_a_member_with_an_older_epoch(broker_factory):
    """Kafka's checks: a member committing with an epoch older than its own may commit the
    partitions of tasks it was given at that epoch or before; one other partition fails the
    whole commit (OffsetCommit: STALE_MEMBER_EPOCH; TxnOffsetCommit before v6:
    ILLEGAL_GENERATION) and nothing is written. OffsetCommit before v9 is refused."""
    from test_transactions_wire import init_pid
    b = broker_factory(QUICK)
    T = messages.TxnOffsetCommitRequest
    with WireClient(b.port) as c:
        create_topic(c, "input", 4)
        create_topic(c, "app-counts-changelog", 4)
        a = shb(c, "a", 0)
        old = a.member_epoch
        assert tasks(a.active_tasks) == [("0", p) for p in range(4)]
        bb = shb(c, "b", 0)
        a = shb(c, "a", old, active=[("0", [0, 1, 2, 3])])  # two tasks to give back
        kept = [p for _, p in tasks(a.active_tasks)]
        a = shb(c, "a", a.member_epoch, active=[("0", kept)])
        assert a.member_epoch > old
        bb = shb(c, "b", bb.member_epoch, active=[])
        moved = [p for _, p in tasks(bb.active_tasks)]
        assert sorted(kept + moved) == [0, 1, 2, 3]
        # a's tasks held since ``old``: fine with ``old``; b's new tasks are not a's
        assert commit_errors(commit(c, "app", [("input", kept[0], 5)], old, "a")) == [0]
        both = [("input", kept[1], 6), ("input", moved[0], 6)]
        assert commit_errors(commit(c, "app", both, old, "a")) == [ErrorCode.STALE_MEMBER_EPOCH] * 2
        assert commit_errors(commit(c, "app", [("nosuch", 0, 6), *both], old, "a")) == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.STALE_MEMBER_EPOCH]
        # b's tasks were given at b's current epoch: an older one of b's is refused for them
        assert commit_errors(commit(c, "app", [("input", moved[0], 7)], bb.member_epoch - 1, "b")) == [
            ErrorCode.STALE_MEMBER_EPOCH]
        assert commit_errors(commit(c, "app", [("input", moved[0], 7)], bb.member_epoch, "b")) == [0]
        assert fetch_offsets(c, "app", [("input", [kept[0], kept[1], moved[0]])]) == {
            ("input", kept[0]): 5, ("input", kept[1]): -1, ("input", moved[0]): 7}
        # OffsetCommit before v9 is not for streams members; nor a commit without a member
        assert commit_errors(commit(c, "app", [("input", kept[0], 8)], a.member_epoch, "a", version=8)) == [
            ErrorCode.UNSUPPORTED_VERSION]
        assert commit_errors(commit(c, "app", [("input", kept[0], 8)])) == [ErrorCode.UNKNOWN_MEMBER_ID]
        # TxnOffsetCommit (v5: the group's offsets partition joins the transaction itself)
        err, pid, epoch = init_pid(c, "tx")
        assert err == 0

        def txn_commit(parts, member_epoch, member="a"):
            r = c.request(ApiKey.TXN_OFFSET_COMMIT, 5, T(
                transactional_id="tx", group_id="app", producer_id=pid, producer_epoch=epoch,
                generation_id_or_member_epoch=member_epoch, member_id=member, group_instance_id=None,
                topics=[T.TxnOffsetCommitRequestTopic(name="input", partitions=[
                    T.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=9,
                                                      committed_metadata="") for p in parts])]))
            return [p.error_code for t in r.topics for p in t.partitions]

        assert txn_commit([kept[1], moved[0]], old) == [ErrorCode.ILLEGAL_GENERATION] * 2
        assert txn_commit([kept[0]], a.member_epoch + 1) == [ErrorCode.ILLEGAL_GENERATION]
        assert txn_commit([kept[0]], old) == [0]


def test_a_hostile_partition_count_for_an_internal_topic_is_refused_by_max_broker_partitions(broker_factory):
    b = broker_factory({**QUICK, "max.broker.partitions": "1000"})
    with WireClient(b.port) as c:
        create_topic(c, "input", 2)
        top = topology(repartition=True)
        top.subtopologies[1].repartition_source_topics[0].partitions = 2**31 - 1
        r = shb(c, "m1", 0, top=top)
        deadline = time.time() + 10
        while "Creation failed" not in (r.status[0].status_detail if r.status else ""):
            assert time.time() < deadline, r
            time.sleep(0.1)
            r = shb(c, "m1", r.member_epoch, top=top, active=[])
        assert statuses(r) == [MISSING_INTERNAL_TOPICS]
        assert "app-by-word-repartition (" in r.status[0].status_detail
        assert "max.broker.partitions is 1000" in r.status[0].status_detail, r.status[0].status_detail
        assert tasks(r.active_tasks) in (None, [])
        md = c.request(ApiKey.METADATA, 12, messages.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        # no internal topic of the application (the group's __consumer_offsets holds its records)
        assert sorted(t.name for t in md.topics) == ["__consumer_offsets", "input"]
