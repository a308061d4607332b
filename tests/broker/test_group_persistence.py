"""KIP-848 consumer, share and streams groups kept in ``__consumer_offsets``: a restarted (or
killed) coordinator loads them back, members keep their ids, epochs and assignments.

One broker for the module, killed (-9) and restarted in place between the steps.
"""

from __future__ import annotations

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

from test_cluster import bootstrap, cluster, create, leaders  # noqa: F401
from test_features import KAFKA_4_4, java
from test_group_clients import KIP848, Member, produce, wait_for
from test_group_consumer_protocol import consumer_describe, hb, parts
from test_group_protocol import FAST, commit, commit_errors, create_topic
from test_moves import _kafka_tool
from test_share_admin import delete_group, describe_offsets
from test_share_fetch import put, topic_id
from test_share_groups import described, shb
from test_share_groups import parts as share_parts
from test_streams_groups import described as sdescribed
from test_streams_groups import shb as sshb
from test_streams_groups import tasks as stasks
from test_streams_groups import topology as streams_topology

pytestmark = pytest.mark.timeout(120)

SETTINGS = {**FAST, "group.consumer.session.timeout.ms": "45000",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.streams.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from headrace.broker.tools.process import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("persist"), SETTINGS).start()
    yield b
    b.kill()


def crash(broker):
    broker.kill()
    broker.start()


def test_consumer_group_members_keep_ids_epochs_and_assignments(broker):
    with WireClient(broker.port) as c:
        create_topic(c, "cp", 4)
        a = hb(c, "m-a", 0, ["cp"], group="cgp")
        tid = a.assignment.topic_partitions[0].topic_id
        a = hb(c, "m-a", a.member_epoch, owned={tid: [0, 1, 2, 3]}, group="cgp")
        d = hb(c, "m-d", 0, ["cp"], group="cgp")
        a3 = hb(c, "m-a", a.member_epoch, group="cgp")
        kept = parts(a3)
        a4 = hb(c, "m-a", a.member_epoch, owned={tid: kept}, group="cgp")
        d2 = hb(c, "m-d", d.member_epoch, group="cgp")
        mine = parts(d2)
        assert sorted(mine + kept) == [0, 1, 2, 3]
        d3 = hb(c, "m-d", d2.member_epoch, owned={tid: mine}, group="cgp")
        assert d3.error_code == 0
        assert commit_errors(commit(c, "cgp", [("cp", 0, 7)], a4.member_epoch, "m-a")) == [0]
        before = consumer_describe(c, "cgp")
        assert before.group_state == "Stable"
    crash(broker)
    with WireClient(broker.port) as c:
        loaded = consumer_describe(c, "cgp")  # before any member heartbeats
        assert loaded.error_code == 0 and loaded.group_state == "Stable"
        assert loaded.group_epoch == before.group_epoch
        assert loaded.assignment_epoch == before.assignment_epoch

        def members(described):
            return {
                m.member_id: (m.member_epoch, sorted(
                    p for t in m.assignment.topic_partitions for p in t.partitions))
                for m in described.members
            }

        assert members(loaded) == members(before)
        # the members go on with their epochs: no rebalance, the assignment sent again
        a5 = hb(c, "m-a", a4.member_epoch, owned={tid: kept}, group="cgp")
        assert a5.error_code == 0 and a5.member_epoch == a4.member_epoch
        assert parts(a5) == kept
        d4 = hb(c, "m-d", d3.member_epoch, owned={tid: mine}, group="cgp")
        assert d4.error_code == 0 and d4.member_epoch == d3.member_epoch
        O = messages.OffsetFetchRequest
        fetched = c.request(ApiKey.OFFSET_FETCH, 8, O(groups=[O.OffsetFetchRequestGroup(
            group_id="cgp", topics=None)])).groups[0]
        assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics
                for p in t.partitions] == [("cp", 0, 7)]
        # a member leaves: its records get tombstones
        assert hb(c, "m-a", -1, group="cgp").error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert [m.member_id for m in consumer_describe(c, "cgp").members] == ["m-d"]
        assert hb(c, "m-a", a5.member_epoch, group="cgp").error_code == (
            ErrorCode.UNKNOWN_MEMBER_ID)
        # the last one leaves, the group is deleted: nothing comes back
        assert hb(c, "m-d", -1, group="cgp").error_code == 0
        D = messages.DeleteGroupsRequest
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, D(groups_names=["cgp"])).results
        assert deleted[0].error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert consumer_describe(c, "cgp").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def members_of(port, group):
    """member id -> (epoch, its partitions), from ConsumerGroupDescribe."""
    with WireClient(port) as c:
        d = consumer_describe(c, group)
    return {m.member_id: (m.member_epoch, sorted(
        p for t in m.assignment.topic_partitions for p in t.partitions)) for m in d.members}


