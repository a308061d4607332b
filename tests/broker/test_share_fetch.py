"""Share groups' records on the wire (KIP-932): ShareFetch and ShareAcknowledge, share
sessions, acquisition locks, delivery counts, what a consumer's death gives back.

The share partition's bookkeeping alone is tested in test_share_partition.py; Kafka 4.4's
KafkaShareConsumer, confluent-kafka's ShareConsumer and Kafka's share-group tools against the
broker in the compatibility suite (compat/, the ``share-group``, ``kafka-share-groups`` and
``cluster-share-leader-kill-9`` scenarios).
"""

from __future__ import annotations

import time
import uuid

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches

from kafkawire import WireClient

from test_bad_input import create, produce

F = messages.ShareFetchRequest
A = messages.ShareAcknowledgeRequest
ACCEPT, RELEASE, REJECT = 1, 2, 3
FAST_LOCKS = {"group.share.record.lock.duration.ms": "1000", "group.share.min.record.lock.duration.ms": "1000"}


def topic_id(c, name):
    M = messages.MetadataRequest
    r = c.request(ApiKey.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=name)]))
    return r.topics[0].topic_id


def share_fetch(c, member, epoch, tid, acks=None, group="sg", max_wait=0, max_records=500,
                forget=False, version=1):
    """acks: [(first, last, [types])] for partition 0."""
    topics = [F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(
        partition_index=0, acknowledgement_batches=[
            F.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=t)
            for f, l, t in (acks or [])])])]
    return c.request(ApiKey.SHARE_FETCH, version, F(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait,
        min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=500,
        topics=[] if forget else topics,
        forgotten_topics_data=[F.ForgottenTopic(topic_id=tid, partitions=[0])] if forget else []))


def share_ack(c, member, epoch, tid, acks, group="sg"):
    return c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, A(
        group_id=group, member_id=member, share_session_epoch=epoch,
        topics=[A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(
            partition_index=0, acknowledgement_batches=[
                A.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=t)
                for f, l, t in acks])])]))


def part(response):
    assert response.error_code == 0, response
    parts = [p for t in response.responses for p in t.partitions]
    assert len(parts) <= 1
    return parts[0] if parts else None


def acquired(response):
    """[(offset, value, delivery count)] of the records handed out."""
    p = part(response)
    if p is None:
        return []
    ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
    out = []
    for pos, size, h in iter_batches(p.records):
        for offset, _, _, value, _ in decode_records(memoryview(p.records)[pos:pos + size]):
            for f, l, n in ranges:
                if f <= offset <= l:
                    out.append((offset, value, n))
    return out


def put(c, name, values):
    produce(c, name, build_batch([Record(value=v) for v in values]))


