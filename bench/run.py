"""Apache Kafka and Headrace side by side, driven by Kafka's own perf tools.

    python -m bench.run                          # every scenario, full size, 3 runs per broker
    python -m bench.run --size tiny --runs 1     # seconds per scenario: a check that it works
    python -m bench.run --scenarios S1,S3 --brokers headrace
    python -m bench.run --profile                # py-spy flame graphs of Headrace under S1, S3, S4

For each scenario the runs are interleaved (Kafka, Headrace, then Headrace, Kafka, ...), each
on a fresh broker process with a fresh data directory under one parent directory (so one file
system), the broker pinned to CPU 0 and every client tool to CPU 1. Raw tool output and broker
logs go to ``bench/results/raw/<stamp>/``; the summary goes to ``bench/results/`` (results.json,
results.md, PNG plots), and ``--readme`` rewrites the README's Benchmarks section.

This module is the driver; each kind of scenario has its runner (and the parser of its tool's
output) in its own module: ``produce.py``, ``consume.py``, ``latency.py``, ``coldstart.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import brokers
from bench.coldstart import run_coldstart
from bench.consume import ConsumeSetup, run_consume, setup_consume
from bench.context import RESULTS, Context, loadavg
from bench.latency import run_e2e
from bench.machine import append_limit, iperf_loopback, machine
from bench.produce import run_produce
from bench.scenarios import SIZES, Scenario, select, with_e2e_rate


def run_once(sc: Scenario, kind: str, ctx: Context, rep: int, st: ConsumeSetup | None,
             attempts: int = 2) -> dict:
    """One run; a run that fails (a broker that does not start, a tool that exits non-zero)
    is tried again once, then recorded as failed so the other runs still count."""
    for attempt in range(attempts):
        try:
            if sc.kind == "produce":
                return run_produce(sc, kind, ctx, rep)
            if sc.kind == "consume":
                return run_consume(sc, kind, ctx, rep, st)
            if sc.kind == "e2e":
                return run_e2e(sc, kind, ctx, rep)
            return run_coldstart(sc, kind, ctx, rep)
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else repr(e)
            ctx.progress(f"{sc.id} {kind} attempt {attempt + 1} failed: {reason}")
            if attempt + 1 == attempts:
                return {"loadavg": loadavg(), "status": "failed", "reason": str(e)[-1500:]}
            time.sleep(3)
    raise AssertionError("unreachable")


def run_scenario(sc: Scenario, ctx: Context, results: dict) -> None:
    entry = results["scenarios"].setdefault(sc.id, {"title": sc.title, "samples": {}})
    samples: dict[str, list] = entry["samples"]
    st = setup_consume(sc, ctx) if sc.kind == "consume" else None
    try:
        for rep in range(ctx.runs):
            order = ctx.kinds if rep % 2 == 0 else list(reversed(ctx.kinds))
            for kind in order:
                ctx.progress(f"{sc.id} run {rep + 1}/{ctx.runs} {kind}: {sc.title}")
                s = run_once(sc, kind, ctx, rep, st)
                samples.setdefault(kind, []).append(s)
                shown = {m: round(s[m], 2) for m in sc.metrics if m in s}
                ctx.progress(f"{sc.id} run {rep + 1}/{ctx.runs} {kind}: "
                             f"{shown or s.get('status')}")
    finally:
        if st:
            for d in st.dirs.values():
                shutil.rmtree(d, ignore_errors=True)
            entry["setup"] = {"produced": st.produced, "skipped": st.skip}


def summarise(results: dict) -> None:
    """Medians per scenario, broker and metric (only over runs that produced numbers)."""
    for sid, entry in results["scenarios"].items():
        med: dict[str, dict[str, float]] = {}
        for kind, samples in entry["samples"].items():
            ok = [s for s in samples if "status" not in s]
            keys = sorted({k for s in ok for k, v in s.items() if isinstance(v, (int, float))})
            med[kind] = {k: statistics.median(s[k] for s in ok if k in s) for k in keys}
        entry["median"] = med


def merge(base: dict, new: dict) -> dict:
    """``base`` with ``new``'s scenarios in place of its own; the re-runs are listed."""
    from bench.scenarios import SCENARIOS
    merged = dict(base)
    scen = dict(base.get("scenarios", {}))
    scen.update(new["scenarios"])
    order = {sid: i for i, sid in enumerate(SCENARIOS)}
    merged["scenarios"] = dict(sorted(scen.items(), key=lambda kv: order.get(kv[0], 99)))
    merged["reruns"] = base.get("reruns", []) + [{
        "command": new["command"], "stamp": new["stamp"], "scenarios": list(new["scenarios"]),
        "loadavg_start": new["loadavg_start"], "headrace_at": new.get("headrace_at"),
        "elapsed_s": new.get("elapsed_s")}]
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=SIZES, default="full")
    ap.add_argument("--runs", type=int, default=3, help="runs per scenario and broker")
    ap.add_argument("--scenarios", help="comma-separated ids (default: all)")
    ap.add_argument("--brokers", default="kafka,headrace")
    ap.add_argument("--out", default=str(RESULTS), help="where results.{json,md} and plots go")
    ap.add_argument("--raw-dir", help="raw logs (default: bench/results/raw)")
    ap.add_argument("--data-dir", help="parent of the brokers' data directories "
                                       "(default: under the raw directory)")
    ap.add_argument("--e2e-rate", type=float, default=10.0, metavar="MB_PER_SEC",
                    help="S6's offered rate (default 10 MB/s: on the 2-core development "
                         "machine 50 MB/s of 1 KiB records saturates Apache Kafka on one core, "
                         "and latency then only measures the queue)")
    ap.add_argument("--headrace-ref", default="HEAD",
                    help="git commit of Headrace to measure (default HEAD: committed code, "
                         "copied out of the repository); 'worktree' runs the installed "
                         "working tree, uncommitted changes included; a commit needs "
                         "'headrace serve --ready-file', which the harness waits on)")
    ap.add_argument("--iperf-seconds", type=float, default=3.0)
    ap.add_argument("--no-iperf", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="Headrace only, S1/S3/S4 (or --scenarios) once each under py-spy; "
                         "writes flame graphs and top-function tables to --out")
    ap.add_argument("--profile-idle", action="store_true",
                    help="with --profile: keep samples of waiting threads (where time goes "
                         "off the CPU: fsync, locks, epoll)")
    ap.add_argument("--merge", action="store_true",
                    help="replace only these scenarios in the existing results.json of --out "
                         "(the rest, and the machine facts, stay from the earlier run)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite the README's Benchmarks section from these results")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    # SIGINT and SIGTERM stop the run cleanly (brokers stopped, data removed), also when the
    # harness was started in the background, where SIGINT is ignored by default.
    def interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one is enough: let the cleanup run
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.profile:
        args.brokers = "headrace"
        args.runs = 1
        args.scenarios = args.scenarios or "S1,S3,S4"
    ctx = Context(args, stamp)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if brokers.cpu_count_ok():
        brokers.pin_self(brokers.CLIENT_CPUS)
    else:
        ctx.progress("fewer than 2 CPUs available: broker and client share the CPU")
        brokers.BROKER_CPUS = brokers.CLIENT_CPUS = set(os.sched_getaffinity(0))

    headrace_at = "worktree"
    if args.headrace_ref != "worktree" and "headrace" in ctx.kinds:
        try:
            brokers.HEADRACE_PATH = brokers.headrace_snapshot(args.headrace_ref,
                                                              ctx.raw / "headrace")
        except (RuntimeError, subprocess.CalledProcessError) as e:
            ap.error(f"--headrace-ref {args.headrace_ref}: {e}")
        headrace_at = brokers.git_describe(args.headrace_ref)
        ctx.progress(f"measuring Headrace as committed at {headrace_at} ({args.headrace_ref})")

    command = "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict = {
        "command": command.strip(), "stamp": stamp, "size": ctx.size, "runs": ctx.runs,
        "brokers": ctx.kinds, "loadavg_start": loadavg(), "machine": machine(),
        "headrace_at": headrace_at, "profile_idle": args.profile_idle,
        "scenarios": {},
    }
    ctx.progress(f"load average at start: {results['loadavg_start']} "
                 f"(1-minute above ~0.7 means a busy machine and noisy numbers)")
    if not args.no_iperf and not args.profile:
        results["loopback"] = iperf_loopback(ctx, args.iperf_seconds)
        results["append"] = append_limit(ctx, (64 if ctx.size == "tiny" else 1024) << 20)

    scenarios = [with_e2e_rate(sc, args.e2e_rate) if sc.kind == "e2e" else sc
                 for sc in select(args.scenarios)]
    if args.profile:
        ctx.profile_dir = ctx.raw / "profiles"
    failed = []
    for sc in scenarios:
        try:
            run_scenario(sc, ctx, results)
        except Exception as e:  # keep going: one broken scenario must not lose the others
            ctx.progress(f"{sc.id} FAILED: {e}")
            failed.append(sc.id)
            results["scenarios"].setdefault(sc.id, {"title": sc.title, "samples": {}})[
                "error"] = str(e)[-2000:]
    results["loadavg_end"] = loadavg()
    results["elapsed_s"] = round(time.monotonic() - ctx.progress.t0, 1)
    summarise(results)
    shutil.rmtree(ctx.data, ignore_errors=True)

    elapsed = results["elapsed_s"]
    if args.merge and (out_dir / "results.json").exists() and not args.profile:
        results = merge(json.loads((out_dir / "results.json").read_text()), results)

    from bench import report
    if args.profile:
        report.write_profiles(ctx.profile_dir, out_dir, results)
    else:
        report.write(results, out_dir, plots=not args.no_plots)
        if args.readme:
            report.update_readme(results, out_dir)
    ctx.progress(f"done in {elapsed:.0f}s; results in {out_dir}"
                 + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
