"""``python -m bench.faults``: Headrace and Apache Kafka 3.9 (ZooKeeper mode) through the same
faults, in one run, and the table that compares them.

    python -m bench.faults                                   # everything (about 3 hours)
    python -m bench.faults --modes leader-paused,lossy --rounds 3
    python -m bench.faults --systems headrace --modes all --rounds 1   # a quick look
    python -m bench.faults --only starts --starts 50         # the start check alone
    python -m bench.faults --only txn-latency                # transactions on a busy cluster
    python -m bench.faults --render bench/results/faults/faults.json  # the table again
    python -m bench.faults --render a/faults.json b/faults.json       # several runs, one table

Parts (``--only`` picks some; default all three):

* ``modes``: every mode of ``--modes`` (scenarios.MODES), each system in turn (Headrace, then
  Kafka), ``--rounds`` rounds each; per mode and system: acknowledged records, every safety
  anomaly, transactions per minute, the longest time a partition went without an
  acknowledgement after a fault and after a heal (median over the rounds and the worst), and
  Metadata answers without brokers.
* ``txn-latency``: 60 transactions across the three brokers on a busy cluster (after 30 s of
  its load), p50 and p99.
* ``starts``: ``--starts`` cluster starts, each with an RF=3 topic made at once.

Results: ``--out`` (default ``bench/results/faults``): ``faults.json`` (everything),
``faults.md`` (the table, with the bars: anomalies 0; Headrace's longest gaps at most Kafka's
+ 1 s; transactions per minute at least Kafka's; p50 <= 50 ms and p99 <= 250 ms; every start
makes its topic), ``faults.png``; ``--readme`` puts the table in docs/faults.md. Each run's data
directories and logs stay in ``--work`` (default a new directory in /tmp). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from . import checker
from .scenarios import MODES, SYSTEMS, Options, run_mode, run_starts, run_txn_latency, unavailable

PARTS = ("modes", "txn-latency", "starts")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "faults"


def say(text: str) -> None:
    print(time.strftime("%H:%M:%S ") + text, file=sys.stderr, flush=True)


def summary(result: dict) -> dict:
    """One row of the table from a scenarios.Result (as a dict)."""

    def worst(per_event: list[dict]) -> list[float]:
        return [max(g.values()) for g in per_event if g]

    fault, heal = worst(result["gaps_after_fault"]), worst(result["gaps_after_heal"])
    check = result["check"]
    return {
        "system": result["system"],
        "mode": result["mode"],
        "rounds": len({e["round"] for e in result["events"]}),
        "acked": check.get("acked", 0),
        "anomalies": checker.anomalies(check) if check else None,
        "anomaly_counts": {k: check[k] for k in checker.COUNTS if check.get(k)},
        "examples": check.get("examples", []),
        "txns_per_minute": round(result["txns_per_minute"], 1),
        "gap_after_fault_median": round(statistics.median(fault), 2) if fault else None,
        "gap_after_fault_max": round(max(fault), 2) if fault else None,
        "gap_after_heal_median": round(statistics.median(heal), 2) if heal else None,
        "gap_after_heal_max": round(max(heal), 2) if heal else None,
        "probe_bad": len(result["probe"].get("bad", [])) if result["probe"] else None,
        "error": result["error"],
    }


def _f(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def markdown(results: dict) -> str:
    opts = results["options"]
    hold = opts["hold_s"] or opts["session_ms"] / 1000 + 4
    lossy = next((r["options"] for r in results.get("raw", []) if r["mode"] == "lossy"), opts)
    runs = results.get("runs") or [results]
    lines = [
        "Fault suite: Headrace and Apache Kafka 3.9.2 (ZooKeeper mode), 3 brokers each; every"
        " broker, ZooKeeper and the clients in a network namespace of their own;"
        f" `zookeeper.session.timeout.ms={opts['session_ms']}`, RF=3,"
        f" `min.insync.replicas=2`, {opts['producers']} idempotent acks=all producers and"
        f" {opts['txn_producers']} transactional producer; faults held {hold:.0f} s (lossy:"
        f" {lossy['lossy_hold_s']:.0f} s of {lossy['loss']:.0%} loss and"
        f" {lossy['delay_ms']:.0f} +/- {lossy['jitter_ms']:.0f} ms each way). "
        + ("Run" if len(runs) == 1 else "Runs")
        + ": "
        + "; ".join(
            f"`{r['command']}` (Headrace {r.get('headrace_commit', '?')}, {r['started']})"
            for r in runs
        )
        + ".",
        "",
    ]
    rows = results.get("modes", [])
    if rows:
        lines += [
            "Gaps: per fault (or heal), the longest time a partition went without an"
            " acknowledgement, from the fault to the heal (after the fault) or from the heal to"
            " the next fault (after the heal); median over the rounds / worst round, seconds.",
            "",
            "| mode | system | rounds | acked | anomalies | txns/min | after fault | after heal"
            " | Metadata without brokers | bars |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        by_mode: dict[str, dict[str, dict]] = {}
        for r in rows:
            by_mode.setdefault(r["mode"], {})[r["system"]] = r
        for mode, systems in by_mode.items():
            for name in SYSTEMS:
                r = systems.get(name)
                if r is None:
                    continue
                bars = _bars(r, systems.get("kafka")) if name == "headrace" else ""
                anomalies = "-" if r["anomalies"] is None else str(r["anomalies"])
                if r["anomaly_counts"]:
                    anomalies += (
                        " (" + ", ".join(f"{k} {v}" for k, v in r["anomaly_counts"].items()) + ")"
                    )
                if r["error"]:
                    anomalies += f"; error: {r['error'][:120]}"
                lines.append(
                    f"| {mode} | {name} | {r['rounds']} | {r['acked']:,} | {anomalies} |"
                    f" {r['txns_per_minute']:.0f} | {_f(r['gap_after_fault_median'])} /"
                    f" {_f(r['gap_after_fault_max'])} | {_f(r['gap_after_heal_median'])} /"
                    f" {_f(r['gap_after_heal_max'])} | {r['probe_bad']} | {bars} |"
                )
        lines.append("")
    for t in results.get("txn_latency", []):
        lines.append(
            f"Transactions across brokers, busy cluster ({t['system']}): {t.get('commits')}"
            f" commits, p50 {_ms(t.get('p50_s'))}, p99 {_ms(t.get('p99_s'))}, max"
            f" {_ms(t.get('max_s'))} (leaders {t.get('leaders')}; {t.get('acked', 0):,} acks=all"
            f" records acknowledged in the {t.get('seconds', 0):.0f} s they took)."
        )
    for s in results.get("starts", []):
        lines.append(
            f"Starts ({s['system']}): {s['starts']} cluster starts, an RF=3 topic made at once in"
            f" {s['created']}; {len(s['failures'])} failed; {s['bad']} of {s['answers']} Metadata"
            f" answers during the starts without brokers or controller."
            + (f" Failures: {'; '.join(s['failures'][:3])}" if s["failures"] else "")
        )
    return "\n".join(lines) + "\n"


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def _bars(h: dict, k: dict | None) -> str:
    """Headrace's row against the bars (Kafka's row in the same run)."""
    out = ["safe" if h["anomalies"] == 0 and not h["error"] else "NOT safe"]
    if k is None or k["error"]:
        return ", ".join(out + ["no Kafka reference"])
    for what in ("gap_after_fault_max", "gap_after_heal_max"):
        if h[what] is not None and k[what] is not None:
            ok = h[what] <= k[what] + 1.0
            out.append(f"{what.split('_')[2]} {'met' if ok else 'NOT met'}")
    ok = h["txns_per_minute"] >= k["txns_per_minute"]
    out.append(f"txns/min {'met' if ok else 'NOT met'}")
    return ", ".join(out)


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("no matplotlib (pip install -e '.[bench]'): no plot")
        return
    rows = results.get("modes", [])
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    if not modes:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    width = 0.38
    for ax, what, title in (
        (axes[0], "gap_after_fault_max", "longest gap after the fault (worst round)"),
        (axes[1], "gap_after_heal_max", "longest gap after the heal (worst round)"),
    ):
        for k, name in enumerate(SYSTEMS):
            values = []
            for mode in modes:
                r = next((x for x in rows if x["mode"] == mode and x["system"] == name), None)
                values.append((r or {}).get(what) or 0)
            ax.bar([i + (k - 0.5) * width for i in range(len(modes))], values, width, label=name)
        ax.set_xticks(range(len(modes)), modes, rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylabel("seconds without an acknowledgement")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="all", help=f"comma-separated, or all: {', '.join(MODES)}")
    ap.add_argument("--systems", default="headrace,kafka")
    ap.add_argument("--only", default=",".join(PARTS), help=f"parts: {', '.join(PARTS)}")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--starts", type=int, default=50)
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--hold-s", type=float, default=None, help="default: the session + 4 s")
    ap.add_argument("--lossy-hold-s", type=float, default=60.0)
    ap.add_argument("--loss", type=float, default=0.03)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--jitter-ms", type=float, default=15.0)
    ap.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="write N one-record batches into partition 0 first; every fault then concerns it",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--work", type=Path, help="the runs' data and logs (default: a new /tmp dir)")
    ap.add_argument(
        "--render",
        type=Path,
        nargs="+",
        help="the table and plot of a faults.json again, into --out; of several runs' faults.json,"
        " one table (a later run's row replaces an earlier one of the same mode and system)",
    )
    ap.add_argument("--readme", action="store_true", help="put the table in docs/faults.md too")
    args = ap.parse_args(argv)
    if args.render:
        results = merge([json.loads(path.read_text()) for path in args.render])
        _write(results, args.out)
        if args.readme:
            update_readme(results)
        return 0
    why = unavailable()
    if why:
        say(f"cannot run the fault suite here: {why}")
        return 2
    modes = list(MODES) if args.modes == "all" else args.modes.split(",")
    systems = args.systems.split(",")
    parts = args.only.split(",")
    opts = Options(
        session_ms=args.session_ms,
        rounds=args.rounds,
        hold_s=args.hold_s,
        lossy_hold_s=args.lossy_hold_s,
        loss=args.loss,
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        prefill=args.prefill,
    )
    out = args.out
    runs = args.work or Path(tempfile.mkdtemp(prefix="headrace-faults-"))
    say(f"the runs' data and logs: {runs}")
    results: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m bench.faults " + " ".join(argv if argv is not None else sys.argv[1:]),
        "headrace_commit": _commit(),
        "options": asdict(opts),
        "modes": [],
        "raw": [],
        "txn_latency": [],
        "starts": [],
    }
    if "txn-latency" in parts:
        for name in systems:
            say(f"[{name} txn-latency] starting")
            t = run_txn_latency(name, runs / f"txn-latency-{name}", opts, say=say)
            say(f"[{name} txn-latency] p50 {_ms(t.get('p50_s'))}, p99 {_ms(t.get('p99_s'))}")
            results["txn_latency"].append(t)
            _write(results, out)
    if "modes" in parts:
        for mode in modes:
            for name in systems:
                say(f"[{name} {mode}] starting: {opts.rounds} rounds")
                r = asdict(run_mode(name, mode, runs / f"{mode}-{name}", opts, say=say))
                results["raw"].append(r)
                row = summary(r)
                results["modes"].append(row)
                say(
                    f"[{name} {mode}] done: {row['acked']:,} acked, {row['anomalies']} anomalies,"
                    f" {row['txns_per_minute']:.0f} txns/min, gaps after fault"
                    f" {row['gap_after_fault_max']} s, after heal {row['gap_after_heal_max']} s"
                )
                _write(results, out)
    if "starts" in parts:
        for name in systems:
            results["starts"].append(
                run_starts(name, args.starts, runs / f"starts-{name}", opts, say)
            )
            _write(results, out)
    _write(results, out)
    if args.readme:
        update_readme(results)
    return 0


def merge(runs: list[dict]) -> dict:
    """Several runs' results as one: ``runs`` lists each run's command, commit and start; a
    later run's row (mode and system, or system) replaces an earlier one's."""
    out = {**runs[0], "runs": [], "modes": [], "raw": [], "txn_latency": [], "starts": []}
    for run in runs:
        out["runs"] += run.get("runs") or [
            {k: run[k] for k in ("started", "command", "headrace_commit")}
        ]
        for part, key in (
            ("modes", ("mode", "system")),
            ("raw", ("mode", "system")),
            ("txn_latency", ("system",)),
            ("starts", ("system",)),
        ):
            for row in run.get(part, []):
                ident = [row.get(k) for k in key]
                out[part] = [r for r in out[part] if [r.get(k) for k in key] != ident] + [row]
    for part in ("modes", "raw"):
        out[part].sort(key=lambda r: (MODES.index(r["mode"]), list(SYSTEMS).index(r["system"])))
    return out


def _write(results: dict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.json").write_text(json.dumps(results, indent=1))
    (out / "faults.md").write_text(markdown(results))
    plot(results, out / "faults.png")
    return 0


# the page with the fault suite's section (it was in README.md)
PAGE = Path(__file__).resolve().parents[2] / "docs" / "faults.md"
MARKERS = ("<!-- bench-faults:start -->", "<!-- bench-faults:end -->")


def update_readme(results: dict, page: Path = PAGE) -> None:
    """The table between the markers of ``page`` (which must be there)."""
    text = page.read_text()
    start, end = MARKERS
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    page.write_text(f"{head}{start}\n{markdown(results)}{end}{tail}")


def _commit() -> str:
    import subprocess

    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    return done.stdout.strip() or "?"


if __name__ == "__main__":
    sys.exit(main())
