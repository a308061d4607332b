"""Transactions v2 (KIP-890): partitions join a transaction with their first batch (Produce
v12+, TxnOffsetCommit v5), every EndTxn v5 bumps the producer epoch, and so a late batch of a
finished transaction is refused instead of opening a hanging one; a zombie is fenced; the
epoch running out moves the producer to a new id; Kafka 4.4's producer negotiates it and its
records arrive exactly once, on one broker and across a cluster."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from confluent_kafka import Consumer
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, create, wait_for  # noqa: F401
from test_coordinators_standalone import coordinator, topics  # noqa: F401
from test_features import KAFKA_4_4
from test_moves import _kafka_tool
from test_transactions_wire import FAST, create_topic, init_pid

from headrace.broker.coordinator.txn.transaction_log import MAX_EPOCH
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

E = ErrorCode
P = messages.ProduceRequest
java = pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")


def produce_v12(c, tid, pid, epoch, seq, values, topic="t", partition=0):
    batch = build_batch([Record(value=v) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    r = c.request(ApiKey.PRODUCE, 12, P(transactional_id=tid, acks=-1, timeout_ms=10000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]))
    return r.responses[0].partition_responses[0].error_code


def end_txn_v5(c, tid, pid, epoch, commit):
    r = c.request(ApiKey.END_TXN, 5, messages.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit))
    return r.error_code, r.producer_id, r.producer_epoch


def describe(c, tid):
    r = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, messages.DescribeTransactionsRequest(transactional_ids=[tid]))
    s = r.transaction_states[0]
    return s.transaction_state, s.producer_epoch, sorted((t.topic, p) for t in s.topics for p in t.partitions)


def stable_and_end(c, topic="t"):
    """(last stable offset, log end) of partition 0: a hanging transaction holds the first back."""
    L = messages.ListOffsetsRequest
    ends = []
    for isolation in (1, 0):
        r = c.request(ApiKey.LIST_OFFSETS, 7, L(replica_id=-1, isolation_level=isolation, topics=[
            L.ListOffsetsTopic(name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
        ends.append(r.topics[0].partitions[0].offset)
    return tuple(ends)


def test_kip_890_hanging_transaction_zombie_and_retries(broker_factory):
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c:
        create_topic(c, "t")
        _, pid, epoch = init_pid(c, "tx")
        # no AddPartitionsToTxn: the partition joins with its first batch
        assert produce_v12(c, "tx", pid, epoch, 0, [b"a", b"b"]) == E.NONE
        assert describe(c, "tx") == ("Ongoing", 0, [("t", 0)])
        assert end_txn_v5(c, "tx", pid, 0, True) == (E.NONE, pid, 1)  # the epoch bumped
        assert end_txn_v5(c, "tx", pid, 0, True) == (E.NONE, pid, 1)  # a retry: the same answer
        assert end_txn_v5(c, "tx", pid, 0, False)[0] == E.INVALID_TXN_STATE
        assert describe(c, "tx") == ("CompleteCommit", 1, [])

        # a late batch of the finished transaction (its old epoch): refused, nothing hangs
        assert produce_v12(c, "tx", pid, 0, 2, [b"late"]) == E.INVALID_PRODUCER_EPOCH
        stable, end = stable_and_end(c)
        assert stable == end == 3  # two records and the commit marker

        # the next transaction goes on with epoch 1 from sequence 0; an abort bumps it too
        assert produce_v12(c, "tx", pid, 1, 0, [b"c"]) == E.NONE
        assert end_txn_v5(c, "tx", pid, 1, False) == (E.NONE, pid, 2)
        # an abort with nothing open still bumps the epoch; a commit of nothing is refused
        assert end_txn_v5(c, "tx", pid, 2, True)[0] == E.INVALID_TXN_STATE
        assert end_txn_v5(c, "tx", pid, 2, False) == (E.NONE, pid, 3)

        # a zombie: a new instance fences the old one, whose batches and EndTxn are refused
        assert produce_v12(c, "tx", pid, 3, 0, [b"zombie"]) == E.NONE
        assert init_pid(c, "tx") == (E.NONE, pid, 5)  # the open transaction aborted (epoch 4) first
        assert produce_v12(c, "tx", pid, 3, 1, [b"zombie again"]) == E.INVALID_PRODUCER_EPOCH
        assert end_txn_v5(c, "tx", pid, 3, True)[0] == E.PRODUCER_FENCED
        stable, end = stable_and_end(c)
        assert stable == end

    broker.restart()  # the state (in the flexible records of transactions v2) is read back
    with WireClient(broker.port) as c:
        assert describe(c, "tx") == ("Empty", 5, [])
        assert end_txn_v5(c, "tx", pid, 5, False) == (E.NONE, pid, 6)


def test_txn_offset_commit_v5_joins_the_groups_partition(broker_factory):
    broker = broker_factory(FAST)
    with WireClient(broker.port) as c:
        create_topic(c, "t")
        _, pid, epoch = init_pid(c, "tx")
        T = messages.TxnOffsetCommitRequest
        r = c.request(ApiKey.TXN_OFFSET_COMMIT, 5, T(
            transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch, generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(name="t", partitions=[
                T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                                                  committed_metadata="")])]))
        assert r.topics[0].partitions[0].error_code == E.NONE
        state, _, partitions = describe(c, "tx")
        assert state == "Ongoing" and [t for t, _ in partitions] == ["__consumer_offsets"]
        # until the transaction ends: UNSTABLE_OFFSET_COMMIT for a consumer asking for stable
        # offsets (read_committed), the last committed one (none) for others
        F = messages.OffsetFetchRequest

        def fetched(version, stable):
            if version == 7:
                got = c.request(ApiKey.OFFSET_FETCH, 7, F(group_id="g", topics=[
                    F.OffsetFetchRequestTopic(name="t", partition_indexes=[0])], require_stable=stable))
                p = got.topics[0].partitions[0]
            else:
                got = c.request(ApiKey.OFFSET_FETCH, 8, F(groups=[F.OffsetFetchRequestGroup(
                    group_id="g", topics=[F.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])],
                    require_stable=stable))
                p = got.groups[0].topics[0].partitions[0]
            return p.error_code, p.committed_offset

        for version in (7, 8):
            assert fetched(version, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
            assert fetched(version, False) == (E.NONE, -1)
        assert end_txn_v5(c, "tx", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        got = c.request(ApiKey.OFFSET_FETCH, 7, F(group_id="g", topics=[
            F.OffsetFetchRequestTopic(name="t", partition_indexes=[0])], require_stable=True))
        assert got.topics[0].partitions[0].committed_offset == 7


async def test_an_exhausted_epoch_moves_the_producer_to_a_new_id(topics, tmp_path):  # noqa: F811
    txns = coordinator(topics, tmp_path)
    await topics.create("t", 1, {})
    _, pid, _ = await txns.init_producer_id("tx", 30_000)
    txn = txns.txns["tx"]
    txns.txns["tx"] = dataclasses.replace(txn, producer_epoch=MAX_EPOCH - 2)  # 32765 commits on
    assert await txns.add_partitions_manager.join("tx", pid, MAX_EPOCH - 2, {("t", 0)}) == E.NONE
    assert await txns.end_txn("tx", pid, MAX_EPOCH - 2, True, client_version=2) == (E.NONE, pid, MAX_EPOCH - 1)
    assert await txns.add_partitions_manager.join("tx", pid, MAX_EPOCH - 1, {("t", 0)}) == E.NONE
    error, new_pid, epoch = await txns.end_txn("tx", pid, MAX_EPOCH - 1, True, client_version=2)
    assert error == E.NONE and new_pid != pid and epoch == 0
    # the producer that did not hear the answer asks again with its old id and epoch
    assert await txns.end_txn("tx", pid, MAX_EPOCH - 1, True, client_version=2) == (E.NONE, new_pid, 0)
    again = coordinator(topics, tmp_path)
    await again.start()
    try:
        txn = again.describe("tx")
        assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id, txn.client_version) == (
            new_pid, 0, pid, 2)
    finally:
        again.stop()


def read_committed(servers: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": servers, "group.id": "check", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe([topic])
    count, done = 0, set()
    try:
        while len(done) < partitions:
            m = c.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error():
                done.add(m.partition())
            else:
                count += 1
    finally:
        c.close()
    return count


def transactional_load(servers: str, topic: str, records: int):
    return _kafka_tool("org.apache.kafka.tools.ProducerPerformance", [
        "--topic", topic, "--num-records", str(records), "--record-size", "100", "--throughput", "20000",
        "--command-property", f"bootstrap.servers={servers}", "--transactional-id", "perf",
        "--transaction-duration-ms", "100"], timeout=120, version=KAFKA_4_4)


def epoch_of(servers: str) -> int:
    shown = _kafka_tool("org.apache.kafka.tools.TransactionsCommand", [
        "--bootstrap-server", servers, "describe", "--transactional-id", "perf"], version=KAFKA_4_4)
    header, row = [line.split() for line in shown.stdout.splitlines()[:2]]
    return int(row[header.index("ProducerEpoch")])


@java
def test_kafka_44_producer_uses_transactions_v2_on_one_broker(broker):
    broker.create_topic("t", 3)
    done = transactional_load(broker.bootstrap, "t", 40_000)
    assert done.returncode == 0
    # one bump per commit (about 20 of them on a quiet machine; fewer when commits are slow),
    # where transactions v1 keeps the epoch it was given for the producer's life
    assert epoch_of(broker.bootstrap) >= 3
    assert read_committed(broker.bootstrap, "t", 3) == 40_000


@java
def test_kafka_44_producer_uses_transactions_v2_across_a_cluster(cluster):
    brokers = cluster(3, **{"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"})
    create(brokers, "t", 6, replication_factor=3)  # leaders on every broker: most not the coordinator
    servers = bootstrap(brokers)
    done = transactional_load(servers, "t", 40_000)
    assert done.returncode == 0
    assert epoch_of(servers) >= 3  # bumped at every commit (v1 would stay at 0)
    assert read_committed(servers, "t", 6) == 40_000
