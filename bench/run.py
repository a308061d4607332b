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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import brokers, wire
from bench.apache_kafka import HOST, KAFKA_VERSION, parse_producer_performance
from bench.scenarios import GiB, SIZES, Scenario, select, with_e2e_rate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
JAVA_E2E = HERE / "java" / "EndToEndRate.java"


class Progress:
    """One line per step on stderr, with the elapsed time."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            el = time.monotonic() - self.t0
            print(f"[bench {int(el // 60):02d}:{int(el % 60):02d}] {msg}", file=sys.stderr,
                  flush=True)


class Context:
    def __init__(self, args: argparse.Namespace, stamp: str) -> None:
        self.size: str = args.size
        self.runs: int = args.runs
        self.kinds: list[str] = args.brokers.split(",")
        self.raw = Path(args.raw_dir or RESULTS / "raw") / stamp
        self.data = Path(args.data_dir) / stamp if args.data_dir else self.raw / "data"
        self.logs = self.raw / "logs"
        self.progress = Progress(args.quiet)
        self.profile_dir: Path | None = None
        self.profile_idle: bool = args.profile_idle
        self.seq = 0

    def next_dir(self, tag: str) -> Path:
        self.seq += 1
        return self.data / f"{self.seq:03d}-{tag}"


# --------------------------------------------------------------------------------------------
# Machine facts


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    info = {"platform": platform.platform(), "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "kafka_version": KAFKA_VERSION,
            "broker_cpus": sorted(brokers.BROKER_CPUS), "client_cpus": sorted(brokers.CLIENT_CPUS)}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split()
        info["mem_gib"] = round(int(mem[1]) / (1 << 20), 1)
    except OSError:
        pass
    try:
        v = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
        info["java"] = v.splitlines()[0] if v else None
    except OSError:
        info["java"] = None
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                            capture_output=True, text=True).stdout.strip()
        # uncommitted changes in the broker's own packages are part of what was measured
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "broker", "protocol",
                                "pipeline", "storage"], cwd=HERE.parent, capture_output=True,
                               text=True).stdout.strip()
        info["git_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


def iperf_loopback(ctx: Context, seconds: float) -> dict:
    """Loopback TCP bandwidth with iperf3, server on the broker CPU, client on the client CPU:
    {"128KiB": bytes/s, "1MiB": bytes/s, "limit": the larger}."""
    if not shutil.which("iperf3"):
        ctx.progress("iperf3 not found: loopback limit not measured")
        return {}
    out: dict[str, float] = {}
    for label, length in (("128KiB", "128K"), ("1MiB", "1M")):
        port = brokers.free_port_block(1)
        srv = subprocess.Popen(["iperf3", "-s", "-1", "-B", HOST, "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: os.sched_setaffinity(0, brokers.BROKER_CPUS))
        try:
            time.sleep(0.3)
            res = subprocess.run(["iperf3", "-c", HOST, "-p", str(port), "-t", str(seconds),
                                  "-l", length, "-J"], capture_output=True, text=True,
                                 timeout=seconds + 30)
            data = json.loads(res.stdout)
            out[label] = data["end"]["sum_received"]["bits_per_second"] / 8
        except (subprocess.TimeoutExpired, ValueError, KeyError) as e:
            ctx.progress(f"iperf3 {label}: {e}")
        finally:
            srv.kill()
            srv.wait()
    if out:
        out["limit"] = max(out.values())
        ctx.progress("loopback (iperf3): " + ", ".join(
            f"{k} {v / 1e9:.2f} GB/s" for k, v in out.items() if k != "limit"))
    return out


_APPEND_PROBE = """
import os, sys, time
path, total = sys.argv[1], int(sys.argv[2])
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
t, c = time.perf_counter(), time.process_time()
for i in range(total >> 20):
    os.pwrite(fd, buf, i << 20)
