"""The transaction APIs on the wire: Kafka's error codes for bad input, fencing per request
version, the admin APIs, and producer state (idempotence, open transactions) across kill -9."""

from __future__ import annotations

import os
import time

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

from kafkawire import WireClient

FAST = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
APT = messages.AddPartitionsToTxnRequest
E = ErrorCode


def create_topic(c, name, partitions=1, configs=()):
    R = messages.CreateTopicsRequest
    r = c.request(ApiKey.CREATE_TOPICS, 5, R(topics=[R.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[R.CreatableTopicConfig(name=k, value=v) for k, v in configs])], timeout_ms=10000))
    assert r.topics[0].error_code == 0


def init_pid(c, tid, timeout_ms=60000, version=4, pid=-1, epoch=-1):
    r = c.request(ApiKey.INIT_PRODUCER_ID, version, messages.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch))
    return r.error_code, r.producer_id, r.producer_epoch


def add_partitions(c, tid, pid, epoch, parts, version=3):
    r = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, APT(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in parts]))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(c, tid, pid, epoch, commit, version=3):
    return c.request(ApiKey.END_TXN, version, messages.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)).error_code


def produce(c, topic, values, pid=-1, epoch=-1, seq=-1, tid=None, transactional=False):
    P = messages.ProduceRequest
    batch = build_batch([Record(value=v) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=transactional)
    r = c.request(ApiKey.PRODUCE, 9, P(transactional_id=tid, acks=-1, timeout_ms=10000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def fetch(c, topic, isolation, offset=0):
    F = messages.FetchRequest
    r = c.request(ApiKey.FETCH, 11, F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                      isolation_level=isolation, topics=[F.FetchTopic(
                                          topic=topic, partitions=[F.FetchPartition(
                                              partition=0, fetch_offset=offset,
                                              partition_max_bytes=1 << 20)])]))
    return r.responses[0].partitions[0]


def test_bad_input_gets_kafkas_error_codes(broker_factory):
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c:
        create_topic(c, "t")
        assert init_pid(c, "x", timeout_ms=10**9)[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert end_txn(c, "nobody", 5, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        err, pid, epoch = init_pid(c, "bad")
        assert err == 0 and epoch == 0
        assert end_txn(c, "bad", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
        assert end_txn(c, "bad", pid + 1, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
        codes = add_partitions(c, "bad", pid, epoch, [("t", [0]), ("missing", [0]), ("t", [7])])
        assert codes == {("t", 0): E.OPERATION_NOT_ATTEMPTED, ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
                         ("t", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
        # a transactional batch for a partition not in the transaction is refused
        assert produce(c, "t", [b"x"], pid, epoch, 0, "bad", True)[0] == E.INVALID_TXN_STATE
        # TxnOffsetCommit outside a transaction
        T = messages.TxnOffsetCommitRequest
        r = c.request(ApiKey.TXN_OFFSET_COMMIT, 3, T(
            transactional_id="bad", group_id="g", producer_id=pid, producer_epoch=epoch,
            generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
                T.TxnOffsetCommitRequestTopic(name="t", partitions=[
                    T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                      committed_metadata="")])]))
        assert r.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE
        # a real transaction, then a fenced producer's requests
        assert add_partitions(c, "bad", pid, epoch, [("t", [0])]) == {("t", 0): 0}
        assert produce(c, "t", [b"open"], pid, epoch, 0, "bad", True) == (0, 0)
        err, pid2, epoch2 = init_pid(c, "bad")  # fences: the open transaction is aborted
        assert err == 0 and pid2 == pid and epoch2 == epoch + 2
        assert end_txn(c, "bad", pid, epoch, True) == E.PRODUCER_FENCED
        assert end_txn(c, "bad", pid, epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH
        assert add_partitions(c, "bad", pid, epoch, [("t", [0])], version=1) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
        assert add_partitions(c, "bad", pid, epoch, [("t", [0])]) == {("t", 0): E.PRODUCER_FENCED}
        assert produce(c, "t", [b"zombie"], pid, epoch, 1, "bad", True)[0] == E.INVALID_PRODUCER_EPOCH
        assert init_pid(c, "bad", pid=pid, epoch=epoch)[0] == E.PRODUCER_FENCED
        assert init_pid(c, "bad", pid=pid, epoch=epoch, version=3)[0] == E.INVALID_PRODUCER_EPOCH
        # the coordinator keeps working; nothing of the aborted transaction is visible
        assert add_partitions(c, "bad", pid2, epoch2, [("t", [0])]) == {("t", 0): 0}
        assert produce(c, "t", [b"good"], pid2, epoch2, 0, "bad", True)[0] == 0
        assert end_txn(c, "bad", pid2, epoch2, True) == 0
        assert end_txn(c, "bad", pid2, epoch2, True) == 0  # a retried commit
        assert end_txn(c, "bad", pid2, epoch2, False) == E.INVALID_TXN_STATE
        p = fetch(c, "t", 1)
        assert p.last_stable_offset == p.high_watermark == 4  # open, abort marker, good, commit
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]


def test_concurrent_transactions_while_markers_are_written(broker_factory):
    """Requests that overlap a commit get CONCURRENT_TRANSACTIONS or succeed after it; never a
    half-written transaction."""
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c, WireClient(broker.port) as d:
        create_topic(c, "t")
        _, pid, epoch = init_pid(c, "cc")
        add_partitions(c, "cc", pid, epoch, [("t", [0])])
        produce(c, "t", [b"v"], pid, epoch, 0, "cc", True)
        sent = c.send(ApiKey.END_TXN, 3, messages.EndTxnRequest(
            transactional_id="cc", producer_id=pid, producer_epoch=epoch, committed=True))
        codes = add_partitions(d, "cc", pid, epoch, [("t", [0])])
        assert codes[("t", 0)] in (E.NONE, E.CONCURRENT_TRANSACTIONS)
        cid, r = c.receive(ApiKey.END_TXN, 3)
        assert cid == sent and r.error_code == 0


def test_admin_apis_describe_transactions_and_producers(broker_factory):
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c:
        create_topic(c, "t")
        _, pid, epoch = init_pid(c, "adm")
        add_partitions(c, "adm", pid, epoch, [("t", [0])])
        produce(c, "t", [b"a", b"b"], pid, epoch, 0, "adm", True)
        r = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, messages.DescribeTransactionsRequest(
            transactional_ids=["adm", "none"]))
        s, missing = r.transaction_states
        assert (s.error_code, s.transaction_state, s.producer_id) == (0, "Ongoing", pid)
        assert [(t.topic, t.partitions) for t in s.topics] == [("t", [0])]
        assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        L = messages.ListTransactionsRequest
        r = c.request(ApiKey.LIST_TRANSACTIONS, 1, L(state_filters=["Ongoing", "Bogus"],
                                                     producer_id_filters=[], duration_filter=-1))
        assert [(t.transactional_id, t.transaction_state) for t in r.transaction_states] == [("adm", "Ongoing")]
        assert r.unknown_state_filters == ["Bogus"]
        D = messages.DescribeProducersRequest
        r = c.request(ApiKey.DESCRIBE_PRODUCERS, 0, D(topics=[D.TopicRequest(name="t", partition_indexes=[0, 3])]))
        ok, bad = r.topics[0].partitions
        [prod] = ok.active_producers
        assert (prod.producer_id, prod.producer_epoch, prod.last_sequence, prod.current_txn_start_offset) == (pid, epoch, 1, 0)
        assert bad.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        F = messages.FindCoordinatorRequest
        r = c.request(ApiKey.FIND_COORDINATOR, 4, F(key_type=1, coordinator_keys=["adm"]))
        assert r.coordinators[0].error_code == 0 and r.coordinators[0].port == broker.port


def test_producer_state_and_open_transactions_survive_kill9(broker_factory, tmp_path):
    """Idempotent retries after kill -9 are not written twice (also across segment rolls, from
    the snapshot taken at the roll); an open transaction stays open, holds the LSO, and its
    producer can still commit it."""
    broker = broker_factory(FAST, data_dir=tmp_path / "d")
    with WireClient(broker.port) as c:
        create_topic(c, "idem", configs=[("segment.bytes", "1000")])
        create_topic(c, "tx")
        r = c.request(ApiKey.INIT_PRODUCER_ID, 4, messages.InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=0, producer_id=-1, producer_epoch=-1))
        ipid = r.producer_id
        for seq in range(30):
            assert produce(c, "idem", [b"%d" % seq + b"x" * 100], ipid, 0, seq)[0] == 0
        _, pid, epoch = init_pid(c, "survivor")
        assert add_partitions(c, "survivor", pid, epoch, [("tx", [0])]) == {("tx", 0): 0}
        assert produce(c, "tx", [b"open"], pid, epoch, 0, "survivor", True) == (0, 0)
    snapshots = list((tmp_path / "d" / "idem-0").glob("producer-state-*.json"))
    assert snapshots, "a snapshot is written when the log rolls"
    broker.kill()
    broker.start()
    with WireClient(broker.port) as c:
        assert produce(c, "idem", [b"29" + b"x" * 100], ipid, 0, 29) == (0, 29)  # a retry
        assert produce(c, "idem", [b"28" + b"x" * 100], ipid, 0, 28) == (0, 28)
        assert produce(c, "idem", [b"31"], ipid, 0, 31)[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, "idem", [b"30"], ipid, 0, 30) == (0, 30)
        p = fetch(c, "tx", 1)
        assert (p.last_stable_offset, p.high_watermark, p.records or b"") == (0, 1, b"")
        assert produce(c, "tx", [b"more"], pid, epoch, 1, "survivor", True) == (0, 1)
        assert end_txn(c, "survivor", pid, epoch, True) == 0
        p = fetch(c, "tx", 1)
        assert (p.last_stable_offset, p.high_watermark, p.aborted_transactions) == (3, 3, [])


def test_timed_out_transaction_is_aborted_with_an_epoch_bump(broker_factory):
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c:
        create_topic(c, "t")
        _, pid, epoch = init_pid(c, "late", timeout_ms=300)
        add_partitions(c, "late", pid, epoch, [("t", [0])])
        produce(c, "t", [b"x"], pid, epoch, 0, "late", True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            p = fetch(c, "t", 1)
            if p.last_stable_offset == 2:
                break
            time.sleep(0.1)
        assert p.last_stable_offset == p.high_watermark == 2
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
        # the coordinator writes CompleteAbort once the markers are written: soon after, not before
        while True:
            r = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, messages.DescribeTransactionsRequest(
                transactional_ids=["late"]))
            state = (r.transaction_states[0].transaction_state, r.transaction_states[0].producer_epoch)
            if state[0] != "PrepareAbort" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert state == ("CompleteAbort", epoch + 1)
        assert end_txn(c, "late", pid, epoch, True) == E.PRODUCER_FENCED
        assert produce(c, "t", [b"y"], pid, epoch, 1, "late", True)[0] == E.INVALID_PRODUCER_EPOCH


def delete_records(c, topic, offset):
    D = messages.DeleteRecordsRequest
    r = c.request(ApiKey.DELETE_RECORDS, 2, D(timeout_ms=1000, topics=[
        D.DeleteRecordsTopic(name=topic, partitions=[
            D.DeleteRecordsPartition(partition_index=0, offset=offset)])]))
    return r.topics[0].partitions[0].error_code


def test_aborted_index_lives_beside_its_segment(broker_factory):
    """The aborted-transactions index is a .txnindex beside the segment holding the marker:
    read_committed fetches report it, it survives kill -9, and it goes with its segment."""
    broker = broker_factory(FAST)
    part_dir = broker.data_dir / "t-0"
    with WireClient(broker.port) as c:
        create_topic(c, "t", configs=[("segment.bytes", "400")])
        _, pid, epoch = init_pid(c, "ab")
        assert add_partitions(c, "ab", pid, epoch, [("t", [0])]) == {("t", 0): 0}
        assert produce(c, "t", [b"x" * 50], pid, epoch, 0, "ab", True) == (0, 0)
        assert end_txn(c, "ab", pid, epoch, False) == 0       # abort marker at 1
        files = sorted(os.listdir(part_dir))
        assert "00000000000000000000.txnindex" in files and "transactions.index" not in files
        for i in range(12):                                   # plain data: rolls segments
            assert produce(c, "t", [b"y" * 50])[0] == 0
        p = fetch(c, "t", 1)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
        assert fetch(c, "t", 1, offset=8).aborted_transactions == []
    broker.kill()
    broker.start()
    with WireClient(broker.port) as c:
        p = fetch(c, "t", 1)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
        assert delete_records(c, "t", 8) == 0                 # the marker's segment goes
        assert not any(n.endswith(".txnindex") for n in os.listdir(part_dir))
        assert fetch(c, "t", 1, offset=8).aborted_transactions == []


def _crash_during_end_txn(broker_factory, monkeypatch, point, commit):
    """Run one transaction over topics a and b; the broker kills itself at ``point`` of the
    EndTxn; restart it and return (client, pid, epoch) with the broker up again."""
    monkeypatch.setenv("HEADRACE_TEST_CRASH", point)
    # no timer pass during the test: the start-up replay alone must finish the decision
    broker = broker_factory({**FAST,
                             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "600000"})
    with WireClient(broker.port) as c:
        create_topic(c, "a")
        create_topic(c, "b")
        _, pid, epoch = init_pid(c, "crashy")
        assert add_partitions(c, "crashy", pid, epoch, [("a", [0]), ("b", [0])]) == {
            ("a", 0): 0, ("b", 0): 0}
        assert produce(c, "a", [b"in a"], pid, epoch, 0, "crashy", True) == (0, 0)
        assert produce(c, "b", [b"in b"], pid, epoch, 0, "crashy", True) == (0, 0)
        try:
            end_txn(c, "crashy", pid, epoch, commit)
        except Exception:
            pass
        else:
            raise AssertionError("the broker answered instead of crashing")
    broker.proc.wait(30)
    assert broker.proc.returncode == -9
    broker.kill()
    monkeypatch.delenv("HEADRACE_TEST_CRASH")
    broker.start()
    return broker, pid, epoch


def _state(c, tid):
    r = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, messages.DescribeTransactionsRequest(
        transactional_ids=[tid]))
    return r.transaction_states[0].transaction_state


def _settled(c, topic, high_watermark, aborted):
    """The transaction is decided in ``topic``: LSO = HW, and read_committed readers get
    the expected aborted list."""
    deadline = time.monotonic() + 10
    while True:
        p = fetch(c, topic, 1)
        if p.last_stable_offset == p.high_watermark == high_watermark or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (p.last_stable_offset, p.high_watermark) == (high_watermark, high_watermark)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == aborted


def test_kill9_after_prepare_commit_completes_the_commit(broker_factory, monkeypatch):
    """A crash after PrepareCommit is durable and before any marker: the restarted
    coordinator writes the commit markers to every partition and completes."""
    broker, pid, epoch = _crash_during_end_txn(broker_factory, monkeypatch, "after-prepare",
                                               True)
    with WireClient(broker.port) as c:
        _settled(c, "a", 2, [])
        _settled(c, "b", 2, [])
        assert _state(c, "crashy") == "CompleteCommit"
        assert end_txn(c, "crashy", pid, epoch, True) == 0   # the client's retry succeeds
        # the producer carries on with its next transaction
        assert add_partitions(c, "crashy", pid, epoch, [("a", [0])]) == {("a", 0): 0}
        assert produce(c, "a", [b"next"], pid, epoch, 1, "crashy", True) == (0, 2)
        assert end_txn(c, "crashy", pid, epoch, True) == 0
        _settled(c, "a", 4, [])


def test_kill9_after_prepare_abort_completes_the_abort(broker_factory, monkeypatch):
    broker, pid, epoch = _crash_during_end_txn(broker_factory, monkeypatch, "after-prepare",
                                               False)
    with WireClient(broker.port) as c:
        _settled(c, "a", 2, [(pid, 0)])
        _settled(c, "b", 2, [(pid, 0)])
        assert _state(c, "crashy") == "CompleteAbort"
        assert end_txn(c, "crashy", pid, epoch, False) == 0


def test_kill9_between_markers_completes_every_partition(broker_factory, monkeypatch):
    """A crash after the first partition's marker: the restart writes the markers again
    (the first partition gets a second one, which changes nothing) and completes."""
    broker, pid, epoch = _crash_during_end_txn(broker_factory, monkeypatch,
                                               "after-first-marker", False)
    with WireClient(broker.port) as c:
        _settled(c, "a", 3, [(pid, 0)])   # record, marker, repeated marker
        _settled(c, "b", 2, [(pid, 0)])
        assert _state(c, "crashy") == "CompleteAbort"
    broker.kill()
    broker.start()
    with WireClient(broker.port) as c:
        _settled(c, "a", 3, [(pid, 0)])
        _settled(c, "b", 2, [(pid, 0)])
