"""``python -m bench.startup`` once, without Apache Kafka, so that it cannot rot.

Not a performance test: it checks that both Headrace kinds reach a first acknowledged
produce and that the table is printed, not how fast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_startup_bench_runs_headrace_kinds():
    done = subprocess.run(
        [sys.executable, "-m", "bench.startup", "--runs", "1", "--no-kafka"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:]] == [
        "headrace.Broker (in-process)", "BrokerProcess"]
    assert "Load average before" in done.stdout