def read_twice_past_a_commit(members) -> list:
    """Records read again below an offset committed for their partition before."""
    committed: dict[int, int] = {}
    again = []
    events = sorted((e for m in members for e in list(m.events)), key=lambda e: e["t"])
    for e in events:
        for p, o in e.get("records", ()):
            if o < committed.get(p, 0):
                again.append((p, o))
        for p, o in e.get("committed", {}).items():
            committed[int(p)] = max(committed.get(int(p), 0), o)
    return again


def test_confluent_kip848_consumers_carry_on_over_a_coordinator_restart(broker, tmp_path):
    """confluent-kafka with group.protocol=consumer: the lone broker is killed (-9) and
    started again; the members keep their ids, epochs and partitions (no rebalance: no
    revocation), and no record is read again past a commit."""
    bootstrap, topic, n, per = broker.bootstrap, "cf848", 4, 30
    broker.create_topic(topic, n)
    produce(bootstrap, topic, n, per)
    x = Member(tmp_path, "confluent-kafka", bootstrap, topic, "g848p", KIP848)
    y = Member(tmp_path, "confluent-kafka", bootstrap, topic, "g848p", KIP848)
    try:
        def settled():
            got = members_of(broker.port, "g848p")
            return len(got) == 2 and sorted(p for _, ps in got.values() for p in ps) == list(
                range(n)) and x.assigned and y.assigned and len(x.assigned) == 2
        wait_for(settled, 40, "two members with two partitions each")
        wait_for(lambda: len({tuple(r) for m in (x, y) for e in m.of("records")
                              for r in e["records"]}) == n * per, 30, "every record read")
        before = members_of(broker.port, "g848p")
        revoked = len(x.of("on_revoke")) + len(y.of("on_revoke"))
        crash(broker)
        produce(bootstrap, topic, n, per, start=per)
        wait_for(lambda: len({tuple(r) for m in (x, y) for e in m.of("records")
                              for r in e["records"]}) == n * per * 2, 40, "every record read")
        assert members_of(broker.port, "g848p") == before
        assert len(x.of("on_revoke")) + len(y.of("on_revoke")) == revoked
        assert read_twice_past_a_commit([x, y]) == []
    finally:
        for m in (x, y):
            m.kill()


