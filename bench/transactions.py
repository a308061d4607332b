"""Small transactions side by side: Headrace and Apache Kafka, one transactional producer (or
more) committing transactions of 10 records over 3 partitions back to back.

    python -m bench.transactions                                  # 5 rounds, 20 s windows
    python -m bench.transactions --seconds 10 --rounds 3          # a shorter run
    python -m bench.transactions --producers 1,4                  # also 4 producers at once
    python -m bench.transactions --cluster                        # 3 brokers each, RF=3
    python -m bench.transactions --brokers headrace --seconds 2 --rounds 1   # a smoke check
    python -m bench.transactions --brokers headrace --producers 4 --profile DIR   # py-spy
    python -m bench.transactions --render bench/results/transactions.json --readme

How this works
--------------
Systems: Headrace's default broker (``headrace serve``, one process) and Apache Kafka as
``bench/brokers.py`` starts it, both of its variants (``kafka-default``: its start scripts' JVM
settings; ``kafka-tuned``: its operations documentation's); the better Kafka variant (by median
commits per second) is compared. With ``--cluster``: the 3-broker clusters of
``bench/cluster.py`` instead (Headrace ``--workers 3`` on one ZooKeeper, Kafka three combined
KRaft nodes), the topic and ``__transaction_state`` at replication factor 3 with
``min.insync.replicas=2`` (``transaction.state.log.min.isr=2``). Every broker keeps its default
flush settings (``--durable``: ``log.flush.interval.messages=1`` on every broker). Nothing is
pinned: brokers and producers share the machine's cores.

A round starts each system afresh, one after the other (the order reversed every other round:
Headrace, Kafka, Kafka, Headrace, ...), and for each producer count of ``--producers`` creates
a topic of 3 partitions and runs that many producer processes at once (``bench/txproduce.py``:
confluent-kafka in a process of its own, so that this harness's GIL does not pace it; each its
own ``transactional.id``). A producer runs transactions back to back: begin, 10 records of 100
bytes round-robin over the 3 partitions, commit. The first ``--warmup`` seconds are not
counted; over the next ``--seconds``: commits per second, the commit latency (the time
``commit_transaction`` took) p50/p99/max, records committed, the broker processes' CPU
(``bench/cpu.py``'s ``Meter``: /proc) as CPU-seconds per 1,000 commits, and the producers' own
CPU (a producer near a whole core would be the bottleneck, not the broker). Before the first
measured run of a broker, one producer commits for a second on a topic of its own, so that the
transaction coordinator (``__transaction_state``) is in place and the JVM is past its start.

Every run is checked: once the producers are done, a read_committed consumer reads every
partition to its end (after the last stable offset has reached the high watermark: Kafka
writes the commit markers after it answers EndTxn) and must count exactly the records the
producers committed, warm-up included; a run that fails the check, or whose producers saw an
error, fails its cell.

Results: medians of ``--rounds`` per system and producer count, with the range; ratios
Headrace/Kafka. ``bench/results/transactions.json`` (every sample), ``transactions.md`` and
``transactions.png`` (``transactions-cluster.*`` with ``--cluster``); ``--readme`` rewrites
docs/benchmarks.md between ``<!-- bench-<stem>:start -->`` and ``<!-- bench-<stem>:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import brokers, cluster, wire
from bench.apache_kafka import HOST, KAFKA_VERSION
from bench.context import RESULTS, Progress, loadavg
from bench.cpu import Meter
from bench.profiler import Profiler
from headrace.broker.tools.process import terminate

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
PARTITIONS = 3
RECORDS = 10  # per transaction
RECORD_SIZE = 100


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


# --------------------------------------------------------------------------------------------
# Brokers: one interface over make_broker's single brokers and cluster.py's clusters


class Single:
    """A broker of ``bench.brokers.make_broker`` with what ``cluster.make_topic`` needs."""

    def __init__(self, kind: str, data_dir: Path, durable: bool, logs: Path) -> None:
        self.kind = kind
        self.broker = brokers.make_broker(kind, data_dir, durable=durable, log_dir=logs)

    def start(self) -> None:
        if isinstance(self.broker, brokers.KafkaBroker):
            self.broker.prepare()
        self.broker.start()
        wire.wait_ready(HOST, self.broker.port)
        self.addresses = [(HOST, self.broker.port)]
        with wire.WireClient(HOST, self.broker.port) as c:
            c.metadata(None)
            self.node_ids = sorted(c.brokers)
        self.pids = self.broker.pids

    def stop(self) -> None:
        self.broker.stop()
        self.broker.cleanup()


def cluster_of(kind: str, data_dir: Path, durable: bool, logs: Path, zk_connect: str | None,
               min_insync: int):
    """``headrace-x3`` or ``kafka-x3``: bench/cluster.py's clusters, ``__transaction_state``
    at replication factor 3 and ``transaction.state.log.min.isr`` ``min_insync``."""
    extra = {"transaction.state.log.replication.factor": 3,
             "transaction.state.log.min.isr": min_insync}
    if kind == "headrace-x3":
        assert zk_connect is not None
        return cluster.HeadraceCluster(data_dir, 3, zk_connect, logs / f"{data_dir.name}.log",
                                       brokers.HEADRACE_PATH, durable=durable, extra=extra)
    return cluster.KafkaCluster(data_dir, 3, durable=durable, extra=extra)


# --------------------------------------------------------------------------------------------
# One run


def drive(bootstrap: str, topic: str, producers: int, broker_groups: dict[str, list[int]],
          logs: Path, tag: str, warmup: float, seconds: float, config: list[str],
          profile: Path | None = None) -> dict:
    """``producers`` processes of bench/txproduce.py at once, measured over ``seconds`` after
    ``warmup``. Returns the window's commits, latencies and CPU (the brokers' from ``Meter``,
    the producers' their own) and every record committed (for the read_committed check).
    ``profile``: py-spy samples the first broker process over the window (waiting threads
    too) into that file, as collapsed stacks."""
    logs.mkdir(parents=True, exist_ok=True)
    start_at = time.monotonic() + warmup
    end_at = start_at + seconds
    procs, outs = [], []
    for i in range(producers):
        out = logs / f"{tag}-producer{i}.json"
        out.unlink(missing_ok=True)
        outs.append(out)
        cmd = [sys.executable, "-m", "bench.txproduce", "--bootstrap", bootstrap,
               "--topic", topic, "--transactional-id", f"{tag}-{i}",
               "--partitions", str(PARTITIONS), "--records", str(RECORDS),
               "--record-size", str(RECORD_SIZE), "--start-at", repr(start_at),
               "--end-at", repr(end_at), "--out", str(out),
               *[a for c in config for a in ("--config", c)]]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL,
                                      stderr=open(logs / f"{tag}-producer{i}.log", "w")))
    meter = Meter(broker_groups)
    profiler = None
    try:
        time.sleep(max(0.0, start_at - time.monotonic()))
        meter.start()
        if profile is not None:
            profiler = Profiler(broker_groups["broker"][0], profile, idle=True)
        time.sleep(max(0.0, end_at - time.monotonic()))
        cpu = meter.stop()
        if profiler is not None:
            profiler.finish()
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            terminate(p, 5)
    results = []
    for i, (p, out) in enumerate(zip(procs, outs)):
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"producer {i} exited with {p.returncode}; see "
                               f"{logs / f'{tag}-producer{i}.log'}")
        results.append(json.loads(out.read_text()))
    commit = [x for r in results for x in r.pop("commit_ms")]
    txn = [x for r in results for x in r.pop("txn_ms")]
    committed = sum(r["committed"] for r in results)
    client = [r["cpu_s"] for r in results]
    return {
        "producers": producers, "committed": committed,
        "commits_per_sec": committed / seconds,
        "records_per_sec": committed * RECORDS / seconds,
        "commit_p50_ms": percentile(commit, 50), "commit_p99_ms": percentile(commit, 99),
        "commit_max_ms": max(commit) if commit else None,
        "txn_p50_ms": percentile(txn, 50), "txn_p99_ms": percentile(txn, 99),
        "aborted": sum(r["aborted"] for r in results),
        "failures": [f for r in results for f in r["failures"]][:20],
        "committed_records": sum(r["committed_records"] for r in results),
        "client_cpu_s": sum(client), "client_cores": sum(client) / seconds,
        "busiest_client_cores": max(client) / seconds, **cpu, "wall_s": seconds,
    }


def read_committed_count(bootstrap: str, topic: str, timeout: float = 60.0) -> int:
    """Records a read_committed consumer reads from every partition of ``topic``, from the
    start to the end, once the last stable offset has reached the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    deadline = time.monotonic() + timeout
    common = {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
              "enable.auto.commit": False}
    committed = Consumer({**common, "isolation.level": "read_committed",
                          "enable.partition.eof": True})
    uncommitted = Consumer({**common, "isolation.level": "read_uncommitted"})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        while True:  # the markers may still be on their way when the last commit returned
            lso = [committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                   for tp in tps]
            hw = [uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                  for tp in tps]
            if lso == hw:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: last stable offsets {lso} never reached the high "
                                   f"watermarks {hw}")
            time.sleep(0.2)
        committed.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count, at_end = 0, set()
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: read {count} records, partitions {sorted(at_end)} "
                                   f"at their end after {timeout:.0f}s")
            for m in committed.consume(1000, timeout=1.0):
                err = m.error()
                if err is None:
                    count += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise RuntimeError(f"{topic}: consumer error {err}")
        return count
    finally:
        committed.close()
        uncommitted.close()


