"""The share-group offsets admin APIs on the wire (KIP-932): DescribeShareGroupOffsets (90)
with the lag (KIP-1226), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92);
DeleteGroups deleting a share group's state, on a broker on its own. Kafka 4.4's
``kafka-share-groups`` describing, resetting and deleting offsets is the compatibility suite's
(compat/kafka-tools, ``kafka-share-groups``)."""

from __future__ import annotations

import uuid

from kafkawire import WireClient
from test_group_protocol import FAST, create_topic
from test_share_fetch import ACCEPT, REJECT, acquired, put, share_ack, share_fetch, topic_id
from test_share_groups import shb

from headrace.protocol import ApiKey, ErrorCode, messages

DQ = messages.DescribeShareGroupOffsetsRequest
AQ = messages.AlterShareGroupOffsetsRequest
XQ = messages.DeleteShareGroupOffsetsRequest
ZERO = uuid.UUID(int=0)


def describe_offsets(c, group="sg", topics=None, version=1):
    """{topic name: (topic id, [(partition, start offset, lag, error)])} of one group."""
    asked = None if topics is None else [
        DQ.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics]
    r = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, DQ(groups=[
        DQ.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=asked)]))
    (g,) = r.groups
    assert g.error_code == 0, g
    return {t.topic_name: (t.topic_id, [(p.partition_index, p.start_offset, p.lag, p.error_code)
                                        for p in t.partitions]) for t in g.topics}


def alter(c, offsets, group="sg"):
    """offsets: {topic: [(partition, start offset)]}."""
    r = c.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, AQ(group_id=group, topics=[
        AQ.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
            AQ.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps])
        for t, ps in offsets.items()]))
    return r


def delete_offsets(c, topics, group="sg"):
    return c.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, XQ(
        group_id=group, topics=[XQ.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))


def delete_group(c, group="sg"):
    r = c.request(ApiKey.DELETE_GROUPS, 2, messages.DeleteGroupsRequest(groups_names=[group]))
    return r.results[0].error_code


