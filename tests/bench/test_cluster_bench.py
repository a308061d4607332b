"""The cluster benchmark's pieces (bench/cluster.py, bench/wireproduce.py) against real brokers.

Not a performance test: nothing here asserts on speed. The wire client runs against one real
Headrace broker; the whole harness, tiny, needs ZooKeeper (Java and Maven) and skips without.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, TopicPartition

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import cluster, wire, wireproduce  # noqa: E402
from headrace.broker.tools.process import BrokerProcess  # noqa: E402
from headrace.protocol.records import decode_records  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_batch_of_many_records_decodes_with_the_brokers_codec():
    batch = wire.record_batch(b"v" * 10, timestamp_ms=5, count=3)
    records = decode_records(batch)
    assert [(off, ts, value) for off, ts, _key, value, _h in records] == [
        (0, 5, b"v" * 10), (1, 5, b"v" * 10), (2, 5, b"v" * 10)]


def test_cold_start_poller_creates_the_topic_where_metadata_does_not(tmp_path):
    """S7's poller (``wire.first_ack``) against a broker that creates no topic on Metadata,
    as Tansu: without ``create`` no produce is ever acknowledged; with it, a CreateTopics and
    then the acknowledged produce, stored once."""
    overrides = {"auto.create.topics.enable": "false"}
    with BrokerProcess(tmp_path / "data", overrides) as broker:
        with pytest.raises(TimeoutError):
            wire.first_ack("127.0.0.1", broker.port, "s7", time.monotonic() + 1)
        assert wire.first_ack("127.0.0.1", broker.port, "s7", time.monotonic() + 30,
                              create=True) <= time.monotonic()
        assert wire.end_offsets("127.0.0.1", broker.port, "s7") == {0: 1}


def test_wire_client_produces_to_manually_placed_partitions(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        with wire.WireClient("127.0.0.1", broker.port) as c:
            assert c.create_topic("t", 3, assignments={0: [1], 1: [1], 2: [1]}) == 0
            _terr, parts = c.metadata(["t"])["t"]
            assert sorted(parts) == [0, 1, 2] and c.brokers == {1: ("127.0.0.1", broker.port)}
        now = time.monotonic()
        out = tmp_path / "client.json"
        res = subprocess.run(
            [sys.executable, "-m", "bench.wireproduce", "--bootstrap", broker.bootstrap,
             "--topic", "t", "--record-size", "1000", "--batch-records", "4", "--inflight", "2",
             "--start-at", repr(now + 0.5), "--end-at", repr(now + 1.5), "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        result = json.loads(out.read_text())
        assert result["errors"] == {} and result["failures"] == []
        assert result["acked_records"] > 0 and result["acked_bytes"] == result[
            "acked_records"] * 1000
        assert len(result["latencies_ms"]) == result["acked_records"] // 4
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
        try:
            ends = [consumer.get_watermark_offsets(TopicPartition("t", p), timeout=10)[1]
                    for p in range(3)]
        finally:
            consumer.close()
        # every partition written (the client cycles over them), in whole batches, and at
        # least what the window counted (the warm-up and the drain add more)
        assert all(e > 0 and e % 4 == 0 for e in ends), ends
        assert sum(ends) >= result["acked_records"]


def test_paced_wire_clients_hold_the_offered_rate(tmp_path):
    """``drive`` with ``rate``: two processes together send what was offered (the rate sweep's
    runs), not the broker's maximum; every acknowledged record is in the log."""
    with BrokerProcess(tmp_path / "data") as broker:
        with wire.WireClient("127.0.0.1", broker.port) as c:
            assert c.create_topic("t", 2, assignments={0: [1], 1: [1]}) == 0
        meter = cluster.Meter({"broker": [broker.pid]}, tmp_path)
        res = wireproduce.drive(broker.bootstrap, "t", 2, meter, tmp_path / "logs", "paced",
                                record_size=1000, batch_records=10, inflight=4, warmup=1.0,
                                seconds=3.0, rate=200_000)
        assert res["errors"] == {} and res["requests_acked"] > 0
        # 200 kB/s offered: 200 records/s, 20 requests/s in all, 60 in the window
        assert 180 <= res["records_per_sec"] <= 220, res["records_per_sec"]
        assert res["p99_ms"] is not None and res["broker_cpu_s"] >= 0
        with wire.WireClient("127.0.0.1", broker.port) as c:
            ends = c.list_offsets("t", [0, 1])
        assert sum(offset for _err, offset in ends.values()) == res["records_acked"]


