"""WriteTxnMarkers sent by a raw client to one broker, as another broker's transaction
coordinator would: commit and abort markers land (a read_committed consumer sees the
committed records and not the aborted ones), the error codes per partition, and the
transactional offsets of ``__consumer_offsets`` committed or dropped by the marker, also
across a restart."""

from __future__ import annotations

import confluent_kafka as ck
from kafkawire import WireClient
from test_transactions import read
from test_transactions_wire import FAST, add_partitions, create_topic, init_pid

from headrace.broker.coordinator.group.group_offsets import partition_for
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

E = ErrorCode
W = messages.WriteTxnMarkersRequest
OFFSETS_PARTITIONS = int(FAST["offsets.topic.num.partitions"])


def write_markers(c, markers, version=1):
    """markers: [(pid, epoch, commit, {topic: [partitions]})] -> {(pid, topic, p): code}."""
    r = c.request(ApiKey.WRITE_TXN_MARKERS, version, W(markers=[
        W.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                            coordinator_epoch=0, topics=[
                                W.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                for t, ps in topics.items()])
        for pid, epoch, commit, topics in markers]))
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in r.markers for t in m.topics for p in t.partitions}


def txn_offset_commit(c, tid, group, pid, epoch, offsets):
    T = messages.TxnOffsetCommitRequest
    r = c.request(ApiKey.TXN_OFFSET_COMMIT, 3, T(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
            T.TxnOffsetCommitRequestTopic(name=t, partitions=[
                T.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                  committed_metadata="")])
            for (t, p), o in offsets.items()]))
    return [p.error_code for t in r.topics for p in t.partitions]


def committed(c, group):
    F = messages.OffsetFetchRequest
    r = c.request(ApiKey.OFFSET_FETCH, 7, F(group_id=group, topics=None, require_stable=False))
    return {(t.name, p.partition_index): p.committed_offset
            for t in r.topics for p in t.partitions if p.committed_offset >= 0}


def add_offsets(c, tid, pid, epoch, group):
    r = c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, messages.AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group))
    assert r.error_code == 0