def make_topic(target, topic: str, rf: int, min_insync: int) -> None:
    cluster.make_topic(target, topic, PARTITIONS, rf,
                       {"min.insync.replicas": str(min_insync)} if rf > 1 else None)


def run_system(kind: str, rnd: int, args, ctx: dict, progress: Progress) -> list[dict]:
    """One round of one system: start it, the warm-up transactions, a measured run per
    producer count of ``--producers`` (each checked), stop it."""
    ctx["seq"] += 1
    tag = f"{ctx['seq']:02d}-{kind}"
    data = ctx["data"] / tag
    if args.cluster:
        zk = ctx.get("zk")
        zk_connect = None
        if zk is not None:
            chroot = f"/txbench-{ctx['seq']}"
            brokers.ensure_znode(zk.connect_string, chroot)
            zk_connect = zk.connect_string + chroot
        target = cluster_of(kind, data, args.durable, ctx["logs"], zk_connect,
                            args.min_insync_replicas)
    else:
        target = Single(kind, data, args.durable, ctx["logs"])
    rf = 3 if args.cluster else 1
    samples = []
    progress(f"{tag}: round {rnd + 1}, load average {loadavg()}; starting")
    try:
        target.start()
        groups = {"broker": list(target.pids)}
        if args.cluster and kind.startswith("headrace"):
            groups["zookeeper"] = [ctx["zk"].pid]
        bootstrap = ",".join(f"{h}:{p}" for h, p in target.addresses)
        make_topic(target, "tx-warm", rf, args.min_insync_replicas)
        drive(bootstrap, "tx-warm", 1, groups, ctx["logs"], f"{tag}-warm", 0.0, 1.0,
              args.config)
        for n in args.producers:
            topic = f"tx-{n}"
            make_topic(target, topic, rf, args.min_insync_replicas)
            sample: dict = {"system": kind, "round": rnd, "producers": n,
                            "loadavg": loadavg(), "uptime": uptime()}
            profile = None
            if args.profile and system_of(kind) == "headrace" and n == args.producers[0]:
                profile = Path(args.profile) / f"{tag}-p{n}.txt"
            try:
                sample.update(drive(bootstrap, topic, n, groups, ctx["logs"], f"{tag}-p{n}",
                                    args.warmup, args.seconds, args.config, profile))
                if profile is not None:
                    sample["profile"] = str(profile)
                sample["read_committed"] = read_committed_count(bootstrap, topic)
                sample["read_committed_ok"] = (
                    sample["read_committed"] == sample["committed_records"])
                derive(sample)
                if not sample["read_committed_ok"]:
                    raise RuntimeError(
                        f"read_committed check failed: {sample['read_committed']} records "
                        f"read, {sample['committed_records']} committed")
                if sample["aborted"]:
                    raise RuntimeError(f"{sample['aborted']} commits failed: "
                                       f"{sample['failures'][:3]}")
                progress(f"{tag}: {n} producer(s): {sample['commits_per_sec']:.0f} commits/s, "
                         f"commit p50 {sample['commit_p50_ms']:.2f} ms p99 "
                         f"{sample['commit_p99_ms']:.2f} ms, broker "
                         f"{sample['broker_cpu_s_per_1000']:.2f} CPU-s per 1,000 commits "
                         f"({sample['broker_cores']:.2f} cores), producers "
                         f"{sample['client_cores']:.2f} cores, read_committed "
                         f"{sample['read_committed']} = committed; load {sample['loadavg']}")
            except Exception as e:
                sample.update({"status": "failed", "reason": str(e)[-2000:]})
                progress(f"{tag}: {n} producer(s) FAILED: {str(e)[-600:]}")
            samples.append(sample)
    finally:
        target.stop()
        shutil.rmtree(data, ignore_errors=True)
    return samples


