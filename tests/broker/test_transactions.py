"""Transactions with real clients (confluent-kafka, aiokafka): commit, abort, read_committed,
fencing, timeouts, consume-transform-produce with offsets in the transaction, kill -9."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

FAST = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def create(broker, *topics, partitions=1):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(30)


def txn_producer(broker, tid, **extra):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                     "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def read(broker, topic, isolation, partitions=1, expect=None, settle=1.5, timeout=30):
    """Values in a topic as an assign() consumer with ``isolation`` sees them."""
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{isolation}-{time.time()}",
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    values = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = c.consume(1000, timeout=0.2)
        for m in msgs:
            assert m.error() is None, m.error()
            values.append(m.value())
        if msgs:
            quiet_since = time.monotonic()
        if (expect is None or len(values) >= expect) and time.monotonic() - quiet_since > settle:
            break
    c.close()
    return values


def test_commit_abort_and_isolation_levels(broker_factory):
    broker = broker_factory(FAST)
    create(broker, "events", partitions=2)
    p = txn_producer(broker, "tx-1")
    for n, commit in ((10, True), (7, False), (5, True)):
        p.begin_transaction()
        for i in range(n):
            p.produce("events", b"%s-%d" % (b"c" if commit else b"a", i), partition=i % 2)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # the aborted records are in the log before the abort
            p.abort_transaction(30)
    committed = read(broker, "events", "read_committed", partitions=2, expect=15)
    assert sorted(committed) == sorted([b"c-%d" % i for i in range(10)] + [b"c-%d" % i for i in range(5)])
    everything = read(broker, "events", "read_uncommitted", partitions=2, expect=22)
    assert len(everything) == 22
    assert sum(v.startswith(b"a-") for v in everything) == 7


def test_open_transaction_holds_back_read_committed_until_it_ends(broker_factory):
    broker = broker_factory(FAST)
    create(broker, "held")
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("held", b"before")
    plain.flush(30)
    p = txn_producer(broker, "tx-open")
    p.begin_transaction()
    p.produce("held", b"open")
    p.flush(30)
    plain.produce("held", b"after")  # after the open transaction's first offset
    plain.flush(30)
    assert read(broker, "held", "read_committed", settle=1) == [b"before"]
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm",
                     "isolation.level": "read_committed"})
    low, high = c.get_watermark_offsets(ck.TopicPartition("held", 0), timeout=10)
    assert (low, high) == (0, 1)  # read_committed "latest" is the last stable offset
    c.close()
    p.commit_transaction(30)
    assert read(broker, "held", "read_committed", expect=3) == [b"before", b"open", b"after"]


def test_consume_transform_produce_commits_offsets_with_the_output(broker_factory):
    broker = broker_factory(FAST)
    create(broker, "source", "sink")
    src = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        src.produce("source", b"%d" % i)
    src.flush(30)

    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "etl",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    consumer.assign([ck.TopicPartition("source", 0)])
    p = txn_producer(broker, "etl-tx")
    done = 0
    round_no = 0
    while done < 20:
        msgs = consumer.consume(5, timeout=5)
        assert msgs
        p.begin_transaction()
        for m in msgs:
            p.produce("sink", b"x" + m.value())
        p.send_offsets_to_transaction(
            [ck.TopicPartition("source", 0, msgs[-1].offset() + 1)],
            consumer.consumer_group_metadata(), 30)
        if round_no == 1:
            p.flush(30)
            p.abort_transaction(30)  # the batch is processed again
            consumer.seek(ck.TopicPartition("source", 0, msgs[0].offset()))
        else:
            p.commit_transaction(30)
            done += len(msgs)
        round_no += 1
    consumer.close()
    out = read(broker, "sink", "read_committed", expect=20)
    assert sorted(out, key=lambda v: int(v[1:])) == [b"x%d" % i for i in range(20)]
    assert len(read(broker, "sink", "read_uncommitted", expect=25)) == 25
    check = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "etl"})
    [tp] = check.committed([ck.TopicPartition("source", 0)], timeout=10)
    assert tp.offset == 20
    check.close()
    broker.kill()  # the committed offsets come back from __consumer_offsets
    broker.start()
    check = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "etl"})
    [tp] = check.committed([ck.TopicPartition("source", 0)], timeout=10)
    assert tp.offset == 20
    check.close()


def test_second_producer_fences_the_first(broker_factory):
    broker = broker_factory(FAST)
    create(broker, "fenced")
    first = txn_producer(broker, "same-id")
    first.begin_transaction()
    first.produce("fenced", b"zombie")
    first.flush(30)
    second = txn_producer(broker, "same-id")  # aborts the zombie's transaction, bumps the epoch
    second.begin_transaction()
    second.produce("fenced", b"fresh")
    second.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as caught:
        first.produce("fenced", b"late")
        first.commit_transaction(30)
    err = caught.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert read(broker, "fenced", "read_committed", expect=1) == [b"fresh"]


def test_transaction_open_past_its_timeout_is_aborted(broker_factory):
    broker = broker_factory(FAST)
    create(broker, "slow")
    p = txn_producer(broker, "slowpoke", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("slow", b"too late")
    p.flush(30)
    time.sleep(2.5)
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(30)
    other = txn_producer(broker, "other")
    other.begin_transaction()
    other.produce("slow", b"on time")
    other.commit_transaction(30)
    assert read(broker, "slow", "read_committed", expect=1) == [b"on time"]


def test_kill9_during_open_transaction(broker_factory, tmp_path):
    broker = broker_factory(FAST, data_dir=tmp_path / "d")
    create(broker, "crash")
    p = txn_producer(broker, "crashy")
    p.begin_transaction()
    for i in range(5):
        p.produce("crash", b"kept-%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce("crash", b"open-%d" % i)
    p.flush(30)
    broker.kill()
    broker.start()
    assert read(broker, "crash", "read_committed", expect=5) == [b"kept-%d" % i for i in range(5)]
    # a new instance of the application: its InitProducerId aborts the open transaction
    again = txn_producer(broker, "crashy")
    again.begin_transaction()
    again.produce("crash", b"after")
    again.commit_transaction(30)
    assert read(broker, "crash", "read_committed", expect=6) == [b"kept-%d" % i for i in range(5)] + [b"after"]
    broker.kill()
    broker.start()  # the markers and the aborted index survive too
    assert read(broker, "crash", "read_committed", expect=6) == [b"kept-%d" % i for i in range(5)] + [b"after"]
    assert len(read(broker, "crash", "read_uncommitted", expect=11)) == 11


def test_aiokafka_transactions(broker_factory):
    aiokafka = pytest.importorskip("aiokafka")
    broker = broker_factory(FAST)
    create(broker, "aio")

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-tx")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send_and_wait("aio", b"ok-%d" % i)
            await p.begin_transaction()
            await p.send_and_wait("aio", b"dropped")
            await p.abort_transaction()
        finally:
            await p.stop()

        async def consume(isolation, n):
            c = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                                          auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            try:
                tp = aiokafka.TopicPartition("aio", 0)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                got = []
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=300)
                    for msgs in batch.values():
                        got += [m.value for m in msgs]
                    if len(got) >= n:
                        await asyncio.sleep(0.5)
                        for msgs in (await c.getmany(timeout_ms=300)).values():
                            got += [m.value for m in msgs]
                        break
                return got
            finally:
                await c.stop()

        assert await consume("read_committed", 3) == [b"ok-0", b"ok-1", b"ok-2"]
        assert len(await consume("read_uncommitted", 4)) == 4

    asyncio.run(run())