def test_acquire_accept_release_reject_and_sessions(broker):
    with WireClient(broker.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        m = str(uuid.uuid4())
        assert acquired(share_fetch(c, m, 0, tid)) == []  # the share partition starts here
        put(c, "q", [b"a", b"b", b"c", b"d"])
        put(c, "q", [b"e", b"f"])
        got = acquired(share_fetch(c, m, 1, tid, max_wait=2000))
        assert [(o, v) for o, v, _ in got] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"),
                                               (4, b"e"), (5, b"f")]
        assert {n for _, _, n in got} == {1}
        # accept 0-1, release 2, reject 3, accept 4-5, carried by the next fetch
        r = share_fetch(c, m, 2, tid, acks=[(0, 3, [ACCEPT, ACCEPT, RELEASE, REJECT]),
                                             (4, 5, [ACCEPT])], max_wait=2000)
        assert part(r).acknowledge_error_code == 0
        assert [(o, v, n) for o, v, n in acquired(r)] == [(2, b"c", 2)]  # delivered again
        # acknowledging what it no longer holds
        r = share_ack(c, m, 3, tid, [(3, 3, [ACCEPT])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        assert share_ack(c, m, 4, tid, [(2, 2, [ACCEPT])]).responses[0].partitions[0].error_code == 0
        # the session's epochs
        assert share_fetch(c, m, 4, tid).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert share_fetch(c, "other", 3, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert share_ack(c, m, 0, tid, []).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert share_fetch(c, m, 0, tid, acks=[(0, 0, [ACCEPT])]).error_code == ErrorCode.INVALID_REQUEST
        assert share_fetch(c, "", 0, tid).error_code == ErrorCode.INVALID_REQUEST
        assert share_fetch(c, m, 5, tid, forget=True).error_code == 0  # forget the partition
        put(c, "q", [b"g"])
        assert acquired(share_fetch(c, m, 6, tid, max_wait=300, forget=True)) == []
        r = share_fetch(c, m, 0, tid, max_wait=2000)  # a new session, with the partition
        assert [(o, v) for o, v, _ in acquired(r)] == [(6, b"g")]
        assert share_fetch(c, m, -1, tid, forget=True).error_code == 0  # the last request
        assert share_fetch(c, m, 1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_members_share_a_partition_and_a_closed_connection_gives_back(broker):
    with WireClient(broker.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        share_fetch(c, "a", 0, tid)
        for i in range(5):
            put(c, "q", [b"%d-%d" % (i, j) for j in range(4)])
        # each member gets whole batches, no record twice
        with WireClient(broker.port) as dying:
            got_a = acquired(share_fetch(c, "a", 1, tid, max_records=4))
            got_b = acquired(share_fetch(dying, "b", 0, tid, max_records=8))
            assert len(got_a) == 4 and len(got_b) == 8
            assert not {o for o, _, _ in got_a} & {o for o, _, _ in got_b}
        time.sleep(0.3)  # b's connection closed: its records come back at once
        got = acquired(share_fetch(c, "a", 2, tid, max_wait=2000))
        offsets = sorted(o for o, _, _ in got)
        assert offsets == list(range(4, 20))
        assert {n for o, _, n in got if o < 12} == {2} and {n for o, _, n in got if o >= 12} == {1}


def test_a_lock_runs_out_and_the_delivery_limit_archives(broker_factory):
    b = broker_factory({**FAST_LOCKS, "group.share.delivery.count.limit": "2",
                        "group.share.min.delivery.count.limit": "2"})
    with WireClient(b.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        share_fetch(c, "a", 0, tid)
        put(c, "q", [b"x"])
        assert acquired(share_fetch(c, "a", 1, tid, max_wait=2000)) == [(0, b"x", 1)]
        started = time.monotonic()
        # held and never settled: back after the 1 s lock, delivered a second time
        assert acquired(share_fetch(c, "a", 2, tid, max_wait=5000)) == [(0, b"x", 2)]
        assert 0.5 < time.monotonic() - started < 4
        # its second lock runs out too: the limit (2) archives it, nothing more comes
        assert acquired(share_fetch(c, "a", 3, tid, max_wait=2500)) == []
        put(c, "q", [b"y"])
        assert acquired(share_fetch(c, "a", 4, tid, max_wait=2000)) == [(1, b"y", 1)]


def test_share_requests_need_the_group_and_topic_to_be_valid(broker):
    with WireClient(broker.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        r = share_fetch(c, "a", 0, uuid.uuid4())
        assert part(r).error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert share_fetch(c, "a" * 37, 0, tid).error_code == ErrorCode.INVALID_REQUEST
        r = share_ack(c, "a", 1, tid, [(5, 2, [ACCEPT])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        r = share_ack(c, "a", 2, tid, [(0, 3, [ACCEPT, ACCEPT])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        r = share_ack(c, "a", 3, tid, [(0, 0, [9])])
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST


def test_share_sessions_are_bounded(broker_factory):
    b = broker_factory({"group.share.max.share.sessions": "2", "group.share.max.partitions": "2"})
    with WireClient(b.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        assert share_fetch(c, "a", 0, tid).error_code == 0
        assert share_fetch(c, "b", 0, tid).error_code == 0
        assert share_fetch(c, "c", 0, tid).error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        assert share_fetch(c, "a", 0, tid).error_code == 0  # a member renewing its own is fine
        # share partitions (one per group and partition): a third group is refused its own
        assert share_fetch(c, "b", -1, tid, forget=True).error_code == 0
        assert part(share_fetch(c, "a", 0, tid, group="sg2")).error_code == 0
        assert share_fetch(c, "a", -1, tid, forget=True, group="sg2").error_code == 0
        r = share_fetch(c, "c", 0, tid, group="sg3")
        assert part(r).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert "group.share.max.partitions" in part(r).error_message
        assert part(share_fetch(c, "a", 0, tid)).error_code == 0


def test_backlog_metrics(tmp_path):
    import headrace
    from test_metrics import scrape, value

    with headrace.Broker({"metrics.port": 0, "metrics.partition.series.max": 1}) as b:
        with WireClient(b.port) as c:
            create(c, "q")
            create(c, "r")
            tid = topic_id(c, "q")
            share_fetch(c, "a", 0, tid)
            put(c, "q", [b"%d" % i for i in range(10)])
            assert len(acquired(share_fetch(c, "a", 1, tid, max_wait=2000))) == 10
            share_ack(c, "a", 2, tid, [(0, 9, [ACCEPT] * 3 + [REJECT] + [RELEASE] * 6)])
            put(c, "q", [b"late"])
            share_fetch(c, "a", 0, topic_id(c, "r"), group="zz")  # a second share partition
            samples = scrape(b.metrics_port)
    labels = {"group": "sg", "topic": "q", "partition": "0"}
    assert value(samples, "headrace_share_group_backlog", **labels) == 7  # 6 released + "late"
    assert value(samples, "headrace_share_group_in_flight_records", state="available", **labels) == 6
    assert value(samples, "headrace_share_group_in_flight_records", state="acquired", **labels) == 0
    assert value(samples, "headrace_partition_series_dropped", family="share_partition") == 1


def test_what_was_settled_stays_settled_across_a_kill_9(broker_factory):
    """The share partition's state is written before an acknowledgement is answered
    (__share_group_state): after a SIGKILL and a restart, accepted and rejected records are
    not delivered again, a released one is (its count kept), and one held when the broker died
    comes back."""
    b = broker_factory({})
    with WireClient(b.port) as c:
        create(c, "q")
        tid = topic_id(c, "q")
        share_fetch(c, "a", 0, tid)
        for i in range(4):
            put(c, "q", [b"%d" % (i * 2), b"%d" % (i * 2 + 1)])
        got = acquired(share_fetch(c, "a", 1, tid, max_wait=2000, max_records=6))
        assert [o for o, _, _ in got] == [0, 1, 2, 3, 4, 5]
        r = share_ack(c, "a", 2, tid, [(0, 5, [ACCEPT, REJECT, RELEASE, ACCEPT, ACCEPT, ACCEPT])])
        assert r.responses[0].partitions[0].error_code == 0
        got = acquired(share_fetch(c, "a", 3, tid, max_wait=2000))
        assert [(o, n) for o, _, n in got] == [(2, 2), (6, 1), (7, 1)]  # held at the kill
    b.kill()
    b.restart()
    with WireClient(b.port) as c:
        got = acquired(share_fetch(c, "a", 0, tid, max_wait=5000))
        # 2 was released once (count 1 written) and held again unwritten; 6-7 never settled
        assert sorted(o for o, _, _ in got) == [2, 6, 7]
        assert dict((o, n) for o, _, n in got)[2] >= 2


def dead_letters(c, name):
    """[(offset of the original, value, headers)] in partition 0 of ``name``."""
    Fe = messages.FetchRequest
    r = c.request(ApiKey.FETCH, 12, Fe(
        max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        topics=[Fe.FetchTopic(topic=name, partitions=[Fe.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    data = r.responses[0].partitions[0].records
    out = []
    for pos, size, _ in iter_batches(data):
        for _, _, key, value, headers in decode_records(memoryview(data)[pos:pos + size]):
            h = dict(headers)
            out.append((int(h["__dlq.errors.offset"]), key, value, h))
    return out


def test_rejected_and_exhausted_records_go_to_the_dead_letter_queue(broker_factory):
    from test_group_configs import alter

    b = broker_factory({"errors.deadletterqueue.auto.create.topics.enable": "true"})
    with WireClient(b.port) as c:
        create(c, "q")
        C = messages.CreateTopicsRequest
        made = c.request(ApiKey.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(
            name="dlq.q", num_partitions=1, replication_factor=1,
            configs=[C.CreatableTopicConfig(name="errors.deadletterqueue.group.enable", value="true")])]))
        assert made.topics[0].error_code == 0
        assert alter(b.port, "sg", errors_deadletterqueue_topic_name="dlq.q",
                     errors_deadletterqueue_copy_record_enable="true",
                     share_delivery_count_limit=2) == (0, None)
        tid = topic_id(c, "q")
        share_fetch(c, "a", 0, tid)
        put(c, "q", [b"fine", b"bad", b"flaky"])
        assert len(acquired(share_fetch(c, "a", 1, tid, max_wait=2000))) == 3
        r = share_fetch(c, "a", 2, tid, acks=[(0, 2, [ACCEPT, REJECT, RELEASE])], max_wait=2000)
        assert part(r).acknowledge_error_code == 0
        assert [(o, n) for o, _, n in acquired(r)] == [(2, 2)]
        r = share_ack(c, "a", 3, tid, [(2, 2, [RELEASE])])  # its second delivery: the limit
        assert r.responses[0].partitions[0].error_code == 0
        letters = dead_letters(c, "dlq.q")  # written before the acknowledgement was answered
        assert [(o, k, v) for o, k, v, _ in letters] == [(1, None, b"bad"), (2, None, b"flaky")]
        h1, h2 = letters[0][3], letters[1][3]
        assert (h1["__dlq.errors.topic"], h1["__dlq.errors.partition"], h1["__dlq.errors.group"]) == (
            b"q", b"0", b"sg")
        assert (h1["__dlq.errors.delivery.count"], h1["__dlq.errors.message"]) == (
            b"1", b"Offset rejected by client.")
        assert (h2["__dlq.errors.delivery.count"], h2["__dlq.errors.message"]) == (
            b"2", b"Offset delivery count exceeded the threshold.")
        # headers only without copy.record.enable; a topic made on first use (auto creation)
        assert alter(b.port, "sg2", errors_deadletterqueue_topic_name="dlq.auto") == (0, None)
        share_fetch(c, "b", 0, tid, group="sg2")
        assert share_fetch(c, "b", -1, tid, forget=True, group="sg2").error_code == 0
        share_fetch(c, "b", 0, tid, group="sg2")  # starts at the end (latest)
        put(c, "q", [b"nope"])
        got = acquired(share_fetch(c, "b", 1, tid, max_wait=2000, group="sg2"))
        assert [o for o, _, _ in got] == [3]
        assert share_ack(c, "b", 2, tid, [(3, 3, [REJECT])], group="sg2").responses[0].partitions[0].error_code == 0
        assert [(o, k, v) for o, k, v, _ in dead_letters(c, "dlq.auto")] == [(3, None, None)]
        # a group whose dead-letter topic is not enabled for it: archived, nothing written
        assert alter(b.port, "sg3", errors_deadletterqueue_topic_name="dlq.plain") == (0, None)
        create(c, "dlq.plain")
        share_fetch(c, "c", 0, tid, group="sg3")
        put(c, "q", [b"x"])
        got = acquired(share_fetch(c, "c", 1, tid, max_wait=2000, group="sg3"))
        assert [o for o, _, _ in got] == [4]
        assert share_ack(c, "c", 2, tid, [(4, 4, [REJECT])], group="sg3").responses[0].partitions[0].error_code == 0
        assert dead_letters(c, "dlq.plain") == []
        assert acquired(share_fetch(c, "c", 3, tid, max_wait=300, group="sg3")) == []  # archived
        # the group config's own check
        assert alter(b.port, "sg4", errors_deadletterqueue_topic_name="__bad")[0] == ErrorCode.INVALID_CONFIG