def derive(sample: dict) -> dict:
    wall = sample["wall_s"]
    sample["broker_cores"] = sample["broker_cpu_s"] / wall
    sample["broker_cpu_s_per_1000"] = (sample["broker_cpu_s"] * 1000 / sample["committed"]
                                       if sample["committed"] else None)
    return sample


# --------------------------------------------------------------------------------------------
# Summary, files, plot, docs section

METRICS = ("commits_per_sec", "records_per_sec", "commit_p50_ms", "commit_p99_ms",
           "commit_max_ms", "txn_p50_ms", "broker_cpu_s_per_1000", "broker_cores",
           "client_cores", "busiest_client_cores", "machine_busy_cores",
           "other_processes_cores")


def system_of(kind: str) -> str:
    return "kafka" if kind.startswith("kafka") else "headrace"


def summarise(samples: list[dict]) -> list[dict]:
    """Medians per (system variant, producers), with the commits/s range."""
    keys: dict[tuple[str, int], list[dict]] = {}
    for s in samples:
        keys.setdefault((s["system"], s["producers"]), [])
        if s.get("status") != "failed":
            keys[(s["system"], s["producers"])].append(s)
    rows = []
    for (kind, n), ss in keys.items():
        row: dict = {"system": kind, "producers": n, "runs": len(ss),
                     "failed": sum(1 for s in samples if s["system"] == kind
                                   and s["producers"] == n and s.get("status") == "failed")}
        for m in METRICS:
            vals = [s[m] for s in ss if s.get(m) is not None]
            row[m] = statistics.median(vals) if vals else None
        cps = [s["commits_per_sec"] for s in ss]
        row["commits_per_sec_range"] = [min(cps), max(cps)] if cps else None
        row["loads"] = [s["loadavg"][0] for s in ss]
        rows.append(row)
    return sorted(rows, key=lambda r: (r["producers"], system_of(r["system"]) != "headrace",
                                       r["system"]))


