"""The benchmark harness at tiny sizes, Headrace only, so that it cannot rot.

Not a performance test: nothing here compares or asserts on numbers. It needs Java and Maven
(Kafka's ProducerPerformance drives the broker) and skips without them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report, wire  # noqa: E402

pytestmark = pytest.mark.timeout(330)


@pytest.fixture(scope="module")
def kafka_classpath():
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.skip("Java and Maven are needed to run Kafka's perf tools")
    from bench.apache_kafka import classpath
    try:
        return classpath()
    except Exception as e:  # no network, no Maven Central
        pytest.skip(f"Apache Kafka's class path could not be resolved: {e}")


def run_in_own_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run the harness in a process group of its own; past ``timeout``, SIGTERM the whole
    group (the harness and the brokers it started), so that no broker is left running."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        pytest.fail(f"the harness took more than {timeout}s:\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_harness_tiny_headrace_only(tmp_path, kafka_classpath):
    """One layout (pinned: no ZooKeeper to start), a curve of 1 and 2 clients, the latency
    sweep on S1 only, at one load."""
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "bench.run", "--size", "tiny", "--runs", "1",
           "--brokers", "headrace", "--scenarios", "S1,S4,S6,S7", "--no-iperf",
           "--layouts", "pinned", "--sweep", "S1", "--sweep-fractions", "0.5",
           "--headrace-ref", "worktree",
           "--out", str(out), "--raw-dir", str(tmp_path / "raw")]
    res = run_in_own_group(cmd, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert len(results["loadavg_start"]) == 3
    for sid, metric in [("S1", "mb_per_sec"),
                        ("S4", "records_per_sec"), ("S6", "p99_ms"), ("S7", "cold_start_ms")]:
        assert results["scenarios"][sid]["median"]["headrace"][metric] > 0, sid
    s1 = results["scenarios"]["S1"]
    curve = s1["kinds"]["headrace"]["curve"]
    assert [s["clients"] for s in curve][:1] == [1]
    # every measured run proved its work: the broker holds exactly the records acknowledged
    for s in curve + s1["kinds"]["headrace"]["samples"]:
        assert s["driver"] == "wire"
        assert s["records_stored"] == s["records_acked"] > 0
        # the broker's CPU was read from /proc; a tiny run may take less than one tick of it
        assert s["broker_cpu_s"] >= 0
        if s["broker_cpu_s"] > 0:
            assert s["mib_per_broker_cpu_s"] > 0
    assert [s["load"] for s in s1["kinds"]["headrace"]["sweep"]] == ["50% of own maximum"]
    assert results["machine"]["data_filesystem"]["fstype"]
    assert results["machine"]["fsync_start"]["p50_ms"] > 0
    md = (out / "results.md").read_text()
    assert "| S1: " in md and "Load average at start" in md
    assert "[bench" in res.stderr  # progress is shown


def test_record_batch_crc_and_layout():
    batch = wire.record_batch(b"value", timestamp_ms=1)
    import crc32c
    import struct
    base, length, _epoch, magic, crc = struct.unpack_from(">qiibI", batch)
    assert (base, magic, length) == (0, 2, len(batch) - 12)
    assert crc == crc32c.crc32c(batch[21:])


def test_merge_puts_a_run_of_another_layout_in_that_layouts_table():
    from bench.run import merge

    def run(layout: str, sid: str, value: float) -> dict:
        return {"command": f"run {layout}", "stamp": "x", "loadavg_start": [0, 0, 0],
                "headline_layout": layout, "layouts": {layout: {"kinds": ["headrace"]}},
                "scenarios": {sid: {"median": {"headrace": {"mb_per_sec": value}}}}}

    base = run("unpinned", "S3", 1.0)
    base["scenarios"]["S1"] = {"median": {"headrace": {"mb_per_sec": 5.0}}}
    pinned = merge(base, run("pinned", "S3", 2.0))
    assert pinned["scenarios"] == base["scenarios"]  # the headline table is untouched
    assert pinned["layouts"]["pinned"]["scenarios"]["S3"]["median"]["headrace"]["mb_per_sec"] == 2.0
    again = merge(pinned, run("pinned", "S1", 3.0))
    assert list(again["layouts"]["pinned"]["scenarios"]) == ["S1", "S3"]
    rerun = run("unpinned", "S3", 4.0)
    rerun["layouts"]["unpinned"]["kinds"] = ["headrace-w2", "headrace"]
    head = merge(again, rerun)
    assert head["scenarios"]["S3"]["median"]["headrace"]["mb_per_sec"] == 4.0
    assert head["layouts"]["unpinned"]["kinds"] == ["headrace", "headrace-w2"]  # every one run
    assert head["scenarios"]["S1"] == base["scenarios"]["S1"]
    assert head["layouts"]["pinned"] == again["layouts"]["pinned"]
    assert [r["layout"] for r in head["reruns"]] == ["pinned", "pinned", "unpinned"]


def test_each_system_is_compared_in_its_better_variant():
    """Kafka's and Headrace's two variants: the higher throughput (S3), the lower p99 (S6) is
    compared, from that variant alone; the other is shown as not compared."""
    from bench.run import _fail_cells, summarise, summarise_entry
    from bench.scenarios import SCENARIOS

    def run(mib: float, cpu: float) -> dict:
        return {"clients": 1, "mb_per_sec": mib, "records_per_sec": mib * 1024,
                "mib_per_broker_cpu_s": mib / cpu}

    s3 = {"kinds": {kind: {"curve": [run(mib, cpu)], "samples": [run(mib, cpu)] * 3,
                           "sweep": []}
                    for kind, mib, cpu in [("kafka-default", 100, 1.0), ("kafka-tuned", 90, 0.5),
                                           ("headrace-w2", 110, 1.4),
                                           ("headrace-single", 130, 0.9)]}}
    summarise_entry(SCENARIOS["S3"], s3)
    assert (s3["best_kafka"], s3["headrace_kind"]) == ("kafka-default", "headrace-single")
    assert s3["median"]["headrace"]["mib_per_broker_cpu_s"] == 130 / 0.9
    assert s3["median"]["kafka"]["mib_per_broker_cpu_s"] == 100 / 1.0
    md = report.table({"scenarios": {"S3": s3}})
    assert "(kafka-default, headrace-single)" in md
    assert "headrace-w2 (not compared)" in md and "kafka-tuned (not compared)" in md

    s6 = {"samples": {kind: [{"p99_ms": p99}] * 3 for kind, p99 in
                      [("kafka-default", 9.0), ("kafka-tuned", 8.0), ("headrace-w2", 12.0),
                       ("headrace-single", 7.0)]}}
    s6["samples"]["headrace-w2"][0] = {"status": "failed", "reason": "no records received"}
    summarise({"scenarios": {"S6": s6}})
    _fail_cells(SCENARIOS["S6"], s6)
    assert (s6["best_kafka"], s6["headrace_kind"]) == ("kafka-tuned", "headrace-single")
    assert s6["median"]["headrace"]["p99_ms"] == 7.0
    assert s6["status"]["headrace-w2"].startswith("failed")


def test_readme_rewrite_only_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nkept\n")
    results = {"command": "python -m bench.run", "size": "tiny", "runs": 1, "stamp": "x",
               "loadavg_start": [0.1, 0.2, 0.3], "machine": {}, "scenarios": {}}
    report.update_readme(results, tmp_path, readme)
    first = readme.read_text()
    assert first.startswith("# Title\n\nkept\n") and first.count(report.START) == 1
    readme.write_text(first + "\ntrailing\n")
    results["loadavg_start"] = [0.5, 0.5, 0.5]
    report.update_readme(results, tmp_path, readme)
    second = readme.read_text()
    assert second.count(report.START) == 1 and second.endswith("\ntrailing\n")
    assert "[0.5, 0.5, 0.5]" in second


def test_profile_summary_from_collapsed_stacks(tmp_path):
    f = tmp_path / "S1.collapsed"
    f.write_text("thread (0x1);main (a/x.py:1);work (a/y.py:2) 3\n"
                 "thread (0x1);main (a/x.py:1) 1\n")
    total, own, incl = report.top_functions(report.read_collapsed(f))
    assert total == 4
    assert own[0] == ("a/y.py:work", 75.0)
    assert dict(incl)["a/x.py:main"] == 100.0
    assert "<svg" in report.flamegraph_svg(report.read_collapsed(f), "t")


def test_durable_latency_runs_the_disk_alone_and_headrace(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bench.durablelatency", "--seconds", "2", "--rounds", "1",
         "--workers", "1", "--no-kafka", "--mib-per-sec", "20", "--data", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("round 1")]
    assert [r[2] for r in rows] == ["disk:", "headrace:"]
    for r in rows:  # p50 <= p99 <= p99.9, all positive
        p50, p99, p999 = float(r[4]), float(r[6]), float(r[8])
        assert 0 < p50 <= p99 <= p999


def test_pagecache_measures_every_way_of_filling_it(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bench.pagecache", "--mib", "16", "--rounds", "1", "--settle", "0",
         "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("round 1")]
    assert len(rows) == 4
    assert all(float(ln.split("MiB/s")[0].split()[-1]) > 0 for ln in rows)
    assert list(tmp_path.iterdir()) == [], "its files are removed"


def test_fetchpath_serves_a_topic_and_counts_context_switches(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bench.fetchpath", "--gib", "0.02", "--batch-kib", "64",
         "--partitions", "1", "--consumers", "1", "--seconds", "1", "--warmup", "0.2",
         "--rounds", "1", "--partition-max-bytes", "1048576", "--receive-buffer", "65536",
         "--data", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = [ln for ln in out.stdout.splitlines() if ln.startswith("round 1")]
    assert "working tree:" in row and "context switches per MiB" in row
    assert float(row.split("MiB/s")[0].split()[-1]) > 0


def test_a_sweep_point_is_shortened_or_skipped_to_fit_the_disk(tmp_path):
    """The points of one sweep share a broker whose log keeps every point's records, so each
    writes at most 70% of the free space at its start: the size's window when that fits, a
    shorter one (said in the point's note) when not, none below the small size's window."""
    import argparse

    from bench.context import Context
    from bench.run import RECORD_OVERHEAD, sweep_records
    from bench.scenarios import SECONDS, select

    ctx = Context(argparse.Namespace(size="full", runs=1, brokers="headrace",
                                     raw_dir=str(tmp_path), data_dir=str(tmp_path),
                                     quiet=True, profile_idle=False), "s")
    ctx.data.mkdir(parents=True)
    s1 = select("S1")[0]
    stored = s1.record_size + RECORD_OVERHEAD
    fits = shutil.disk_usage(ctx.data).free * 0.7 / stored  # records
    full = SECONDS["full"]

    records, why = sweep_records(s1, ctx, fits / full / 2)  # half the disk's room
    assert why is None and records == int(fits / full / 2 * full)
    records, why = sweep_records(s1, ctx, fits / 20)  # room for 20 s of the 30
    assert records == pytest.approx(fits, rel=0.01) and why.startswith("window 20.0 s, not 30.0")
    records, why = sweep_records(s1, ctx, fits / 5)  # room for 5 s, below the small size's 10
    assert records == 0 and "free on the data disk" in why


def test_a_curve_point_without_room_deletes_the_earlier_points_topics_first(tmp_path):
    """A curve's points share a broker that keeps each point's records: when the next point
    would not fit on the disk, the earlier points' topics are deleted (DeleteTopics) and the
    harness waits until their files are gone."""
    import argparse

    from bench.context import Context
    from bench.run import Session
    from bench.scenarios import select

    ctx = Context(argparse.Namespace(size="tiny", runs=1, brokers="headrace", driver="wire",
                                     raw_dir=str(tmp_path), data_dir=None, quiet=True,
                                     profile_idle=False), "s")
    s1 = select("S1")[0]
    with Session(s1, "headrace", ctx, "curve") as sess:
        sess.produce(1, 0, seconds=1)
        sess.produce(1, 0, seconds=1)
        logs = [sess.broker.data_dir / f"bench-{i}-0" for i in (1, 2)]
        assert all(d.is_dir() and any(d.iterdir()) for d in logs)

        def short() -> str | None:
            return "the points' files are still there" if any(d.exists() for d in logs) else None

        assert short() is not None
        sess.make_room(short, wait_s=30)
        assert short() is None
        with wire.WireClient("127.0.0.1", sess.broker.port) as client:
            assert client.delete_topics(["bench-1"]) == {"bench-1": 3}  # gone: UNKNOWN_TOPIC


def test_placement_prints_what_a_join_moves():
    done = subprocess.run(
        [sys.executable, "-m", "bench.placement", "--brokers", "3", "--topics", "20"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(",")[0] for line in lines] == ["RF 1", "RF 3"]
    assert all("uneven 0," in line and "(1/N 25.0%" in line for line in lines)
