"""Committed offsets do not outlive their topic.

After DeleteTopics every group's offsets for the topic are gone (tombstones in
``__consumer_offsets``, so also after a restart), a group left Empty without offsets is gone,
and a topic re-created under the same name is read from its start by the old group's
consumers, classic and KIP-848 alike.
"""

from __future__ import annotations

import time
import uuid

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

from test_group_consumer_protocol import hb
from test_group_protocol import (
    FAST, commit, commit_errors, create_topic, describe, fetch_offsets, join, sync)


def delete_topic(c, name):
    R = messages.DeleteTopicsRequest
    r = c.request(ApiKey.DELETE_TOPICS, 4, R(topic_names=[name], timeout_ms=5000))
    assert r.responses[0].error_code == 0


def listed(c):
    L = messages.ListGroupsRequest
    groups = c.request(ApiKey.LIST_GROUPS, 5, L(states_filter=[], types_filter=[])).groups
    return sorted((g.group_id, g.group_state) for g in groups)


def leave(c, group, member_id):
    r = c.request(ApiKey.LEAVE_GROUP, 5, messages.LeaveGroupRequest(group_id=group, members=[
        messages.LeaveGroupRequest.MemberIdentity(member_id=member_id)]))
    assert [m.error_code for m in r.members] == [0]


def test_offsets_and_empty_groups_of_a_deleted_topic_are_gone_also_after_restarts(
        broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 2)
        create_topic(c, "u", 1)
        assert commit_errors(commit(c, "only-t", [("t", 0, 5), ("t", 1, 7)])) == [0, 0]
        assert commit_errors(commit(c, "both", [("t", 0, 1), ("u", 0, 3)])) == [0, 0]
        # a classic group whose membership is stored, then emptied by its member's leave
        r = join(c, "left")
        sync(c, "left", r.generation_id, r.member_id, [(r.member_id, b"A")])
        assert commit_errors(commit(c, "left", [("t", 1, 9)], r.generation_id, r.member_id)) == [0]
        leave(c, "left", r.member_id)
        assert describe(c, "left").group_state == "Empty"
        # a group with a member keeps existing, without the topic's offsets
        ra = join(c, "active")
        sync(c, "active", ra.generation_id, ra.member_id, [(ra.member_id, b"A")])
        assert commit_errors(commit(c, "active", [("t", 0, 4)], ra.generation_id,
                                    ra.member_id)) == [0]
        assert listed(c) == [("active", "Stable"), ("both", "Empty"), ("left", "Empty"),
                             ("only-t", "Empty")]

        delete_topic(c, "t")

        def check(c):
            assert fetch_offsets(c, "only-t") == {}
            assert fetch_offsets(c, "left") == {}
            assert fetch_offsets(c, "both") == {("u", 0): 3}
            assert fetch_offsets(c, "active") == {}
            assert fetch_offsets(c, "only-t", version=7) == {}  # the single-group versions too
            assert listed(c) == [("active", "Stable"), ("both", "Empty")]
            for gone in ("only-t", "left"):
                assert describe(c, gone).group_state == "Dead"
                assert describe(c, gone, version=6).error_code == ErrorCode.GROUP_ID_NOT_FOUND

        check(c)
    b.kill()  # kill -9: the tombstones were flushed before DeleteTopics was answered
    b.start()
    with WireClient(b.port) as c:
        check(c)
        create_topic(c, "t", 2)  # the same name again: nothing committed for it
        check(c)
    b.stop()  # a clean restart
    b.start()
    with WireClient(b.port) as c:
        check(c)


def test_kip848_group_loses_the_offsets_of_a_deleted_topic(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        create_topic(c, "u", 1)
        member = str(uuid.uuid4())
        r = hb(c, member, 0, topics=["t", "u"], group="cg")
        assert r.error_code == 0
        assert commit_errors(commit(c, "cg", [("t", 0, 5), ("u", 0, 6)], r.member_epoch,
                                    member)) == [0, 0]
        delete_topic(c, "t")
        assert fetch_offsets(c, "cg") == {("u", 0): 6}
        assert [g for g, _ in listed(c)] == ["cg"]  # it has a member: it stays
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert fetch_offsets(c, "cg") == {("u", 0): 6}


# real clients: the old group reads a re-created topic from its start -----------------------

def produce(bootstrap, topic, count):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(30) == 0


def consume(kind, bootstrap, topic, group, count, timeout=60.0):
    """Read ``count`` records with a subscribing consumer of ``group`` (earliest when it has
    no committed offset), commit them and close; the offsets read."""
    offsets: list[int] = []
    deadline = time.monotonic() + timeout
    if kind == "kafka-python":
        from kafka import KafkaConsumer

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=6000,
                          heartbeat_interval_ms=500)
        c.subscribe([topic])
        try:
            while len(offsets) < count and time.monotonic() < deadline:
                for msgs in c.poll(200).values():
                    offsets += [m.offset for m in msgs]
            c.commit()
        finally:
            c.close()
        return offsets
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    if kind == "confluent-kafka-848":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    c.subscribe([topic])
    try:
        while len(offsets) < count and time.monotonic() < deadline:
            offsets += [m.offset() for m in c.consume(10, 0.2) if not m.error()]
        c.commit(asynchronous=False)
    finally:
        c.close()
    return offsets


@pytest.mark.parametrize("kind", ["kafka-python", "confluent-kafka", "confluent-kafka-848"])
def test_the_old_group_reads_a_recreated_topic_from_its_start(broker_factory, kind):
    b = broker_factory({**FAST, "group.initial.rebalance.delay.ms": "0",
                        "group.min.session.timeout.ms": "1000",
                        "group.consumer.heartbeat.interval.ms": "500"})
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic("t", 1, 1)])
        produce(b.bootstrap, "t", 5)
        assert consume(kind, b.bootstrap, "t", "g", 5) == list(range(5))
        with WireClient(b.port) as c:
            assert fetch_offsets(c, "g") == {("t", 0): 5}
        admin.delete_topics(["t"])
        with WireClient(b.port) as c:
            assert fetch_offsets(c, "g") == {}
        admin.create_topics([NewTopic("t", 1, 1)])
        produce(b.bootstrap, "t", 20)
        assert consume(kind, b.bootstrap, "t", "g", 20) == list(range(20))
    finally:
        admin.close()


def test_an_open_transaction_does_not_commit_offsets_for_a_deleted_topic(broker_factory):
    """The transaction coordinator keeps offsets of its own about the topic (those of an open
    transaction): they go with the topic, so its namesake does not inherit them at commit."""
    from test_transactions_wire import FAST as TXN_FAST
    from test_transactions_wire import end_txn, init_pid

    b = broker_factory({**FAST, **TXN_FAST})
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        create_topic(c, "u", 1)
        err, pid, epoch = init_pid(c, "tx")
        assert err == 0
        r = c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, messages.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g"))
        assert r.error_code == 0
        T = messages.TxnOffsetCommitRequest
        r = c.request(ApiKey.TXN_OFFSET_COMMIT, 3, T(
            transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
            generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
                T.TxnOffsetCommitRequestTopic(name=name, partitions=[
                    T.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_metadata="")])
                for name in ("t", "u")]))
        assert [p.error_code for t in r.topics for p in t.partitions] == [0, 0]

        delete_topic(c, "t")
        create_topic(c, "t", 1)
        assert end_txn(c, "tx", pid, epoch, True) == 0
        assert fetch_offsets(c, "g") == {("u", 0): 5}
