"""A replica fetcher copies a real broker's partition over the Fetch API (as a follower):
the copy's log is byte for byte the leader's, and its producer state and aborted
transactions are what the leader's log gives when it is opened (as recovery builds them)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.broker.client.broker_client import BrokerClient
from headrace.broker.log.partition import Partition
from headrace.broker.log.producer_state import ProducerStateManager
from headrace.broker.replication.replica_fetcher import ReplicaFetcher
from headrace.storage import Log, LogConfig

SETTINGS = {
    "replica.fetch.wait.max.ms": 100,
    "replica.fetch.max.bytes": 32 * 1024,  # small: many fetches
    "replica.fetch.response.max.bytes": 64 * 1024,
    "replica.fetch.backoff.ms": 100,
}


def _fill(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("src", 1)])["src"].result(10)
    plain = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )
    for i in range(3000):
        plain.produce("src", key=b"k%d" % (i % 50), value=b"v%d" % i)
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "copy-txn"})
    txn.init_transactions(10)
    txn.begin_transaction()
    for i in range(100):
        txn.produce("src", value=b"aborted%d" % i)
    txn.flush(10)
    txn.abort_transaction(10)
    txn.begin_transaction()
    for i in range(100):
        txn.produce("src", value=b"committed%d" % i)
    txn.commit_transaction(10)
    txn.begin_transaction()  # left open: the copy must know it
    for i in range(10):
        txn.produce("src", value=b"open%d" % i)
    txn.flush(10)
    # the delete-records start: the copy starts at the leader's log start offset
    from confluent_kafka import TopicPartition

    admin.delete_records([TopicPartition("src", 0, 1000)])[TopicPartition("src", 0, 1000)].result(
        10
    )


async def _flush(partitions) -> None:
    await asyncio.to_thread(lambda: [p.log.flush() for p in partitions])


async def _copy(port: int, directory: Path, end: int) -> Partition:
    client = BrokerClient(lambda node: ("127.0.0.1", port))
    plog = Log.open(str(directory), LogConfig(segment_bytes=64 * 1024), recover=False)
    copy = Partition(None, 0, plog, ProducerStateManager(max_joining=1000))  # type: ignore[arg-type]
    fetcher = ReplicaFetcher(client, 7, 1, SETTINGS, _flush)
    fetcher.add("src", 0, copy, 0)
    try:
        for _ in range(400):
            if plog.log_end_offset >= end and fetcher.copies[("src", 0)].caught_up:
                break
            await asyncio.sleep(0.05)
    finally:
        await fetcher.stop()
        await client.close()
    return copy


def _segments(directory: Path) -> bytes:
    return b"".join(
        (directory / n).read_bytes() for n in sorted(os.listdir(directory)) if n.endswith(".log")
    )


def test_a_copy_is_the_leaders_log_with_its_producer_state(broker_factory, tmp_path):
    broker = broker_factory({"log.segment.bytes": 64 * 1024})
    _fill(broker)
    leader_dir = broker.data_dir / "src-0"
    broker.stop()  # the leader's files settle; then it serves them again
    leader_log = Log.open(str(leader_dir), LogConfig(), recover=False)
    end, start = leader_log.log_end_offset, leader_log.log_start_offset
    leader_log.close()
    broker.start()
    copy = asyncio.run(_copy(broker.port, tmp_path / "copy", end))
    plog = copy.log
    assert (plog.log_start_offset, plog.log_end_offset) == (start, end)
    broker.stop()
    leader_log = Log.open(str(leader_dir), LogConfig(), recover=False)
    leader_state = ProducerStateManager.load(leader_dir, leader_log, max_joining=1000)
    # the same batches (the leader's first segment may begin below the copy's first batch)
    first = leader_log.read(start, 1 << 20)
    copied = plog.read(start, 1 << 20)
    assert copied[:4096] == first[:4096]
    assert _segments(tmp_path / "copy") in _segments(leader_dir)
    # the producers and the open transaction, as the leader's log gives them
    assert copy.producers.snapshot(end)["producers"] == leader_state.snapshot(end)["producers"]
    assert copy.producers.ongoing == leader_state.ongoing and copy.producers.ongoing
    assert copy.last_stable_offset == leader_state.last_stable_offset(end) < end
    aborted = leader_log.aborted_txns(start, end)
    assert aborted and plog.aborted_txns(start, end) == aborted
    leader_log.close()
    plog.close()


def test_stopping_a_fetcher_right_after_its_last_copy_is_removed_ends_it(tmp_path):
    """A move hands the copy over (``remove``) and stops the fetcher at once, while the fetcher
    waits out a backoff: the stop must end the fetcher, however the two wake-ups are ordered
    (a stop that hangs there holds the topic's lock, and the partition is served nowhere)."""

    async def main() -> bool:
        client = BrokerClient(lambda node: None)  # the leader is unreachable: fetches back off
        plog = Log.open(str(tmp_path / "copy"), LogConfig(), recover=False)
        copy = Partition(None, 0, plog, ProducerStateManager(max_joining=1000))  # type: ignore[arg-type]
        fetcher = ReplicaFetcher(client, 7, 1, {**SETTINGS, "replica.fetch.backoff.ms": 60_000}, None)
        fetcher.add("src", 0, copy, 0)
        await asyncio.sleep(0.2)  # the first fetch failed; the fetcher waits out its backoff
        await fetcher.remove("src", 0)
        try:
            await asyncio.wait_for(fetcher.stop(), 5)
            return True
        except TimeoutError:
            return False
        finally:
            plog.close()
            await client.close()

    assert asyncio.run(main())


def test_a_removed_copy_is_changed_no_more_once_remove_returns(broker_factory, tmp_path):
    """A partition's next role (leader, or the follower of another leader) starts from the log
    its fetcher leaves: ``remove`` returns only once the answer being applied is in. Here it
    is called while the first answer is being applied: OFFSET_OUT_OF_RANGE (the copy's fetch
    offset 0 is below the leader's log start, 1000), so the copy is emptied and restarted at
    1000 in a worker thread."""
    broker = broker_factory({"log.segment.bytes": 64 * 1024})
    _fill(broker)

    async def main() -> tuple[int, int]:
        client = BrokerClient(lambda node: ("127.0.0.1", broker.port))
        plog = Log.open(str(tmp_path / "copy"), LogConfig(segment_bytes=64 * 1024), recover=False)
        copy = Partition(None, 0, plog, ProducerStateManager(max_joining=1000))  # type: ignore[arg-type]
        fetcher = ReplicaFetcher(client, 7, 1, SETTINGS, _flush)
        fetcher.add("src", 0, copy, 0)
        busy = fetcher.copies[("src", 0)].busy
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not busy.locked() and loop.time() < deadline:
            await asyncio.sleep(0)
        try:
            await fetcher.remove("src", 0)
            end = plog.log_end_offset
            await asyncio.sleep(0.5)  # several fetch intervals
            return end, plog.log_end_offset
        finally:
            await fetcher.stop()
            await client.close()
            plog.close()

    end, later = asyncio.run(main())
    assert end == later == 1000


def test_a_partition_in_error_waits_out_its_backoff_alone(broker_factory, tmp_path):
    """One partition the leader answers with an error (here: one it does not have) keeps only
    itself out of the fetches for ``replica.fetch.backoff.ms`` (60 s here); the fetcher's
    other partition goes on being copied, as new records arrive (a follower stuck on one
    partition would hold back the high watermark of all the others)."""
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("src", 1)])["src"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})

    def produce(n: int) -> None:
        for i in range(n):
            producer.produce("src", value=b"v%d" % i)
        assert producer.flush(30) == 0

    async def main() -> tuple[int, int]:
        client = BrokerClient(lambda node: ("127.0.0.1", broker.port))
        logs = [Log.open(str(tmp_path / f"c{i}"), LogConfig(), recover=False) for i in (0, 5)]
        good, missing = (Partition(None, 0, plog, ProducerStateManager(max_joining=1000)) for plog in logs)  # type: ignore[arg-type]
        fetcher = ReplicaFetcher(client, 7, 1, {**SETTINGS, "replica.fetch.backoff.ms": 60_000}, _flush)
        fetcher.add("src", 5, missing, 0)
        fetcher.add("src", 0, good, 0)
        try:
            await asyncio.to_thread(produce, 100)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(produce, 100)  # after the error: copied all the same
            for _ in range(100):
                if good.log.log_end_offset >= 200:
                    break
                await asyncio.sleep(0.1)
            return good.log.log_end_offset, fetcher.copies[("src", 5)].error
        finally:
            await fetcher.stop()
            for plog in logs:
                plog.close()

    end, error = asyncio.run(main())
    assert error == 3 and end == 200, (end, error)  # UNKNOWN_TOPIC_OR_PARTITION
