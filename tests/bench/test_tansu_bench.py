"""Tansu as the third system of the benchmark harness (``bench/tansu.py``, issue 36).

The harness run needs the Tansu binary already built in the cache (``python -m bench.tansu
install``, many minutes of cargo): it is skipped, saying so, when it is not there, so that a
test run never compiles Rust. The report's rows with a third system are checked on results
made by the harness's own summary code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import brokers, report, tansu  # noqa: E402
from bench.run import runnable, summarise_entry  # noqa: E402
from bench.scenarios import SCENARIOS  # noqa: E402

from test_bench_smoke import run_in_own_group  # noqa: E402


def test_tiny_s4_beside_headrace(tmp_path):
    """S4 at tiny size, Headrace and Tansu through the same curve, measured run and sweep:
    every run checked against the end offsets, Tansu a system of its own in the results."""
    if tansu.installed() is None:
        pytest.skip(f"Tansu {tansu.TANSU_VERSION} is not built in {tansu.root()} (building it "
                    "takes many minutes of cargo: `python -m bench.tansu install`)")
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "bench.run", "--size", "tiny", "--runs", "1",
           "--brokers", "headrace,tansu", "--scenarios", "S4", "--no-iperf",
           "--layouts", "pinned", "--sweep", "S4", "--sweep-fractions", "0.5",
           "--headrace-ref", "worktree", "--no-plots",
           "--out", str(out), "--raw-dir", str(tmp_path / "raw")]
    res = run_in_own_group(cmd, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["tansu"]["version"] == tansu.TANSU_VERSION
    assert "sqlite" in results["tansu"]["storage"].lower()
    s4 = results["scenarios"]["S4"]
    assert set(s4["kinds"]) == {"headrace", "tansu"}
    for kind in ("headrace", "tansu"):
        d = s4["kinds"][kind]
        for s in d["curve"] + d["samples"] + d["sweep"]:
            assert not s.get("status"), s
            assert s["records_stored"] == s["records_acked"] > 0
        assert s4["median"][kind]["records_per_sec"] > 0
    assert results["settings"]["tansu"]["version"].startswith("tansu")
    md = (out / "results.md").read_text()
    assert md.startswith("# Apache Kafka vs Headrace vs Tansu")
    assert "| Headrace/Tansu |" in md and "SQLite" in md


def test_tansu_skips_the_durable_scenario_and_says_why():
    entry: dict = {}
    kinds = runnable(SCENARIOS["S2"], ["kafka-default", "headrace", "tansu"], entry)
    assert kinds == ["kafka-default", "headrace"]
    assert "flushes every produce" in entry["skipped"]["tansu"]
    assert runnable(SCENARIOS["S4"], ["headrace", "tansu"], {}) == ["headrace", "tansu"]
    with pytest.raises(ValueError):
        brokers.make_broker("tansu", Path("unused"), durable=True)
    assert [brokers.system_of(k) for k in ("kafka-tuned", "headrace-w2", "tansu")] == [
        "kafka", "headrace", "tansu"]


def test_report_rows_with_a_third_system(tmp_path):
    """Tansu's column, the Headrace/Tansu ratio beside Headrace/Kafka (whose bar alone is
    judged), a skipped scenario's reason, and the README's line for Tansu; without Tansu the
    table keeps its two systems."""
    def run(rps: float, cores: float) -> dict:
        return {"clients": 1, "mb_per_sec": rps * 100 / 2**20, "records_per_sec": rps,
                "mib_per_broker_cpu_s": rps * 100 / 2**20 / cores, "broker_cores": cores}

    s4 = {"title": SCENARIOS["S4"].title,
          "kinds": {kind: {"curve": [run(rps, cores)], "samples": [run(rps, cores)] * 3,
                           "sweep": []}
                    for kind, rps, cores in [("kafka-default", 1_000_000, 1.0),
                                             ("headrace", 1_100_000, 1.1),
                                             ("tansu", 400_000, 1.6)]}}
    summarise_entry(SCENARIOS["S4"], s4)
    assert s4["median"]["tansu"]["records_per_sec"] == 400_000
    s2 = {"title": SCENARIOS["S2"].title, "kinds": {}}
    runnable(SCENARIOS["S2"], ["tansu"], s2)
    results = {"command": "python -m bench.run", "size": "tiny", "runs": 3, "stamp": "x",
               "loadavg_start": [0.1, 0.1, 0.1], "machine": {"kafka_version": "3.9.2"},
               "tansu": {"version": "0.6.0", "features": ["libsql"], "storage": tansu.STORAGE},
               "scenarios": {"S2": s2, "S4": s4}}

    lines = report.table(results).splitlines()
    assert lines[0] == ("| scenario | metric | Kafka (better variant) | Headrace | Tansu | "
                        "Headrace/Kafka | Headrace/Tansu | bar | met |")
    width = lines[0].count("|")
    assert all(ln.count("|") == width for ln in lines), "every row has every column"
    [rps] = [ln for ln in lines if "records/s (rec/s)" in ln]
    assert "| 1,000,000 | 1,100,000 | 400,000 | 1.10x | 2.75x | >= 1x Kafka | yes |" in rps
    assert any("tansu: skipped: " + brokers.TANSU_NOT_DURABLE[:40] in ln for ln in lines)
    assert "tansu (not compared)" not in "\n".join(lines)

    md = report.markdown(results)
    assert "Tansu 0.6.0" in md and "SQLite" in md
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.HEADLINE_START}\n{report.HEADLINE_END}\n")
    (tmp_path / "docs").mkdir()
    headline = report.headline_section(results, tmp_path / "docs" / "benchmarks.md", readme)
    assert "| S4: 1 partition, 100-byte records, acks=all: records/s (rec/s) | 1,000,000 | " \
           "1,100,000 | 1.10x |" in headline  # the Kafka comparison as before
    assert "S2 skipped; S4 400,000 rec/s (Headrace/Tansu 2.75x)." in headline

    del s4["kinds"]["tansu"], s4["median"]["tansu"]
    two = report.table({"scenarios": {"S4": s4}}).splitlines()
    assert two[0] == ("| scenario | metric | Kafka (better variant) | Headrace | "
                      "Headrace/Kafka | bar | met |")