print(total / (time.perf_counter() - t), total / max(time.process_time() - c, 1e-9))
os.close(fd)
os.unlink(path)
"""


def append_limit(ctx: Context, total: int) -> dict:
    """Appending to a new file through the page cache in 1 MiB pwrites, on the broker CPU, in
    the brokers' data directory: the ceiling for any broker writing one log on this machine
    (no fsync). {"bytes_per_sec": wall, "bytes_per_cpu_sec": per CPU second}."""
    ctx.data.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _APPEND_PROBE, str(ctx.data / "append.probe"),
                          str(total)], capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: os.sched_setaffinity(0, brokers.BROKER_CPUS))
    try:
        wall, cpu = (float(x) for x in res.stdout.split())
    except ValueError:
        ctx.progress(f"page-cache append probe failed: {res.stderr[-300:]}")
        return {}
    ctx.progress(f"page-cache append (1 MiB pwrite, broker CPU): {wall / 2**20:.0f} MiB/s")
    return {"bytes_per_sec": wall, "bytes_per_cpu_sec": cpu}


# --------------------------------------------------------------------------------------------
# One run of one scenario on one broker


def _producer_args(sc: Scenario, topic: str, bootstrap: str, records: int) -> list[str]:
    props = [f"bootstrap.servers={bootstrap}"] + [f"{k}={v}" for k, v in sc.producer_props.items()]
    rate = str(sc.rate_bytes // sc.record_size) if sc.rate_bytes and sc.kind == "produce" else "-1"
    return ["--topic", topic, "--num-records", str(records), "--record-size",
            str(sc.record_size), "--throughput", rate, "--producer-props", *props]


def _echo(ctx: Context, prefix: str):
    def on_line(line: str) -> None:
        if "records sent" in line or line.startswith("E2E") or "," in line:
            ctx.progress(f"  {prefix} {line.strip()[:150]}")
    return on_line


def pyspy() -> str:
    """py-spy next to this interpreter (a venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy not found: pip install -e '.[bench]'")
    return found


class Profiler:
    """py-spy attached to the broker for the duration of a run (collapsed stacks).

    Blocking sampling (the default; ``--nonblocking`` tears stacks) at 100 Hz, with native
    frames so that time inside uvloop, the socket calls and C extensions is named."""

    def __init__(self, pid: int, out: Path, native: bool = True, idle: bool = False) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [pyspy(), "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "100",
             "--threads", *(["--native"] if native else []), *(["--idle"] if idle else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, brokers.CLIENT_CPUS))
        time.sleep(0.5)

    def finish(self, timeout: float = 60) -> None:
        """Stop sampling (before the broker shuts down, so that its shutdown is not in the
        profile) and wait for py-spy to write its file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_produce(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), durable=sc.durable,
                                 log_dir=ctx.logs)
    records = sc.records[ctx.size]
    topic = f"bench-{sc.id.lower()}"
    sample = {"loadavg": loadavg()}
    broker.prepare()
    broker.start()
    prof = None
    try:
        wire.ensure_topic(HOST, broker.port, topic, sc.partitions)
        if ctx.profile_dir is not None and kind == "headrace":
            prof = Profiler(broker.pid, ctx.profile_dir / f"{sc.id}.collapsed",
                            idle=ctx.profile_idle)
        meter = brokers.CpuMeter(broker.pid).start()
        out = brokers.java_tool("org.apache.kafka.tools.ProducerPerformance",
                                _producer_args(sc, topic, broker.bootstrap, records),
                                ctx.logs / f"{sc.id}-{kind}-{rep}.log",
                                on_line=_echo(ctx, kind))
        sample["broker_cpu"] = meter.stop()
        sample.update(meter.report, client_cpu=brokers.LAST_TOOL.get("client_cpu"))
    finally:
        if prof:
            prof.finish()
        broker.stop()
        broker.cleanup()
    parsed = parse_producer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ProducerPerformance summary in the output of {sc.id}/{kind}")
    sample.update(parsed)
    sample["bytes_per_sec"] = parsed["records_per_sec"] * sc.record_size
    return sample


def _parse_consumer_performance(out: str) -> dict | None:
    header = None
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if cells and cells[0] == "start.time":
            header = cells
        elif header and len(cells) == len(header):
            row = dict(zip(header, cells))
            try:
                return {
                    "mb_consumed": float(row["data.consumed.in.MB"]),
                    "mb_per_sec": float(row["MB.sec"]),
                    "records": float(row["data.consumed.in.nMsg"]),
                    "records_per_sec": float(row["nMsg.sec"]),
                    "rebalance_ms": float(row["rebalance.time.ms"]),
                    "fetch_ms": float(row["fetch.time.ms"]),
                    "fetch_mb_per_sec": float(row["fetch.MB.sec"]),
                    "fetch_records_per_sec": float(row["fetch.nMsg.sec"]),
                }
            except (KeyError, ValueError):
                return None
    return None


class ConsumeSetup:
    """S5's data: written once per broker with S1's producer, kept across the runs."""

    def __init__(self) -> None:
        self.dirs: dict[str, Path] = {}
        self.skip: dict[str, str] = {}
        self.produced: dict[str, dict] = {}


def setup_consume(sc: Scenario, ctx: Context) -> ConsumeSetup:
    st = ConsumeSetup()
    records = sc.records[ctx.size]
    for kind in ctx.kinds:
        d = ctx.next_dir(f"{sc.id}-{kind}-data")
        broker = brokers.make_broker(kind, d, log_dir=ctx.logs)
        broker.prepare()
        broker.start()
        try:
            missing = wire.group_apis_missing(HOST, broker.port)
            if missing:
                st.skip[kind] = ("not yet runnable: ConsumerPerformance uses subscribe(), and "
                                 f"{kind} does not list {', '.join(missing)}")
                ctx.progress(f"{sc.id} {kind}: {st.skip[kind]}")
                continue
            wire.ensure_topic(HOST, broker.port, "bench-s5", 1)
            size_gib = records * sc.record_size / GiB
            ctx.progress(f"{sc.id} {kind}: writing {size_gib:.2f} GiB with the S1 producer")
            out = brokers.java_tool("org.apache.kafka.tools.ProducerPerformance",
                                    _producer_args(sc, "bench-s5", broker.bootstrap, records),
                                    ctx.logs / f"{sc.id}-{kind}-setup.log",
                                    on_line=_echo(ctx, kind))
            st.produced[kind] = parse_producer_performance(out) or {}
            st.dirs[kind] = d
        finally:
            broker.stop()
            if kind in st.skip:
                broker.cleanup()
    return st


def run_consume(sc: Scenario, kind: str, ctx: Context, rep: int, st: ConsumeSetup) -> dict:
    if kind in st.skip:
        return {"loadavg": loadavg(), "status": "not runnable", "reason": st.skip[kind]}
    broker = brokers.make_broker(kind, st.dirs[kind], log_dir=ctx.logs)
    sample = {"loadavg": loadavg()}
    broker.start()
    try:
        meter = brokers.CpuMeter(broker.pid).start()
        out = brokers.java_tool(
            "org.apache.kafka.tools.ConsumerPerformance",
            ["--bootstrap-server", broker.bootstrap, "--topic", "bench-s5",
             "--messages", str(sc.records[ctx.size]), "--group", f"bench-s5-{rep}-{kind}",
             "--timeout", "60000"],
            ctx.logs / f"{sc.id}-{kind}-{rep}.log", on_line=_echo(ctx, kind))
        sample["broker_cpu"] = meter.stop()
        sample.update(meter.report, client_cpu=brokers.LAST_TOOL.get("client_cpu"))
    finally:
        broker.stop()
    parsed = _parse_consumer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ConsumerPerformance result in the output of {sc.id}/{kind}")
    sample.update(parsed)
    sample["bytes_per_sec"] = parsed["fetch_mb_per_sec"] * (1 << 20)
    return sample


def run_e2e(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), log_dir=ctx.logs)
    rate = sc.rate_bytes // sc.record_size
    seconds = sc.seconds[ctx.size]
    warmup = min(5.0, seconds / 3)
    sample = {"loadavg": loadavg(), "offered_records_per_sec": rate}
    broker.prepare()
    broker.start()
    try:
        wire.ensure_topic(HOST, broker.port, "bench-s6", 1)
        meter = brokers.CpuMeter(broker.pid).start()
        out = brokers.java_tool(JAVA_E2E, [broker.bootstrap, "bench-s6", str(rate),
                                           str(sc.record_size), str(seconds), str(warmup)],
                                ctx.logs / f"{sc.id}-{kind}-{rep}.log", on_line=_echo(ctx, kind))
        sample["broker_cpu"] = meter.stop()
        sample.update(meter.report, client_cpu=brokers.LAST_TOOL.get("client_cpu"))
    finally:
        broker.stop()
        broker.cleanup()
    line = [ln for ln in out.splitlines() if ln.startswith("E2E ")]
    if not line:
        raise RuntimeError(f"no E2E line in the output of {sc.id}/{kind}")
    for kv in line[-1].split()[1:]:
        k, v = kv.split("=", 1)
        sample[k] = float(v)
    sample["achieved_mb_per_sec"] = sample["achieved_rps"] * sc.record_size / 1e6
    return sample


def run_coldstart(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    """Spawn to first acknowledged produce, timed by a poller thread that is already
    retrying (connect, Metadata v1 which auto-creates the topic, Produce v3 acks=all)
    when the process is spawned. Formatting Kafka's storage happens before (not timed)."""
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), fixed_port=True,
                                 log_dir=ctx.logs)
    sample: dict = {"loadavg": loadavg()}
    broker.prepare()  # ports are chosen here, before the spawn
    result: dict = {}

    def poll() -> None:
        try:
            result["ack"] = wire.first_ack(HOST, broker.port, "bench-s7", time.monotonic() + 180)
        except Exception as e:  # reported below
            result["error"] = repr(e)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        broker.start()
        ready = time.monotonic()
        t.join(180)
    finally:
        broker.stop()
        broker.cleanup()
    if "ack" not in result:
        raise RuntimeError(f"{sc.id}/{kind}: no acknowledged produce: {result.get('error')}")
    sample["cold_start_ms"] = (result["ack"] - broker.spawned_at) * 1000
    sample["listening_ms"] = (ready - broker.spawned_at) * 1000
    ctx.progress(f"  {kind} spawn to first ack {sample['cold_start_ms']:.0f} ms")
    return sample


# --------------------------------------------------------------------------------------------
# Driver


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
                         "working tree, uncommitted changes included")
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
        brokers.HEADRACE_PATH = brokers.headrace_snapshot(args.headrace_ref, ctx.raw / "headrace")
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
