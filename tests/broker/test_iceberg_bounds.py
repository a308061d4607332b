"""The Iceberg translator's bounds under a hostile load, on a real broker with real clients.

Each test makes a backlog first: large records (20 kB, one per batch) produced to topics of
many partitions while their ``iceberg.mode`` is ``disabled``, then switched on with
IncrementalAlterConfigs, so every partition is behind by several times its bound when the
translator starts. Small bounds are set, and two observables are checked, the broker's own
peaks on /metrics and the tables themselves (each snapshot's ``headrace.offsets`` summary says
how many records of each partition it took, each record one batch of known size): no round
read more of a partition than ``iceberg.partition.buffer.max.bytes``, rounds together never
held more than ``iceberg.buffer.max.bytes``, no more than ``iceberg.max.open.files`` rounds
ran at once, and every row arrived. The last test fills the warehouse's filesystem (a tmpfs
mounted for it: root only) and checks that produce goes on and the table catches up once
there is room.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import threading
import time

import pytest

pytest.importorskip("pyiceberg")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

import headrace  # noqa: E402
from tests.broker.test_iceberg import catalog, produce_while_failing  # noqa: E402
from tests.broker.test_metrics import scrape, value  # noqa: E402

VALUE = 20_000  # bytes of each record's value
BATCH = VALUE + 100  # at least the bytes of its batch (one record), at most this
PARTITION_BOUND = 64 * 1024  # three batches, not four
SETTINGS = {
    "iceberg.enabled": "true",
    "iceberg.commit.interval.ms": 100,
    "metrics.port": 0,
    "iceberg.partition.buffer.max.bytes": PARTITION_BOUND,
}


def backlog(broker, topics: list[str], partitions: int, per_partition: int) -> None:
    """``per_partition`` records of ``VALUE`` bytes, one batch each, in every partition of
    each topic, then the topics' ``iceberg.mode`` turned to key_value."""
    for topic in topics:
        broker.create_topic(topic, partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "batch.size": 1000}
    )
    for topic in topics:
        for i in range(per_partition * partitions):
            producer.produce(
                topic, key=b"%d" % i, value=os.urandom(VALUE), partition=i % partitions
            )
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    on = [ConfigEntry("iceberg.mode", "key_value", incremental_operation=AlterConfigOpType.SET)]
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=on) for t in topics
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)


def wait_caught_up(broker, topics: list[str], count: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        samples = scrape(broker.metrics_port)
        if all(value(samples, "headrace_iceberg_rows_total", topic=t) >= count for t in topics):
            return samples
        time.sleep(0.1)
    raise AssertionError(f"not every row of {topics} arrived in {timeout} s")


def snapshot_ranges(data_dir, topic: str) -> tuple[list[dict[int, int]], list]:
    """Per snapshot with rows, how many records of each partition it took; and the rows."""
    table = catalog(data_dir).load_table(f"kafka.{topic}")
    taken = []
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties.get("headrace.offsets", "")
        counts = {}
        for item in filter(None, summary.split(",")):
            p, span = item.split(":")
            start, end = span.split("-")
            counts[int(p)] = int(end) - int(start)
        if counts:
            taken.append(counts)
    return taken, table.scan().to_arrow()


def assert_every_row(rows, partitions: int, per_partition: int) -> None:
    got = sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist()))
    assert got == sorted((p, o) for p in range(partitions) for o in range(per_partition))


def test_no_round_reads_more_of_a_partition_than_its_bound(tmp_path):
    partitions, per_partition = 4, 12
    with headrace.Broker(SETTINGS, data_dir=tmp_path) as broker:
        backlog(broker, ["wide"], partitions, per_partition)
        samples = wait_caught_up(broker, ["wide"], partitions * per_partition)
        peak = value(samples, "headrace_iceberg_partition_read_peak_bytes")
        assert 3 * VALUE <= peak <= PARTITION_BOUND
        taken, rows = snapshot_ranges(tmp_path, "wide")
        assert max(n for counts in taken for n in counts.values()) * VALUE <= PARTITION_BOUND
        assert len(taken) >= per_partition // 3  # (the backlog took several rounds)
        assert_every_row(rows, partitions, per_partition)