def test_commit_and_abort_markers_land_and_read_committed_sees_only_the_commit(broker_factory):
    broker = broker_factory({**FAST, "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                             "60000"})
    with WireClient(broker.port) as c:
        create_topic(c, "t", 2)
        _, pid, epoch = init_pid(c, "m", timeout_ms=120_000)
        assert add_partitions(c, "m", pid, epoch, [("t", [0, 1])]) == {("t", 0): 0, ("t", 1): 0}
        P = messages.ProduceRequest
        for index, values in ((0, [b"kept-1", b"kept-2"]), (1, [b"gone-1", b"gone-2"])):
            batch = build_batch([Record(value=v) for v in values], producer_id=pid,
                                producer_epoch=epoch, base_sequence=0, is_transactional=True)
            r = c.request(ApiKey.PRODUCE, 9, P(transactional_id="m", acks=-1, timeout_ms=10_000,
                                               topic_data=[P.TopicProduceData(name="t", partition_data=[
                                                   P.PartitionProduceData(index=index, records=batch)])]))
            assert r.responses[0].partition_responses[0].error_code == 0
        for index in (0, 1):  # open: nothing is stable yet
            assert fetch_partition(c, "t", index).last_stable_offset == 0

        codes = write_markers(c, [(pid, epoch, True, {"t": [0], "missing": [0]}),
                                  (pid, epoch, False, {"t": [1, 7]})])
        assert codes == {(pid, "t", 0): 0, (pid, "missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
                         (pid, "t", 1): 0, (pid, "t", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
        p0, p1 = fetch_partition(c, "t", 0), fetch_partition(c, "t", 1)
        assert (p0.last_stable_offset, p0.aborted_transactions) == (3, [])
        assert p1.last_stable_offset == 3
        assert [(a.producer_id, a.first_offset) for a in p1.aborted_transactions] == [(pid, 0)]
        # a marker older than the producer's epoch on that partition is refused
        assert write_markers(c, [(pid, epoch + 1, False, {"t": [0]})]) == {(pid, "t", 0): 0}
        assert write_markers(c, [(pid, epoch, True, {"t": [0]})]) == {
            (pid, "t", 0): E.INVALID_PRODUCER_EPOCH}
        # version 2 (with the transaction version field) is served too
        assert write_markers(c, [(pid, epoch + 1, False, {"t": [1]})], version=2) == {
            (pid, "t", 1): 0}

    assert sorted(read(broker, "t", "read_committed", partitions=2, expect=2)) == [
        b"kept-1", b"kept-2"]
    assert sorted(read(broker, "t", "read_uncommitted", partitions=2, expect=4)) == [
        b"gone-1", b"gone-2", b"kept-1", b"kept-2"]


def fetch_partition(c, topic, index):
    F = messages.FetchRequest
    r = c.request(ApiKey.FETCH, 11, F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                      isolation_level=1, topics=[F.FetchTopic(
                                          topic=topic, partitions=[F.FetchPartition(
                                              partition=index, fetch_offset=0,
                                              partition_max_bytes=1 << 20)])]))
    return r.responses[0].partitions[0]


def test_markers_on_consumer_offsets_commit_or_drop_transactional_offsets(broker_factory, tmp_path):
    """The group coordinator holds a transaction's offsets until the marker reaches the
    group's partition of ``__consumer_offsets``: a commit makes them the group's (they survive
    a restart), an abort drops them (never seen, also not after a restart)."""
    broker = broker_factory({**FAST, "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                             "60000"}, data_dir=tmp_path / "d")
    with WireClient(broker.port) as c:
        create_topic(c, "in", 2)
        for tid, group in (("c", "g-commit"), ("a", "g-abort")):
            _, pid, epoch = init_pid(c, tid, timeout_ms=120_000)
            add_offsets(c, tid, pid, epoch, group)
            assert txn_offset_commit(c, tid, group, pid, epoch, {("in", 0): 5, ("in", 1): 7}) == [0, 0]
            assert committed(c, group) == {}  # not before the marker
            index = partition_for(group, OFFSETS_PARTITIONS)
            commit = tid == "c"
            codes = write_markers(c, [(pid, epoch, commit, {"__consumer_offsets": [index]})])
            assert codes == {(pid, "__consumer_offsets", index): 0}
        assert committed(c, "g-commit") == {("in", 0): 5, ("in", 1): 7}
        assert committed(c, "g-abort") == {}
    broker.kill()
    broker.start()
    with WireClient(broker.port) as c:
        assert committed(c, "g-commit") == {("in", 0): 5, ("in", 1): 7}
        assert committed(c, "g-abort") == {}
    # a real consumer of the group starts from the committed offsets
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-commit"})
    try:
        got = consumer.committed([ck.TopicPartition("in", 0), ck.TopicPartition("in", 1)], 10)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 5), (1, 7)]
    finally:
        consumer.close()


def test_open_transactions_offsets_are_read_back_after_kill9_and_committed_later(
        broker_factory, tmp_path):
    """Offsets of a transaction still open at a kill -9 are held again after the restart, and
    its commit then makes them the group's."""
    broker = broker_factory(FAST, data_dir=tmp_path / "d")
    with WireClient(broker.port) as c:
        create_topic(c, "in", 1)
        _, pid, epoch = init_pid(c, "k", timeout_ms=120_000)
        add_offsets(c, "k", pid, epoch, "g")
        assert txn_offset_commit(c, "k", "g", pid, epoch, {("in", 0): 42}) == [0]
    broker.kill()
    broker.start()
    with WireClient(broker.port) as c:
        assert committed(c, "g") == {}
        r = c.request(ApiKey.END_TXN, 3, messages.EndTxnRequest(
            transactional_id="k", producer_id=pid, producer_epoch=epoch, committed=True))
        assert r.error_code == 0
        assert committed(c, "g") == {("in", 0): 42}


def test_unknown_partitions_only(broker):
    with WireClient(broker.port) as c:
        assert write_markers(c, [(1, 0, True, {"nope": [0, 1]}), (2, 0, False, {})]) == {
            (1, "nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, (1, "nope", 1): E.UNKNOWN_TOPIC_OR_PARTITION}
