"""The transactions benchmark (bench/transactions.py, bench/txproduce.py), tiny, Headrace only.

Not a performance test: nothing here asserts on speed. It runs the whole harness for one round
of a two-second window against one Headrace broker, so that the harness cannot rot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import transactions  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_tiny_run_commits_and_reads_back_exactly_what_was_committed(tmp_path):
    out = tmp_path / "results"
    # a process of its own, as the harness is run (it sets bench.brokers' CPU sets)
    res = subprocess.run(
        [sys.executable, "-m", "bench.transactions", "--brokers", "headrace", "--seconds", "2",
         "--warmup", "0.5", "--rounds", "1", "--no-plot", "--out", str(out),
         "--raw-dir", str(tmp_path / "raw")], cwd=ROOT, capture_output=True, text=True,
        timeout=100)
    assert res.returncode == 0, res.stderr[-4000:]
    results = json.loads((out / "transactions.json").read_text())
    [sample] = results["samples"]
    assert sample.get("status") != "failed", sample.get("reason")
    assert sample["system"] == "headrace" and sample["producers"] == 1
    assert sample["committed"] > 0 and sample["commits_per_sec"] > 0
    assert 0 < sample["commit_p50_ms"] <= sample["commit_p99_ms"] <= sample["commit_max_ms"]
    # the read_committed consumer saw exactly the records committed, warm-up included
    assert sample["read_committed_ok"] is True
    assert sample["read_committed"] == sample["committed_records"] >= sample["committed"] * 10
    assert sample["aborted"] == 0
    assert sample["broker_cpu_s"] >= 0 and sample["client_cpu_s"] > 0
    assert len(results["loadavg_start"]) == 3 and "load average" in sample["uptime"]
    [row] = results["summary"]
    assert row["commits_per_sec"] == sample["commits_per_sec"]
    assert "| Headrace (one process) | 1 |" in (out / "transactions.md").read_text()


def test_summary_compares_headrace_with_the_better_kafka_variant():
    def sample(system, rnd, cps, p99, cpu):
        return {"system": system, "round": rnd, "producers": 1, "loadavg": [1.0, 1.0, 1.0],
                "commits_per_sec": cps, "commit_p50_ms": p99 / 2, "commit_p99_ms": p99,
                "broker_cpu_s_per_1000": cpu}

    samples = [sample("headrace", 0, 300, 10, 2), sample("headrace", 1, 500, 20, 4),
               sample("kafka-default", 0, 100, 40, 8), sample("kafka-tuned", 0, 200, 30, 10),
               {"system": "kafka-tuned", "round": 1, "producers": 1, "loadavg": [1, 1, 1],
                "status": "failed"}]
    rows = transactions.summarise(samples)
    assert [r["system"] for r in rows] == ["headrace", "kafka-default", "kafka-tuned"]
    assert rows[0]["commits_per_sec"] == 400 and rows[0]["commits_per_sec_range"] == [300, 500]
    assert rows[2]["runs"] == 1 and rows[2]["failed"] == 1
    [ratio] = transactions.compared(rows)
    assert ratio["kafka"] == "kafka-tuned"
    assert ratio["commits_per_sec"] == 2.0 and ratio["commit_p99_ms"] == 0.5
    assert ratio["broker_cpu_s_per_1000"] == 0.3