def test_rounds_together_never_hold_more_than_the_broker_bound(tmp_path):
    """Two topics of 8 partitions behind by 4 batches each, 2 rounds at once, and room for 4
    batches in all: a round cannot read even one batch of every partition (each partition's
    share of the bound is smaller than one batch). Then one record larger than either bound:
    it is read alone and arrives."""
    bound = 4 * BATCH + 100
    partitions, per_partition = 8, 4
    settings = {**SETTINGS, "iceberg.buffer.max.bytes": bound, "iceberg.max.open.files": 2}
    with headrace.Broker(settings, data_dir=tmp_path) as broker:
        topics = ["left", "right"]
        backlog(broker, topics, partitions, per_partition)
        samples = wait_caught_up(broker, topics, partitions * per_partition)
        assert 2 * VALUE <= value(samples, "headrace_iceberg_buffer_bytes_peak") <= bound
        for topic in topics:
            taken, rows = snapshot_ranges(tmp_path, topic)
            assert max(sum(counts.values()) for counts in taken) * VALUE <= bound
            assert_every_row(rows, partitions, per_partition)
        huge = 3 * bound
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("left", value=b"h" * huge, partition=0)
        assert producer.flush(30) == 0
        samples = wait_caught_up(broker, ["left"], partitions * per_partition + 1)
        assert value(samples, "headrace_iceberg_buffer_bytes_peak") <= huge + 200
        assert value(samples, "headrace_iceberg_buffer_bytes") == 0
        rows = catalog(tmp_path).load_table("kafka.left").scan().to_arrow()
        assert b"h" * huge in rows.column("value").to_pylist()


def test_no_more_rounds_run_at_once_than_max_open_files(tmp_path):
    """Six topics behind at once, ``iceberg.max.open.files`` 2: the broker's peak of rounds
    running, and the translator's worker processes seen in this process (the broker runs in
    it), never pass 2; every row arrives. The workers run under SCHED_IDLE (the default of
    ``iceberg.worker.sched.idle``)."""
    topics = [f"t{i}" for i in range(6)]
    partitions, per_partition = 2, 6
    settings = {**SETTINGS, "iceberg.max.open.files": 2}
    with headrace.Broker(settings, data_dir=tmp_path) as broker:
        workers_seen = []
        done = threading.Event()

        def workers() -> list[multiprocessing.Process]:
            return [p for p in multiprocessing.active_children() if p.name == "headrace-iceberg"]

        def watch() -> None:
            while not done.is_set():
                workers_seen.append(len(workers()))
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            backlog(broker, topics, partitions, per_partition)
            samples = wait_caught_up(broker, topics, partitions * per_partition)
        finally:
            done.set()
            watcher.join()
        assert value(samples, "headrace_iceberg_rounds_running_peak") == 2
        assert 1 <= max(workers_seen) <= 2
        assert {os.sched_getscheduler(p.pid) for p in workers()} == {os.SCHED_IDLE}
        for topic in topics:
            assert_every_row(snapshot_ranges(tmp_path, topic)[1], partitions, per_partition)


def test_a_full_disk_holds_back_no_produce_and_the_table_catches_up(tmp_path):
    """The warehouse is a 1 MiB tmpfs, filled before the topic's first round: produce (acks=all)
    goes on as fast as before, the topic's rounds fail and it is marked failing; once there is
    room again, every record becomes a row."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the warehouse needs root")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(warehouse)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        filler = warehouse / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass  # (full)
        settings = {
            **SETTINGS,
            "iceberg.retry.backoff.max.ms": 300,
            "iceberg.catalog.warehouse": str(warehouse),
        }
        with headrace.Broker(settings, data_dir=tmp_path / "data") as broker:
            broker.create_topic("full", partitions=1, iceberg_mode="key_value")
            samples = produce_while_failing(broker, "full", 2000)
            assert value(samples, "headrace_iceberg_rows_total", topic="full") == 0
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
            for i in range(2000, 2100):  # (still produced while the disk is full)
                producer.produce("full", value=b"%d" % i)
            assert producer.flush(5) == 0
            filler.unlink()
            samples = wait_caught_up(broker, ["full"], 2100)
            assert value(samples, "headrace_iceberg_failing", topic="full") == 0
            rows = catalog(tmp_path / "data").load_table("kafka.full")
        got = sorted(rows.scan().to_arrow().column("offset").to_pylist())
        assert got == list(range(2100))
    finally:
        subprocess.run(["umount", "-l", str(warehouse)], check=False)