def compared(rows: list[dict]) -> list[dict]:
    """Per producer count: Headrace against the better Kafka variant (median commits/s)."""
    out = []
    for n in sorted({r["producers"] for r in rows}):
        h = [r for r in rows if r["producers"] == n and system_of(r["system"]) == "headrace"
             and r["commits_per_sec"]]
        k = [r for r in rows if r["producers"] == n and system_of(r["system"]) == "kafka"
             and r["commits_per_sec"]]
        if not h or not k:
            continue
        hr, kr = h[0], max(k, key=lambda r: r["commits_per_sec"])
        out.append({"producers": n, "headrace": hr["system"], "kafka": kr["system"],
                    **{m: _div(hr[m], kr[m]) for m in (
                        "commits_per_sec", "commit_p50_ms", "commit_p99_ms", "commit_max_ms",
                        "broker_cpu_s_per_1000")}})
    return out


_div = cluster._div


def _f(v) -> str:
    return cluster._f(v, 2)


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


NAMES = {"headrace": "Headrace (one process)", "kafka-default": "Apache Kafka (default JVM)",
         "kafka-tuned": "Apache Kafka (tuned JVM)", "headrace-x3": "Headrace, 3 brokers",
         "kafka-x3": "Apache Kafka, 3 brokers"}


def markdown(results: dict) -> str:
    rows = results["summary"]
    lines = ["| system | producers | commits/s (range) | commit p50 ms | commit p99 ms "
             "| commit max ms | records/s | broker CPU-s per 1,000 commits | broker cores "
             "| producer cores (busiest) | runs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lo, hi = r["commits_per_sec_range"] or (None, None)
        rng = f" ({_f(lo)}-{_f(hi)})" if lo is not None and r["runs"] > 1 else ""
        runs = f"{r['runs']}" + (f" ({r['failed']} failed)" if r["failed"] else "")
        lines.append(
            f"| {NAMES.get(r['system'], r['system'])} | {r['producers']} | "
            f"{_f(r['commits_per_sec'])}{rng} | {_f(r['commit_p50_ms'])} | "
            f"{_f(r['commit_p99_ms'])} | {_f(r['commit_max_ms'])} | {_f(r['records_per_sec'])} "
            f"| {_f(r['broker_cpu_s_per_1000'])} | {_f(r['broker_cores'])} | "
            f"{_f(r['client_cores'])} ({_f(r['busiest_client_cores'])}) | {runs} |")
    cc = results.get("ratios", [])
    if cc:
        lines += ["", "| Headrace / Kafka | producers | commits/s | commit p50 | commit p99 "
                  "| commit max | broker CPU per commit |", "|---|---:|---:|---:|---:|---:|---:|"]
        for c in cc:
            lines.append(f"| {c['headrace']} / {c['kafka']} | {c['producers']} | "
                         f"{_x(c['commits_per_sec'])} | {_x(c['commit_p50_ms'])} | "
                         f"{_x(c['commit_p99_ms'])} | {_x(c['commit_max_ms'])} | "
                         f"{_x(c['broker_cpu_s_per_1000'])} |")
    return "\n".join(lines)


def write_plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["summary"] if r["commits_per_sec"]]
    if not rows:
        return
    short = {"headrace": "Headrace", "kafka-default": "Kafka\ndefault JVM",
             "kafka-tuned": "Kafka\ntuned JVM", "headrace-x3": "Headrace\nx3",
             "kafka-x3": "Kafka\nx3"}
    labels = [f"{short.get(r['system'], r['system'])}\n{r['producers']} prod." for r in rows]
    colors = ["#555555" if system_of(r["system"]) == "kafka" else "#1f77b4" for r in rows]
    x = list(range(len(rows)))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    panels = (("commits_per_sec", "commits per second", "Small transactions committed"),
              ("commit_p99_ms", "ms", "Commit latency p99 (dot: p50)"),
              ("broker_cpu_s_per_1000", "broker CPU-s per 1,000 commits", "Broker CPU"))
    for ax, (key, ylabel, title) in zip(axes, panels):
        vals = [r[key] or 0 for r in rows]
        ax.bar(x, vals, color=colors)
        for i, v in enumerate(vals):
            ax.text(i, v, _f(v), ha="center", va="bottom", fontsize=8)
        if key == "commit_p99_ms":
            ax.plot(x, [r["commit_p50_ms"] or 0 for r in rows], "o", color="#ff7f0e")
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylim(0, max(vals) * 1.15 or 1)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.suptitle(f"Transactions of {RECORDS} records of {RECORD_SIZE} B over {PARTITIONS} "
                 f"partitions ({'3 brokers, RF=3' if results.get('cluster') else 'one broker'}); "
                 f"medians of {results['rounds']} rounds; load average at start "
                 f"{results['loadavg_start']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markers(stem: str) -> tuple[str, str]:
    return f"<!-- bench-{stem}:start -->", f"<!-- bench-{stem}:end -->"


def readme_section(results: dict, page: Path = PAGE) -> str:
    stem = results["stem"]
    start, end = markers(stem)
    loads = [s["loadavg"][0] for s in results["samples"]]
    setup = ("Three brokers each (Headrace `--workers 3`, Kafka three KRaft nodes), the topic and "
             "`__transaction_state` at replication factor 3, `min.insync.replicas=2`"
             if results.get("cluster") else "One broker each (Headrace `headrace serve`, Kafka "
             "single-node KRaft; both of Kafka's JVM variants, the better compared)")
    plot = os.path.relpath(RESULTS.resolve() / f"{stem}.png", page.resolve().parent)
    durable = " plus log.flush.interval.messages=1" if results["durable"] else ""
    title = ("### Transactions, 3 brokers beside Apache Kafka's 3 (RF=3)" if results.get(
        "cluster") else "## Transactions: small transactions beside Apache Kafka")
    return "\n".join([
        start, title, "",
        f"Command: `{results['command']}` ({results['stamp']}; Headrace at "
        f"{results['headrace_at']}, Apache Kafka {KAFKA_VERSION}). {setup}; each broker's "
        f"default flush settings{durable}. confluent-kafka producers in processes of their "
        f"own, each committing transactions of {RECORDS} records of {RECORD_SIZE} bytes "
        f"over {PARTITIONS} partitions back to back; "
        f"{results['seconds']:g} s measured after {results['warmup']:g} s of warm-up; medians "
        f"of {results['rounds']} rounds, interleaved. Every run checked: a read_committed "
        "consumer counted exactly the records committed. Load average at start "
        f"{results['loadavg_start']}, at end {results['loadavg_end']}; 1-minute load at the "
        f"start of each run {min(loads):.2f} to {max(loads):.2f} (a shared machine).",
        "", markdown(results), "", f"![{stem}]({Path(plot).as_posix()})", end])


def headline_rows(results: dict) -> list[str]:
    """Rows of the README's headline table (bench/report.py's ``headline_section``) for one
    producer on one broker: commits per second and commit latency p50/p99, Kafka's better
    variant beside Headrace."""
    if results.get("cluster"):
        return []
    rows = results.get("summary") or []
    ratio = next((c for c in results.get("ratios", []) if c["producers"] == 1), None)
    if ratio is None:
        return []
    h = next(r for r in rows if r["producers"] == 1 and r["system"] == ratio["headrace"])
    k = next(r for r in rows if r["producers"] == 1 and r["system"] == ratio["kafka"])
    title = (f"T1: transactions of {RECORDS} records over {PARTITIONS} partitions back to "
             "back, one producer")
    out = []
    for metric, label in (("commits_per_sec", "commits/s"),
                          ("commit_p50_ms", "commit latency p50 (ms)"),
                          ("commit_p99_ms", "commit latency p99 (ms)")):
        out.append(f"| {title}: {label} | {_f(k[metric])} | {_f(h[metric])} | "
                   f"{_x(ratio[metric])} |")
    return out


def update_headline(readme: Path | None = None) -> None:
    """The README's headline table again, from bench/results/results.json (bench.run's) and
    transactions.json (``report.headline_section`` adds this benchmark's rows)."""
    from bench import report
    readme = readme or report.README
    main = RESULTS / "results.json"
    if not main.exists():
        return
    section = report.headline_section(json.loads(main.read_text()), report.PAGE, readme)
    readme.write_text(report._between(readme.read_text(), report.HEADLINE_START,
                                      report.HEADLINE_END, section, append=False))


def update_readme(results: dict, page: Path = PAGE) -> None:
    text = page.read_text()
    section = readme_section(results, page)
    start, end = markers(results["stem"])
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text)