def test_records_check_compares_latest_offsets_with_what_was_acknowledged(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        with wire.WireClient("127.0.0.1", broker.port) as c:
            assert c.create_topic("t", 2, assignments={0: [1], 1: [1]},
                                  configs={"min.insync.replicas": "1"}) == 0
        now = time.monotonic()
        out = tmp_path / "client.json"
        res = subprocess.run(
            [sys.executable, "-m", "bench.wireproduce", "--bootstrap", broker.bootstrap,
             "--topic", "t", "--record-size", "100", "--batch-records", "3", "--inflight", "2",
             "--start-at", repr(now + 0.3), "--end-at", repr(now + 0.8), "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        acked = json.loads(out.read_text())["all_acked_records"]
        view = SimpleNamespace(addresses=[("127.0.0.1", broker.port)])
        assert acked > 0 and cluster.check_records(view, "t", 2, acked) == acked
        with pytest.raises(RuntimeError, match="records check failed"):
            cluster.check_records(view, "t", 2, acked + 3)
        with wire.WireClient("127.0.0.1", broker.port) as c:
            assert c.create_topic("bad", 1, configs={"min.insync.replicas": "x"}) != 0


def test_the_replicated_part_interleaves_the_systems_per_flush_mode():
    args = argparse.Namespace(parts="replicated", runs=2, replicated_modes="default,durable",
                              replicated_drivers="perf")
    runs = cluster.plan(args)
    assert [(r.system, r.durable, r.rf) for r in runs] == [
        ("kafka", False, 3), ("headrace", False, 3), ("kafka", True, 3), ("headrace", True, 3),
        ("headrace", False, 3), ("kafka", False, 3), ("headrace", True, 3), ("kafka", True, 3)]
    rows = cluster.summarise([dict(sample("replicated", s, 3, "perf", mib, 10.0), durable=d)
                              for s, mib, d in (("kafka", 50, False), ("headrace", 100, False),
                                                ("kafka", 20, True))])
    assert [cluster._name(r) for r in rows] == [
        "Apache Kafka, 3 brokers, ProducerPerformance, default flush",
        "Headrace, 3 brokers, ProducerPerformance, default flush",
        "Apache Kafka, 3 brokers, ProducerPerformance, log.flush.interval.messages=1"]
    [ratio] = cluster.ratios(rows)  # no Headrace row for the durable mode: no ratio
    assert ratio["what"] == "Headrace x3 / Kafka x3 (ProducerPerformance, default flush, RF=3)"
    assert ratio["mib_per_sec"] == pytest.approx(2.0)


def sample(part, system, n, driver, mib, broker_cpu_s, wall=10.0):
    s = {"part": part, "system": system, "brokers": n, "driver": driver, "rep": 0,
         "loadavg": [0.5, 0.5, 0.5], "mib_per_sec": mib, "p50_ms": 5.0, "p99_ms": 9.0,
         "bytes": mib * wall * 2**20, "wall_s": wall, "broker_cpu_s": broker_cpu_s,
         "broker_per_process_cpu_s": [broker_cpu_s], "client_cpu_s": 1.0,
         "machine_busy_cores": 1.5}
    return cluster.derive(s)


def test_summary_ratios_and_readme_section(tmp_path):
    samples = [sample("scaling", "headrace", 1, "wire", 100, 10.0),
               sample("scaling", "headrace", 2, "wire", 150, 15.0),
               sample("versus", "kafka", 3, "perf", 50, 20.0),
               sample("versus", "headrace", 3, "perf", 100, 5.0)]
    assert samples[0]["mib_per_broker_cpu_s"] == pytest.approx(100.0)
    assert samples[0]["other_cores"] == pytest.approx(1.5 - 1.0 - 0.1)
    rows = cluster.summarise(samples + [{"part": "scaling", "system": "headrace", "brokers": 1,
                                         "driver": "wire", "status": "failed"}])
    assert [r["runs"] for r in rows] == [1, 1, 1, 1]
    ratios = {r["what"]: r for r in cluster.ratios(rows)}
    scale = ratios["Headrace --workers 2 / --workers 1 (wire client)"]
    assert scale["mib_per_sec"] == pytest.approx(1.5)
    assert scale["mib_per_broker_cpu_s"] == pytest.approx(1.0)
    versus = ratios["Headrace x3 / Kafka x3 (ProducerPerformance)"]
    assert versus["mib_per_sec"] == pytest.approx(2.0)
    assert versus["broker_cpu_ms_per_mib"] == pytest.approx(0.125)
    results = {"command": "python -m bench.cluster", "stamp": "x", "headrace_at": "abc",
               "machine": {}, "loadavg_start": [0.1, 0.2, 0.3], "loadavg_end": [1, 1, 1],
               "samples": samples, "summary": rows, "ratios": list(ratios.values()),
               "partitions": 6, "clients": 4, "inflight": 4, "seconds": 20.0, "warmup": 5.0,
               "producers": 2, "perf_records": 100, "runs": 1}
    readme = tmp_path / "README.md"
    readme.write_text("# T\n\n<!-- bench:start -->\nkept\n<!-- bench:end -->\n")
    cluster.update_readme(results, readme)
    first = readme.read_text()
    assert "kept" in first and first.count(cluster.START) == 1
    assert "| Headrace, 2 workers, wire client | 150 |" in first
    readme.write_text(first + "\ntrailing\n")
    results["loadavg_start"] = [0.9, 0.9, 0.9]
    cluster.update_readme(results, readme)
    second = readme.read_text()
    assert second.count(cluster.START) == 1 and second.endswith("\ntrailing\n")
    assert "[0.9, 0.9, 0.9]" in second and "[0.1, 0.2, 0.3]" not in second
    cluster.write_csv(samples, tmp_path / "c.csv")
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 5


def test_rf3_rows_of_the_readme_headline_use_default_flush_runs():
    def rf3(system, driver, mib, cpu_s, durable):
        return dict(sample("replicated", system, 3, driver, mib, cpu_s), durable=durable)

    samples = [rf3("kafka", "wire", 250, 18.0, False), rf3("headrace", "wire", 500, 15.0, False),
               rf3("kafka", "wire", 200, 18.0, True), rf3("headrace", "wire", 300, 15.0, True)]
    rows = cluster.headline_rows({"summary": cluster.summarise(samples)})
    assert rows == [
        "| R1: 3 brokers, RF=3, 64 KiB records, acks=all, wire client: throughput (MiB/s) "
        "| 250 | 500 | 2.00x |",
        "| R1: 3 brokers, RF=3, 64 KiB records, acks=all, wire client: broker CPU per MiB (ms) "
        "| 7.2 | 3.0 | 0.42x |",
    ]  # (18 CPU-s over 2,500 MiB, 15 over 5,000; no ProducerPerformance runs: no rows)


def test_runs_disturbed_by_other_work_are_left_out_only_when_a_quiet_one_exists():
    quiet = sample("scaling", "headrace", 1, "wire", 100, 10.0)
    busy = [dict(sample("scaling", "headrace", 1, "wire", mib, 10.0), other_processes_cores=1.0)
            for mib in (20, 30)]
    only_busy = dict(sample("scaling", "headrace", 2, "wire", 40, 10.0), other_processes_cores=1.0)
    rows = cluster.summarise([quiet, *busy, only_busy], max_other=0.3)
    assert (rows[0]["mib_per_sec"], rows[0]["counted"], rows[0]["disturbed"]) == (100, 1, 2)
    assert (rows[1]["mib_per_sec"], rows[1]["counted"], rows[1]["disturbed"]) == (40, 1, 1)
    assert cluster.summarise([quiet, *busy])[0]["mib_per_sec"] == 30  # no rule: all runs
    results = {"summary": rows, "ratios": []}
    assert "Headrace, 1 workers, wire client (1 of 3 runs)" in cluster.markdown(results)


def test_percentile_nearest_rank():
    assert wireproduce.percentile([], 99) is None
    assert wireproduce.percentile([3.0], 99) == 3.0
    assert wireproduce.percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert wireproduce.percentile([float(i) for i in range(1, 101)], 50) == 50.0


def test_harness_tiny_two_workers(tmp_path):
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.skip("ZooKeeper needs Java and Maven")
    out = tmp_path / "results"
    res = subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--parts", "scaling", "--drivers", "wire",
         "--runs", "1", "--seconds", "1", "--warmup", "1", "--headrace-ref", "worktree",
         "--idle-wait", "0",
         "--no-plot", "--out", str(out), "--raw-dir", str(tmp_path / "raw")],
        cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert res.returncode == 0, res.stderr[-4000:]
    results = json.loads((out / "cluster.json").read_text())
    by_n = {s["brokers"]: s for s in results["samples"]}
    assert sorted(by_n) == [1, 2]
    assert len(by_n[2]["broker_per_process_cpu_s"]) == 3  # the parent and two workers
    assert sorted(set(by_n[2]["leaders"].values())) == [1, 2]
    for s in by_n.values():
        assert s["mib_per_sec"] > 0 and s["errors"] == {} and s["broker_cpu_s"] > 0
    assert "[bench" in res.stderr  # progress is shown
