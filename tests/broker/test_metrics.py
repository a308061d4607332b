"""The Prometheus endpoint and the health checks (``metrics.port``), scraped over HTTP after
real traffic from confluent-kafka and kafka-python."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import headrace
from headrace.broker.log import topics as topics_module
from headrace.broker.client.admin_request import AdminError


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    status, text = get(port, "/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % partitions)
        producer.flush(30)  # one batch per record: one Produce request each
    assert producer.flush(30) == 0


def test_metrics_move_with_traffic():
    with headrace.Broker(
        {"metrics.port": 0, "log.flush.interval.messages": 1, "num.partitions": 2}
    ) as broker:
        port = broker.metrics_port
        assert port
        assert get(port, "/health") == (200, "ok\n")
        assert get(port, "/ready") == (200, "ready\n")
        before = scrape(port)
        assert value(before, "headrace_ready") == 1
        assert value(before, "headrace_topic_bytes_in_total", topic="metered") == 0

        broker.create_topic("metered", partitions=2)
        values = [b"v%03d" % i + b"x" * 100 for i in range(20)]
        produce(broker.bootstrap_servers, "metered", values, 2)
        with pytest.raises(AdminError):
            broker.create_topic("metered", partitions=2)  # TOPIC_ALREADY_EXISTS

        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            group_id="metered-readers",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        consumer.assign([TopicPartition("metered", 0), TopicPartition("metered", 1)])
        read = []
        deadline = time.monotonic() + 30
        while len(read) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(1000).values():
                read += records
        assert len(read) == 20
        # commit 4 of partition 0's 10 records and all of partition 1's
        from kafka.structs import OffsetAndMetadata

        consumer.commit(
            {
                TopicPartition("metered", 0): OffsetAndMetadata(4, "", -1),
                TopicPartition("metered", 1): OffsetAndMetadata(10, "", -1),
            }
        )
        after = scrape(port)
        assert value(after, "headrace_connections", listener="PLAINTEXT") >= 1
        consumer.close()

    # requests: each produced batch is one Produce request, counted under its version
    produced = total(after, "headrace_request_duration_seconds_count", api="PRODUCE")
    assert produced - total(before, "headrace_request_duration_seconds_count", api="PRODUCE") >= 20
    assert total(after, "headrace_request_duration_seconds_bucket", api="PRODUCE", le="+Inf") == (
        produced
    )
    assert total(after, "headrace_request_duration_seconds_count", api="FETCH") >= 1
    assert total(after, "headrace_request_duration_seconds_sum", api="PRODUCE") > 0
    # bytes: at least the values went in (batches add headers) and out
    bytes_in = value(after, "headrace_topic_bytes_in_total", topic="metered")
    assert bytes_in >= sum(map(len, values))
    assert value(after, "headrace_topic_bytes_out_total", topic="metered") >= sum(map(len, values))
    # partitions: 10 records each, sizes that add up to what went in
    for p in ("0", "1"):
        assert value(after, "headrace_partition_log_end_offset", topic="metered", partition=p) == 10
        assert value(after, "headrace_partition_high_watermark", topic="metered", partition=p) == 10
    sizes = sum(
        value(after, "headrace_partition_size_bytes", topic="metered", partition=p)
        for p in ("0", "1")
    )
    assert sizes == bytes_in
    # flushes: flush.messages=1 makes every produce wait for a group commit
    flushes = value(after, "headrace_flush_duration_seconds_count")
    assert flushes - value(before, "headrace_flush_duration_seconds_count") >= 1
    assert value(after, "headrace_flush_group_size_sum") >= 20  # every ack came from one
    assert value(after, "headrace_flush_log_fsyncs_total") >= flushes
    # errors by code
    assert value(after, "headrace_errors_total", api="CREATE_TOPICS", error="TOPIC_ALREADY_EXISTS") == 1
    # the group: classic, Empty (assign() never joins), and its lag per partition
    assert value(after, "headrace_consumer_groups", type="classic", state="Empty") == 1
    lag = "headrace_consumer_group_lag"
    assert value(after, lag, group="metered-readers", topic="metered", partition="0") == 6
    assert value(after, lag, group="metered-readers", topic="metered", partition="1") == 0
    for q in range(4):
        assert ("headrace_handler_queue_depth", (("queue", str(q)),)) in after
    assert value(after, "headrace_log_cleaner_passes_total", kind="retention") >= 0


def test_per_partition_series_are_bounded():
    with headrace.Broker({"metrics.port": 0, "metrics.partition.series.max": 3}) as broker:
        broker.create_topic("wide", partitions=5)
        samples = scrape(broker.metrics_port)
    ends = [k for k in samples if k[0] == "headrace_partition_log_end_offset"]
    assert len(ends) == 3
    assert value(samples, "headrace_partitions") == 5
    assert value(samples, "headrace_partition_series_dropped", family="partition") == 2


def test_log_cleaner_passes_are_counted():
    with headrace.Broker(
        {"metrics.port": 0, "log.retention.check.interval.ms": 50, "log.cleaner.backoff.ms": 50}
    ) as broker:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            samples = scrape(broker.metrics_port)
            passes = [
                value(samples, "headrace_log_cleaner_passes_total", kind=k)
                for k in ("retention", "compaction")
            ]
            if min(passes) >= 2:
                break
            time.sleep(0.05)
        assert min(passes) >= 2


def test_ready_only_once_the_logs_are_loaded(monkeypatch, tmp_path):
    """/health answers while the logs load; /ready says 503 until they are loaded."""
    release = threading.Event()
    load = topics_module.TopicManager.load

    def slow_load(self, *args, **kwargs):
        release.wait(30)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(topics_module.TopicManager, "load", slow_load)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    broker = headrace.Broker({"metrics.port": port}, data_dir=tmp_path)
    starting = threading.Thread(target=broker.start)
    starting.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status = get(port, "/health")
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert status == (200, "ok\n")
        assert get(port, "/ready") == (503, "not ready\n")
        assert value(scrape(port), "headrace_ready") == 0
        release.set()
        starting.join(30)
        assert get(port, "/ready") == (200, "ready\n")
        assert get(port, "/nothing")[0] == 404
    finally:
        release.set()
        starting.join(30)
        broker.close()


def test_an_endless_request_head_is_cut_off():
    with headrace.Broker({"metrics.port": 0}) as broker:
        with socket.create_connection(("127.0.0.1", broker.metrics_port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000)
            assert s.recv(100) == b""  # closed without an answer: the head is over 8 KiB
        assert get(broker.metrics_port, "/health")[0] == 200


def test_metrics_are_off_by_default():
    with headrace.Broker() as broker:
        assert broker.metrics_port is None