def profile_summary(path: Path, n: int = 12) -> str:
    """What a ``--profile`` file says: the share of the samples each thread was working, the
    functions the working samples were in (inclusive), and the share of every thread's samples
    spent in fsync/fdatasync (py-spy samples waiting threads too)."""
    from bench.report import by_thread, read_collapsed, top_functions
    every = read_collapsed(path, keep_idle=True)
    working = read_collapsed(path)
    total = sum(c for _, c in every) or 1
    threads = len({frames[0] for frames, _ in every}) or 1
    syncing = sum(c for frames, c in every if any("sync" in f for f in frames[-4:]))
    busy, _own, incl = top_functions(working, n)
    lines = [f"{path.name}: {total} samples of {threads} threads, {busy} working "
             f"({100 * busy / total:.0f}%); in fsync/fdatasync: {100 * syncing / total:.1f}% "
             "of all samples",
             "  working samples by thread: " + ", ".join(
                 f"{name} {share:.0f}%" for name, share in by_thread(working)[:5])]
    lines += [f"  {share:5.1f}%  {name}" for name, share in incl]
    return "\n".join(lines)


def finish(results: dict, args, progress: Progress) -> int:
    results["summary"] = summarise(results["samples"])
    results["ratios"] = compared(results["summary"])
    for s in results["samples"]:
        if s.get("profile") and Path(s["profile"]).exists():
            s["profile_summary"] = profile_summary(Path(s["profile"]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = results["stem"]
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    table = markdown(results)
    (out / f"{stem}.md").write_text(
        f"# Transactions\n\nCommand: `{results['command']}`; {results.get('uptime_start')} "
        f"at the start, load average at the end {results.get('loadavg_end')}.\n\n{table}\n")
    if not args.no_plot:
        write_plot(results, out / f"{stem}.png")
    print(table)
    for s in results["samples"]:
        if s.get("profile_summary"):
            print("\n" + s["profile_summary"])
    if args.readme:
        update_readme(results)
        if not results.get("cluster") and Path(args.out).resolve() == RESULTS.resolve():
            update_headline()
    failed = sum(1 for s in results["samples"] if s.get("status") == "failed")
    progress(f"done; results in {out}" + (f"; {failed} run(s) FAILED" if failed else ""))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", help="systems, comma-separated (default: headrace,"
                    "kafka-default,kafka-tuned; with --cluster: headrace-x3,kafka-x3)")
    ap.add_argument("--cluster", action="store_true",
                    help="3-broker clusters, RF=3, min.insync.replicas=2")
    ap.add_argument("--min-insync-replicas", type=int, default=2)
    ap.add_argument("--durable", action="store_true",
                    help="log.flush.interval.messages=1 on every broker")
    ap.add_argument("--producers", default="1", help="producer counts, e.g. 1,4")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                    help="a producer setting (librdkafka's name), for every system")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy on Headrace's broker over each window of the first producer "
                         "count (waiting threads too; collapsed stacks in DIR, the top "
                         "functions printed; it slows the broker)")
    ap.add_argument("--headrace-ref", default="worktree",
                    help="commit of Headrace to run (copied out of git); default: the "
                         "installed working tree")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--raw-dir", help="logs and data (default: bench/results/raw/<stamp>)")
    ap.add_argument("--render", metavar="JSON", help="no runs: write the files from a "
                    "transactions.json again (and --readme)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite its section of docs/benchmarks.md")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.producers = [int(x) for x in str(args.producers).split(",")]
    progress = Progress(args.quiet)
    if args.render:
        return finish(json.loads(Path(args.render).read_text()), args, progress)
    kinds = (args.brokers or ("headrace-x3,kafka-x3" if args.cluster else
                              "headrace,kafka-default,kafka-tuned")).split(",")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = Path(args.raw_dir or RESULTS / "raw") / f"transactions-{stamp}"
    ctx: dict = {"seq": 0, "data": raw / "data", "logs": raw / "logs"}
    ctx["logs"].mkdir(parents=True, exist_ok=True)
    headrace_at = brokers.headrace_at(args.headrace_ref)
    if args.headrace_ref != "worktree":
        brokers.HEADRACE_PATH = brokers.headrace_snapshot(args.headrace_ref, raw / "headrace")
    # nothing pinned: brokers and producers on every CPU
    brokers.BROKER_CPUS = brokers.CLIENT_CPUS = set(range(os.cpu_count() or 1))
    command = "python -m bench.transactions " + " ".join(
        argv if argv is not None else sys.argv[1:])
    results: dict = {
        "command": command.strip(), "stamp": stamp, "headrace_at": headrace_at,
        "uptime_start": uptime(), "loadavg_start": loadavg(), "cpus": os.cpu_count(),
        "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "producers": args.producers, "cluster": args.cluster, "durable": args.durable,
        "config": args.config, "records_per_transaction": RECORDS,
        "record_size": RECORD_SIZE, "partitions": PARTITIONS,
        "stem": "transactions-cluster" if args.cluster else "transactions", "samples": [],
    }
    progress(f"uptime: {results['uptime_start']}")
    try:
        if args.cluster and any(system_of(k) == "headrace" for k in kinds):
            from headrace.broker.tools.zookeeper_server import ZooKeeperServer
            ctx["zk"] = ZooKeeperServer(raw / "zookeeper").start()
        for rnd in range(args.rounds):
            for kind in kinds if rnd % 2 == 0 else kinds[::-1]:
                try:
                    results["samples"] += run_system(kind, rnd, args, ctx, progress)
                except Exception as e:  # the broker did not start, the topic...
                    progress(f"{kind} round {rnd + 1} FAILED: {str(e)[-600:]}")
                    results["samples"] += [
                        {"system": kind, "round": rnd, "producers": n, "loadavg": loadavg(),
                         "status": "failed", "reason": str(e)[-2000:]} for n in args.producers]
    finally:
        if ctx.get("zk"):
            ctx["zk"].stop()
        shutil.rmtree(ctx["data"], ignore_errors=True)
    results["loadavg_end"] = loadavg()
    results["uptime_end"] = uptime()
    results["elapsed_s"] = round(time.monotonic() - progress.t0, 1)
    return finish(results, args, progress)


if __name__ == "__main__":
    sys.exit(main())