def test_kip848_consumers_carry_on_when_their_coordinator_is_killed(cluster, tmp_path):
    """Three brokers: the coordinator of a KIP-848 group (the leader of its partition of
    ``__consumer_offsets``, three replicas) is killed (-9); the new leader loads the group
    and its members go on with their ids, epochs and partitions, no record read again past
    a commit."""
    from headrace.broker.coordinator.group.group_offsets import partition_for

    brokers = cluster(3, **{"group.consumer.session.timeout.ms": 45000,
                            "group.consumer.heartbeat.interval.ms": 500,
                            "offsets.topic.num.partitions": 3, "replica.lag.time.max.ms": 3000})
    topic, group, n, per = "kill848", "g848k", 4, 30
    create(brokers, topic, n, replication_factor=3)
    servers = bootstrap(brokers)
    produce(servers, topic, n, per)

    def coordinator(alive):
        leader = leaders(alive[0], "__consumer_offsets").get(partition_for(group, 3), -1)
        return next((b for i, b in enumerate(brokers, 1) if i == leader and b in alive), None)

    x = Member(tmp_path, "confluent-kafka", servers, topic, group, KIP848)
    y = Member(tmp_path, "confluent-kafka", servers, topic, group, KIP848)
    try:
        def settled(alive):
            b = coordinator(alive)
            got = members_of(b.port, group) if b else {}
            return len(got) == 2 and sorted(p for _, ps in got.values() for p in ps) == list(
                range(n)) and x.assigned and y.assigned and len(x.assigned) == 2
        wait_for(lambda: settled(brokers), 60, "two members with two partitions each")
        wait_for(lambda: x.of("committed") and y.of("committed"), 30, "commits")
        victim = coordinator(brokers)
        before = members_of(victim.port, group)
        revoked = len(x.of("on_revoke")) + len(y.of("on_revoke"))
        victim.kill()
        alive = [b for b in brokers if b is not victim]
        wait_for(lambda: coordinator(alive) is not None, 30, "a new coordinator")
        produce(servers, topic, n, per, start=per)
        wait_for(lambda: len({tuple(r) for m in (x, y) for e in m.of("records")
                              for r in e["records"]}) == n * per * 2, 60, "every record read")
        assert members_of(coordinator(alive).port, group) == before
        assert len(x.of("on_revoke")) + len(y.of("on_revoke")) == revoked
        assert read_twice_past_a_commit([x, y]) == []
    finally:
        for m in (x, y):
            m.kill()


def test_a_share_group_and_its_state_come_back_and_later_partitions_start_at_0(broker):
    """A share group over restarts: ShareGroupDescribe and DescribeShareGroupOffsets answer
    from the loaded group before any member heartbeats, the member carries on, and DeleteGroups
    after a restart that nobody joined since deletes its state at the share coordinator. The
    group coordinator initializes a new topic's partitions with start offset -1 (the leader's
    reset policy decides) and a partition added later with 0, as Kafka 4.4."""
    with WireClient(broker.port) as c:
        create_topic(c, "sq", 1)
        tid = topic_id(c, "sq")
        put(c, "sq", [b"a", b"b"])
        joined = shb(c, "s-a", 0, ["sq"], group="sgp")
        assert joined.error_code == 0 and share_parts(joined) == [0]
        assert describe_offsets(c, "sgp") == {"sq": (tid, [(0, -1, -1, 0)])}
        R = messages.CreatePartitionsRequest
        r = c.request(ApiKey.CREATE_PARTITIONS, 3, R(topics=[R.CreatePartitionsTopic(
            name="sq", count=2, assignments=None)], timeout_ms=5000, validate_only=False))
        assert r.results[0].error_code == 0
        grown = shb(c, "s-a", joined.member_epoch, group="sgp")
        assert grown.member_epoch > joined.member_epoch and share_parts(grown) == [0, 1]
        offsets = describe_offsets(c, "sgp")
        assert offsets == {"sq": (tid, [(0, -1, -1, 0), (1, 0, 0, 0)])}
        (before,) = described(c, "sgp")
    crash(broker)
    with WireClient(broker.port) as c:
        (loaded,) = described(c, "sgp")  # before any heartbeat
        assert (loaded.group_state, loaded.group_epoch, loaded.assignment_epoch) == (
            before.group_state, before.group_epoch, before.assignment_epoch)
        assert [(m.member_id, m.member_epoch, [(t.topic_name, t.partitions)
                                                for t in m.assignment.topic_partitions])
                for m in loaded.members] == [("s-a", grown.member_epoch, [("sq", [0, 1])])]
        assert describe_offsets(c, "sgp") == offsets
        again = shb(c, "s-a", grown.member_epoch, group="sgp")
        assert again.error_code == 0 and again.member_epoch == grown.member_epoch
        assert shb(c, "s-a", -1, group="sgp").error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert delete_group(c, "sgp") == ErrorCode.NONE  # nobody joined since the restart
        assert describe_offsets(c, "sgp", topics=[("sq", [0, 1])]) == {
            "sq": (tid, [(0, -1, -1, 0), (1, -1, -1, 0)])}  # the state went with it
    crash(broker)
    with WireClient(broker.port) as c:
        assert described(c, "sgp")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_streams_group_comes_back_with_its_topology_members_and_tasks(broker):
    """A streams group over restarts: described as it was before any member heartbeats (its
    topology, epochs, each member's tasks and target), the members carry on with their
    epochs and tasks, a member's leave and the group's deletion stay done."""
    def state(g):
        def ids(tasks):
            return sorted((t.subtopology_id, p) for t in tasks for p in t.partitions)
        return (g.group_state, g.group_epoch, g.assignment_epoch,
                [s.subtopology_id for s in g.topology.subtopologies],
                sorted((m.member_id, m.member_epoch, ids(m.assignment.active_tasks),
                        ids(m.target_assignment.active_tasks)) for m in g.members))

    top = streams_topology(sources=("sinput",))
    with WireClient(broker.port) as c:
        create_topic(c, "sinput", 4)
        create_topic(c, "app-counts-changelog", 4)
        a = sshb(c, "a", 0, group="sapp", top=top)
        assert stasks(a.active_tasks) == [("0", p) for p in range(4)]
        b = sshb(c, "b", 0, group="sapp", top=top)
        a = sshb(c, "a", a.member_epoch, group="sapp", active=[("0", [0, 1, 2, 3])])
        kept = [p for _, p in stasks(a.active_tasks)]
        a = sshb(c, "a", a.member_epoch, group="sapp", active=[("0", kept)])
        b = sshb(c, "b", b.member_epoch, group="sapp", active=[])
        mine = [p for _, p in stasks(b.active_tasks)]
        b = sshb(c, "b", b.member_epoch, group="sapp", active=[("0", mine)])
        (before,) = sdescribed(c, "sapp")
        assert before.group_state == "Stable" and sorted(kept + mine) == [0, 1, 2, 3]
    crash(broker)
    with WireClient(broker.port) as c:
        (loaded,) = sdescribed(c, "sapp")
        assert state(loaded) == state(before)
        a2 = sshb(c, "a", a.member_epoch, group="sapp", active=[("0", kept)])
        b2 = sshb(c, "b", b.member_epoch, group="sapp", active=[("0", mine)])
        assert (a2.error_code, a2.member_epoch, b2.error_code, b2.member_epoch) == (
            0, a.member_epoch, 0, b.member_epoch)
        assert sdescribed(c, "sapp")[0].group_epoch == before.group_epoch  # no rebalance
        assert sshb(c, "b", -1, group="sapp").error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert [m.member_id for m in sdescribed(c, "sapp")[0].members] == ["a"]
        assert sshb(c, "a", -1, group="sapp").error_code == 0
        D = messages.DeleteGroupsRequest
        assert c.request(ApiKey.DELETE_GROUPS, 2, D(groups_names=["sapp"])).results[
            0].error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert sdescribed(c, "sapp")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