def test_describe_alter_and_delete_offsets_on_the_wire(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "q", 1)
        create_topic(c, "other", 1)
        tid = topic_id(c, "q")
        assert shb(c, "m", 0, ["q"]).error_code == 0
        # assigned, not fetched yet: the leader has made no state
        assert describe_offsets(c) == {"q": (tid, [(0, -1, -1, 0)])}
        assert acquired(share_fetch(c, "m", 0, tid)) == []  # starts at the end (latest)
        put(c, "q", [b"a", b"b", b"c", b"d", b"e"])
        assert len(acquired(share_fetch(c, "m", 1, tid, max_wait=2000))) == 5
        r = share_ack(c, "m", 2, tid, [(0, 1, [ACCEPT]), (3, 3, [REJECT])])
        assert r.responses[0].partitions[0].error_code == 0
        # start 2; 3 is done: lag = 5 - 2 - 1
        assert describe_offsets(c) == {"q": (tid, [(0, 2, 2, 0)])}
        assert describe_offsets(c, topics=[("q", [0]), ("nope", [0, 1])]) == {
            "q": (tid, [(0, 2, 2, 0)]), "nope": (ZERO, [(0, -1, -1, 0), (1, -1, -1, 0)])}
        assert describe_offsets(c, topics=[]) == {}
        # a hostile request: 100000 partitions of which one exists, and one partition 5000 times
        T = DQ.DescribeShareGroupOffsetsRequestTopic
        r = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, DQ(groups=[DQ.DescribeShareGroupOffsetsRequestGroup(
            group_id="sg", topics=[T(topic_name="q", partitions=list(range(100_000))),
                                   T(topic_name="q", partitions=[0] * 5000)])]))
        wide, deep = r.groups[0].topics
        assert [(p.start_offset, p.lag) for p in wide.partitions[:2]] == [(2, 2), (-1, -1)]
        assert len(wide.partitions) == 100_000 and {(p.start_offset, p.lag) for p in deep.partitions} == {(2, 2)}
        v0 = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, DQ(groups=[
            DQ.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None)]))
        assert v0.groups[0].topics[0].partitions[0].start_offset == 2

        busy = alter(c, {"q": [(0, 4)]})
        assert (busy.error_code, busy.error_message, busy.responses) == (
            ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", [])
        assert shb(c, "m", -1).error_code == 0
        r = alter(c, {"q": [(0, 4), (7, 0)], "nope": [(0, 0)]})
        assert r.error_code == 0
        answered = {(t.topic_name, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert answered == {("q", 0): 0, ("q", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe_offsets(c) == {"q": (tid, [(0, 4, 1, 0)])}

    with WireClient(b.port) as c:  # a new member gets what is past the new start offset
        assert shb(c, "n", 0, ["q"]).error_code == 0
        assert [(o, v, n) for o, v, n in acquired(share_fetch(c, "n", 0, tid, max_wait=2000))] == [
            (4, b"e", 1)]
        assert shb(c, "n", -1).error_code == 0
        r = delete_offsets(c, ["q", "nope", "other"])
        got = {t.topic_name: (t.topic_id, t.error_code, t.error_message) for t in r.responses}
        assert r.error_code == 0 and got == {
            "q": (tid, 0, None),
            "nope": (ZERO, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."),
            "other": (ZERO, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete.")}
        assert describe_offsets(c) == {}
        assert describe_offsets(c, topics=[("q", [0])]) == {"q": (tid, [(0, -1, -1, 0)])}  # gone
        r = delete_offsets(c, ["q"], group="zz")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group zz not found.")
        # an unknown group: nothing to describe; altered, it is made
        assert describe_offsets(c, group="zz") == {}
        assert alter(c, {"q": [(0, 1)]}, group="zz").error_code == 0
        assert describe_offsets(c, group="zz") == {"q": (tid, [(0, 1, 4, 0)])}


def test_another_kind_of_group_and_the_share_version(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "q", 1)
        from test_group_consumer_protocol import hb
        assert hb(c, "m", 0, ["q"], group="cg").error_code == 0
        r = alter(c, {"q": [(0, 0)]}, group="cg")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        r = delete_offsets(c, ["q"], group="cg")
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    from test_features import update
    assert update(b.port, 2, 0, upgrade_type=2, feature="share.version").error_code == 0
    with WireClient(b.port) as c:
        assert alter(c, {"q": [(0, 0)]}).error_code == ErrorCode.UNSUPPORTED_VERSION
        assert delete_offsets(c, ["q"]).error_code == ErrorCode.UNSUPPORTED_VERSION
        r = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, DQ(groups=[
            DQ.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None)]))
        assert r.groups[0].error_code == ErrorCode.UNSUPPORTED_VERSION


def test_the_offsets_apis_need_the_group_and_topic_rights(broker_factory):
    b = broker_factory({**FAST, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with WireClient(b.port) as c:  # an anonymous client without ACLs
        r = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, DQ(groups=[
            DQ.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None)]))
        assert r.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert alter(c, {"q": [(0, 0)]}).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert delete_offsets(c, ["q"]).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_delete_groups_deletes_the_share_groups_state(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "q", 1)
        tid = topic_id(c, "q")
        put(c, "q", [b"a", b"b", b"c"])
        assert shb(c, "m", 0, ["q"]).error_code == 0
        assert acquired(share_fetch(c, "m", 0, tid)) == []  # latest: starts at 3
        put(c, "q", [b"d", b"e"])
        got = acquired(share_fetch(c, "m", 1, tid, max_wait=2000))
        assert [o for o, _, _ in got] == [3, 4]
        assert share_ack(c, "m", 2, tid, [(3, 4, [ACCEPT])]).responses[0].partitions[0].error_code == 0
        assert describe_offsets(c) == {"q": (tid, [(0, 5, 0, 0)])}
        assert delete_group(c) == ErrorCode.NON_EMPTY_GROUP
        assert shb(c, "m", -1).error_code == 0
        assert delete_group(c) == ErrorCode.NONE
        assert describe_offsets(c, topics=[("q", [0])]) == {"q": (tid, [(0, -1, -1, 0)])}
    put_more = [b"f"]
    with WireClient(b.port) as c:
        put(c, "q", put_more)  # offset 5: before the new group starts
        assert shb(c, "m2", 0, ["q"]).error_code == 0
        assert acquired(share_fetch(c, "m2", 0, tid)) == []  # latest again: starts at 6
        put(c, "q", [b"g"])
        got = acquired(share_fetch(c, "m2", 1, tid, max_wait=2000))
        assert [(o, v) for o, v, _ in got] == [(6, b"g")]