@java
def test_kafkas_dump_log_segments_decodes_the_groups_records(broker):
    """Kafka 4.4's kafka-dump-log (``--offsets-decoder``, Kafka's own record serde) reads
    every record the tests above left in ``__consumer_offsets``: the groups' records are
    Kafka's bytes."""
    import re

    with WireClient(broker.port) as c:  # at least one group of each kind, whatever ran before
        create_topic(c, "dumped", 1)
        assert hb(c, "dump-c", 0, ["dumped"], group="dump-c").error_code == 0
        assert shb(c, "dump-s", 0, ["dumped"], group="dump-s").error_code == 0
        assert sshb(c, "dump-x", 0, group="dump-x",
                    top=streams_topology(sources=("dumped",), changelog=False)).error_code == 0
    logs = sorted(str(p) for p in broker.data_dir.glob("__consumer_offsets-*/*.log"))
    done = _kafka_tool("org.apache.kafka.tools.DumpLogSegments",
                       ["--files", ",".join(logs), "--offsets-decoder"], version=KAFKA_4_4)
    assert done.returncode == 0, done.stderr
    records = [line for line in done.stdout.splitlines() if line.startswith("| offset:")]
    assert records and all(" key: {" in line for line in records), [
        line for line in records if " key: {" not in line][:3]
    types = {int(t) for t in re.findall(r'key: \{"type":"(\d+)"', done.stdout)}
    assert {3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 17, 19, 20, 21, 22, 23} <= types
