"""Cluster benchmarks: Headrace's throughput per core (``--workers 1`` vs ``--workers 2``) and a
3-broker Headrace cluster beside a 3-broker Apache Kafka cluster, without and with replication.

    python -m bench.cluster                         # both parts; bench/results/cluster.*
    python -m bench.cluster --parts scaling --seconds 5 --perf-records 2048   # a short check
    python -m bench.cluster --readme                # ... and its section of docs/benchmarks.md
    python -m bench.cluster --render bench/results/cluster.json --readme   # re-render only
    python -m bench.cluster --parts replicated --readme   # RF=3: bench/results/cluster-rf3.*

How this works
--------------
With windows of 10 s or more the runs have the machine's memory kept as a dedicated host's
(``bench/machine.py``, ``memory_kept``), as in ``bench.run``. Every run starts a fresh
cluster (fresh data directories under one parent, all on 127.0.0.1, nothing pinned: brokers,
clients and ZooKeeper share the machine's cores), creates one topic of ``--partitions``
partitions (RF=1) spread evenly over the brokers by manual assignment
(partition p on the (p mod n)-th broker), drives it with producer processes, and stops it.
The workload is the durable produce of the side-by-side benchmark's S2: 64 KiB records,
acks=all, ``log.flush.interval.messages=1`` on every broker (an acknowledged record is on disk).

Two drivers:

* ``wire`` (``bench/wireproduce.py``): pipelined Produce requests of one prebuilt 960 KiB batch,
  ``--inflight`` outstanding per connection, one connection per leader and process. It costs
  little CPU per byte, so the brokers set the pace. Measured over a fixed window after a
  warm-up: record bytes acknowledged in the window, and every process's CPU in the window.
* ``perf``: Kafka's own ProducerPerformance (``kafka-producer-perf-test``), ``--producers``
  of them at once, each sending ``--perf-records / --producers`` records with S2's producer
  settings (batch.size=1 MiB, linger.ms=1). Throughput is the sum of their reported rates; the
  CPU window runs from their spawn to the last exit (JVM start-up included).

CPU: user+system time of every broker process (``/proc/<pid>/stat``; for ``--workers N`` the
parent and its N workers), of ZooKeeper (Headrace) and of the clients (their own accounting,
or their rusage as children), and how busy the whole machine was (``/proc/stat``), so that
the rest is visible: kernel threads (writeback, the journal), interrupt time, other processes
(a shared machine: every process is looked at four times a second, so short-lived ones count)
and this harness. All as cores: CPU-seconds per second of the window. Also the busiest broker
main thread (Headrace's event loop: near 1.0 means that broker is CPU-bound), iowait, and the
brokers' disk (/proc/diskstats: MiB/s written, share of the window with I/O in progress).

Parts:

* ``scaling``: Headrace ``--workers 1`` and ``--workers 2`` (one ZooKeeper), with each driver
  in ``--drivers``; runs interleaved (w1, w2, then w2, w1, ...).
* ``versus``: Apache Kafka, three combined broker+controller KRaft nodes (a 3-voter quorum),
  and Headrace ``--workers 3``, driven by the same ProducerPerformance command (and by the
  wire client, unless ``--versus-drivers perf``); interleaved.
* ``replicated``: the same two clusters, but a topic of replication factor 3 (partition p's
  replicas on the brokers p, p+1, p+2 mod 3, the first its leader) with
  ``min.insync.replicas=2``, so an acks=all produce is answered once every ISR member has the
  batch. Each broker keeps its default flush settings (page-cache acks on every replica)
  unless ``--replicated-modes`` also names ``durable`` (``log.flush.interval.messages=1`` on
  every broker, as in the other parts). Results go to ``cluster-rf3.*`` and a section of
  docs/benchmarks.md of their own (``--stem``).

Every run checks its records: after the producers are done, the sum of the partitions' latest
offsets (ListOffsets: the high watermark) must equal the records the producers had
acknowledged (ProducerPerformance's count; the wire client's, warm-up included), or the run
fails. A produce answered with an error that was appended all the same fails it too.

Results: ``bench/results/<stem>.json`` (every sample, latencies summarised),
``<stem>.csv`` (one row per run), ``<stem>.png``; ``--readme`` rewrites docs/benchmarks.md
between ``<!-- bench-<stem>:start -->`` and ``<!-- bench-<stem>:end -->``. The stem is
``cluster``, or ``cluster-rf3`` when only the replicated part runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import brokers, wire, wireproduce
from bench.apache_kafka import (
    HOST,
    KAFKA_VERSION,
    TOOL_JVM_FLAGS,
    ApacheKafka,
    classpath,
    log_flags,
    parse_producer_performance,
)
from bench.context import RESULTS, Progress, loadavg
from bench.machine import machine, memory_kept, memory_text
from bench.cpu import (  # noqa: F401  (the names cluster.py always had)
    Meter,
    children_of,
    descendants,
    disk_counters,
    machine_jiffies,
    processes,
    thread_cpu_seconds,
)
from bench.produce import PRODUCER, producer_args
from bench.scenarios import S1_PROPS, KiB, MiB, Scenario
from headrace.broker.tools.process import BrokerProcess, terminate

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"  # the cluster sections (they were in README.md)


def markers(stem: str) -> tuple[str, str]:
    return f"<!-- bench-{stem}:start -->", f"<!-- bench-{stem}:end -->"


START, END = markers("cluster")
RECORD_SIZE = 64 * KiB
# 15 records: the largest batch under max.request.size (1 MiB) and message.max.bytes, what
# ProducerPerformance sends with batch.size=1 MiB
BATCH_RECORDS = 15


def workload(partitions: int, records: int) -> Scenario:
    """S2's producer (64 KiB records, batch.size=1 MiB, linger.ms=1, acks=all, durable) on
    ``partitions`` partitions."""
    return Scenario("C", f"{partitions} partitions, 64 KiB records, acks=all, durable",
                    "produce", partitions, RECORD_SIZE, {"full": records}, S1_PROPS,
                    durable=True)


# --------------------------------------------------------------------------------------------
# Clusters


class HeadraceCluster:
    """``headrace serve --workers n`` in one cluster of its own (a fresh ZooKeeper chroot)."""

    system = "headrace"

    def __init__(self, data_dir: Path, n: int, zk_connect: str, log_file: Path,
                 pythonpath: Path | None, durable: bool = True,
                 extra: dict[str, object] | None = None) -> None:
        overrides = {**brokers.HEADRACE_PARITY, "zookeeper.connect": zk_connect,
                     **({"log.flush.interval.messages": 1} if durable else {}), **(extra or {})}
        self.n = n
        self.data_dir = data_dir
        self.process = BrokerProcess(data_dir, overrides, args=["--workers", str(n)],
                                     log_file=log_file, pythonpath=pythonpath)
        self.node_ids = list(range(1, n + 1))

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process.start(timeout=120)
        self.addresses = [(HOST, p) for p in self.process.ports]
        # --workers 1 serves in the process itself; more: a parent and a child per worker
        self.pids = [self.process.pid, *children_of(self.process.pid)]
        if len(self.pids) != (1 if self.n == 1 else self.n + 1):
            raise RuntimeError(f"expected {self.n} workers under pid {self.process.pid}, "
                               f"found {self.pids[1:]}")

    def stop(self) -> None:
        self.process.stop(timeout=60)
        shutil.rmtree(self.data_dir, ignore_errors=True)


class KafkaCluster:
    """Apache Kafka in KRaft mode: ``n`` processes, each a combined broker and controller
    (``process.roles=broker,controller``; the controller quorum is all ``n``), own ports and
    log directory, one cluster id. ``extra``: more settings for every node."""

    system = "kafka"

    def __init__(self, data_dir: Path, n: int, durable: bool = True,
                 extra: dict[str, object] | None = None) -> None:
        self.data_dir = data_dir
        self.n = n
        self.node_ids = list(range(1, n + 1))
        bases = [brokers.free_port_block(3) for _ in range(n)]
        voters = ",".join(f"{i}@{HOST}:{b + 1}" for i, b in zip(self.node_ids, bases))
        self.nodes = [
            ApacheKafka(data_dir / f"node-{i}", port=b, controller_port=b + 1,
                        internal_port=b + 2, properties={
                            "node.id": i, "controller.quorum.voters": voters,
                            **({"log.flush.interval.messages": 1} if durable else {}),
                            "offsets.topic.num.partitions": 3 * n, **(extra or {})})
            for i, b in zip(self.node_ids, bases)]
        self.addresses = [(HOST, b) for b in bases]

    def start(self) -> None:
        cp = classpath()
        cluster_id = subprocess.run(
            ["java", *TOOL_JVM_FLAGS, *log_flags(KAFKA_VERSION, tool=True), "-cp", cp,
             "kafka.tools.StorageTool", "random-uuid"], check=True, capture_output=True,
            text=True).stdout.strip().splitlines()[-1]
        for node in self.nodes:
            node.write_properties()
            node.format_storage(cp, cluster_id=cluster_id)
        # each node waits for a controller quorum, so they start together
        errors: list[BaseException] = []

        def start(node: ApacheKafka) -> None:
            try:
                node.start(timeout=180)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=start, args=(node,)) for node in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise RuntimeError(f"Apache Kafka cluster did not start: {errors[0]}")
        self.pids = [node.proc.pid for node in self.nodes if node.proc]
        deadline = time.monotonic() + 60
        while len(self._registered()) < self.n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only brokers {self._registered()} registered")
            time.sleep(0.3)

    def _registered(self) -> list[int]:
        from bench.apache_kafka import metadata_brokers
        try:
            return sorted(b[0] for b in metadata_brokers(*self.addresses[0]))
        except (OSError, ConnectionError):
            return []

    def stop(self) -> None:
        # all at once: a node stopping alone waits for a controller quorum that the nodes
        # stopped before it no longer form
        threads = [threading.Thread(target=node.stop, kwargs={"timeout": 60})
                   for node in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def make_topic(cluster, topic: str, partitions: int, rf: int = 1,
               configs: dict[str, str] | None = None, timeout: float = 60) -> dict[int, int]:
    """Create ``topic`` with partition p's replicas on brokers ``node_ids[(p + k) % n]`` for
    k < ``rf`` (the first the leader); wait until every broker's Metadata shows every
    partition's leader. Returns {partition: leader}."""
    ids = cluster.node_ids
    plan = {p: [ids[(p + k) % len(ids)] for k in range(rf)] for p in range(partitions)}
    host, port = cluster.addresses[0]
    deadline = time.monotonic() + timeout
    with wire.WireClient(host, port) as c:
        # a broker learns of the others through ZooKeeper's watches (Headrace) or the
        # controller (Kafka) a moment after they serve: place nothing on a broker it lacks
        while c.metadata(None) is not None and sorted(c.brokers) != sorted(ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}:{port} knows brokers {sorted(c.brokers)} only")
            time.sleep(0.1)
        err = c.create_topic(topic, partitions, assignments=plan, configs=configs)
        if err:
            raise wire.WireError(f"CreateTopics {topic}: error {err}")
    for host, port in cluster.addresses:
        with wire.WireClient(host, port) as c:
            while True:
                terr, parts = c.metadata([topic]).get(topic, (3, {}))
                seen = {p: leader for p, (e, leader) in parts.items() if e == 0}
                if terr == 0 and seen == {p: r[0] for p, r in plan.items()}:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic} not served by {host}:{port}: {parts}")
                time.sleep(0.1)
    return {p: r[0] for p, r in plan.items()}


def check_records(cluster, topic: str, partitions: int, acked: int) -> int:
    """The sum of the partitions' latest offsets (asked of each leader); raise unless it is
    ``acked``, the records the producers had acknowledged."""
    host, port = cluster.addresses[0]
    with wire.WireClient(host, port) as c:
        _terr, parts = c.metadata([topic])[topic]
        by_leader: dict[tuple[str, int], list[int]] = {}
        for p, (_err, leader) in parts.items():
            by_leader.setdefault(c.brokers[leader], []).append(p)
    ends: dict[int, int] = {}
    for addr, ps in by_leader.items():
        with wire.WireClient(*addr) as c:
            for p, (err, offset) in c.list_offsets(topic, ps).items():
                if err:
                    raise wire.WireError(f"ListOffsets {topic}-{p}: error {err}")
                ends[p] = offset
    total = sum(ends.values())
    if len(ends) != partitions or total != acked:
        raise RuntimeError(f"records check failed: {acked} acknowledged, latest offsets "
                           f"{dict(sorted(ends.items()))} (sum {total})")
    return total


# --------------------------------------------------------------------------------------------
# Drivers


@dataclass
class Run:
    part: str
    system: str
    brokers: int
    driver: str
    rep: int
    durable: bool = True  # log.flush.interval.messages=1; else acks=all from the page cache

    @property
    def rf(self) -> int:
        return 3 if self.part == "replicated" else 1

    @property
    def label(self) -> str:
        return f"{self.system} x{self.brokers} RF={self.rf} {self.driver}" + (
            "" if self.durable else " page-cache")


def drive_wire(cluster, topic: str, groups: dict[str, list[int]], args, logs: Path,
               tag: str, progress: Progress) -> dict:
    bootstrap = ",".join(f"{h}:{p}" for h, p in cluster.addresses)
    return wireproduce.drive(bootstrap, topic, args.clients, Meter(groups, logs), logs, tag,
                             record_size=RECORD_SIZE, batch_records=BATCH_RECORDS,
                             inflight=args.inflight, warmup=args.warmup, seconds=args.seconds,
                             progress=progress)


def drive_perf(cluster, topic: str, groups: dict[str, list[int]], args, logs: Path,
               tag: str, progress: Progress) -> dict:
    per = args.perf_records // args.producers
    sc = workload(args.partitions, per)
    bootstrap = ",".join(f"{h}:{p}" for h, p in cluster.addresses)
    cp = classpath()
    outs: list[list[str]] = [[] for _ in range(args.producers)]
    meter = Meter(groups, logs).start()
    procs = []
    for i in range(args.producers):
        cmd = ["java", *TOOL_JVM_FLAGS, *log_flags(KAFKA_VERSION, tool=True), "-cp", cp,
               PRODUCER, *producer_args(sc, topic, bootstrap, per)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL,
                                      stderr=open(logs / f"{tag}-perf{i}.log", "w")))

    def pump(i: int, p: subprocess.Popen) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            outs[i].append(line)
            if i == 0 and "records sent" in line:
                progress(f"  {tag} producer 1/{args.producers}: {line.strip()[:110]}")

    readers = [threading.Thread(target=pump, args=(i, p), daemon=True)
               for i, p in enumerate(procs)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + args.perf_timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            terminate(p, 5)
    cpu = meter.stop()
    for t in readers:
        t.join(5)
    parsed = []
    for i, (p, out) in enumerate(zip(procs, outs)):
        (logs / f"{tag}-perf{i}.out").write_text("".join(out))
        summary = parse_producer_performance("".join(out))
        if p.returncode != 0 or summary is None:
            raise RuntimeError(f"ProducerPerformance {i} exited with {p.returncode}; see "
                               f"{logs / f'{tag}-perf{i}.log'}")
        parsed.append(summary)
    total = sum(s["records"] for s in parsed) * RECORD_SIZE
    return {
        "mib_per_sec": sum(s["mb_per_sec"] for s in parsed),
        "records_per_sec": sum(s["records_per_sec"] for s in parsed),
        "mib_per_sec_wall": total / MiB / cpu["wall_s"],
        "p50_ms": statistics.median(s["p50_ms"] for s in parsed),
        "p99_ms": max(s["p99_ms"] for s in parsed),
        "p99_ms_per_producer": [s["p99_ms"] for s in parsed],
        "client_cpu_s": cpu["reaped_children_cpu_s"],
        "bytes": total, "records_acked": sum(s["records"] for s in parsed), **cpu,
    }


def derive(sample: dict) -> dict:
    """Cores (CPU-seconds per second of the window) and MiB per broker CPU-second."""
    wall = sample["wall_s"]
    for group in ("broker", "client", "zookeeper"):
        if f"{group}_cpu_s" in sample:
            sample[f"{group}_cores"] = sample[f"{group}_cpu_s"] / wall
    if sample.get("broker_per_process_cpu_s"):
        sample["broker_per_process_cores"] = [c / wall for c in
                                              sample["broker_per_process_cpu_s"]]
    if sample.get("broker_main_thread_cores"):
        sample["busiest_loop_cores"] = max(sample["broker_main_thread_cores"])
    mib = sample["bytes"] / MiB
    sample["mib_per_broker_cpu_s"] = mib / sample["broker_cpu_s"] if sample["broker_cpu_s"] \
        else None
    sample["broker_cpu_ms_per_mib"] = sample["broker_cpu_s"] * 1000 / mib if mib else None
    if sample.get("machine_busy_cores") is not None:
        known = sum(sample.get(f"{g}_cores", 0.0) for g in ("broker", "client", "zookeeper"))
        # everything but the benchmark's brokers, clients and ZooKeeper: the parts below,
        # plus what ended within the window unseen
        sample["other_cores"] = max(0.0, sample["machine_busy_cores"] - known)
        sample["kernel_cores"] = (sample.get("kernel_threads_cores") or 0.0) + (
            sample.get("interrupt_cores") or 0.0)
        sample["unattributed_cores"] = sample["other_cores"] - sample["kernel_cores"] - (
            sample.get("other_processes_cores") or 0.0) - (sample.get("harness_cores") or 0.0)
    return sample


def busy_cores(seconds: float = 3.0) -> float:
    """How many cores the machine keeps busy, over ``seconds`` (from /proc/stat)."""
    b0, t0, *_ = machine_jiffies()
    time.sleep(seconds)
    b1, t1, *_ = machine_jiffies()
    return (b1 - b0) / (t1 - t0) * (os.cpu_count() or 1) if t1 > t0 else 0.0


def wait_idle(limit: float, max_wait: float, progress: Progress) -> tuple[float, float]:
    """Wait (up to ``max_wait`` seconds) until other work keeps fewer than ``limit`` cores
    busy, so that a run starts on a quiet machine. Returns (busy cores, seconds waited)."""
    t0 = time.monotonic()
    busy = busy_cores()
    while busy > limit and time.monotonic() - t0 < max_wait:
        progress(f"  machine busy ({busy:.2f} cores > {limit}): waiting "
                 f"({time.monotonic() - t0:.0f}s of at most {max_wait:.0f}s)")
        time.sleep(7)
        busy = busy_cores()
    return busy, time.monotonic() - t0


def run_one(run: Run, args, ctx: dict, progress: Progress) -> dict:
    ctx["seq"] += 1
    tag = f"{ctx['seq']:02d}-{run.system}-x{run.brokers}-rf{run.rf}-{run.driver}" + (
        "" if run.durable else "-pagecache")
    data = ctx["data"] / tag
    logs = ctx["logs"]
    busy, waited = wait_idle(args.idle_cores, args.idle_wait, progress) if args.idle_wait \
        else (None, 0.0)
    sample: dict = {"part": run.part, "system": run.system, "brokers": run.brokers,
                    "rf": run.rf, "driver": run.driver, "durable": run.durable, "rep": run.rep,
                    "loadavg": loadavg(),
                    "busy_before": busy, "waited_s": waited}
    progress(f"{tag}: load average {sample['loadavg']}, busy before "
             f"{'-' if busy is None else f'{busy:.2f}'} cores; starting the cluster")
    if run.system == "headrace":
        zk = ctx["zk"]
        chroot = f"/bench-{ctx['seq']}"
        cluster: HeadraceCluster | KafkaCluster = HeadraceCluster(
            data, run.brokers, zk.connect_string + chroot, logs / f"{tag}.broker.log",
            ctx["pythonpath"], durable=run.durable)
        zk_pids = [zk.pid]
    else:
        cluster = KafkaCluster(data, run.brokers, durable=run.durable)
        zk_pids = []
    try:
        cluster.start()
        topic = "bench-cluster"
        sample["leaders"] = make_topic(
            cluster, topic, args.partitions, run.rf,
            {"min.insync.replicas": str(args.min_insync_replicas)} if run.rf > 1 else None)
        groups = {"broker": cluster.pids}
        if zk_pids:
            groups["zookeeper"] = zk_pids
        progress(f"{tag}: {len(cluster.pids)} broker processes {cluster.pids}; "
                 f"{args.partitions} partitions; driving with {run.driver}")
        drive = drive_wire if run.driver == "wire" else drive_perf
        sample.update(drive(cluster, topic, groups, args, logs, tag, progress))
        sample["records_checked"] = check_records(cluster, topic, args.partitions,
                                                  sample["records_acked"])
    finally:
        cluster.stop()
    derive(sample)
    progress(f"{tag}: {sample['mib_per_sec']:.1f} MiB/s, p99 {sample['p99_ms']:.0f} ms, "
             f"brokers {sample['broker_cores']:.2f} cores "
             f"(busiest main thread {sample.get('busiest_loop_cores', 0):.2f}) "
             f"({sample['mib_per_broker_cpu_s']:.0f} MiB per CPU-s), "
             f"clients {sample['client_cores']:.2f}, "
             f"machine busy {sample['machine_busy_cores']:.2f} of {sample['cpus']}, "
             f"other processes {sample.get('other_processes_cores', 0):.2f}, disk busy "
             f"{sample.get('disk_busy', 0):.0%} ({sample.get('disk_write_mib_per_sec', 0):.0f} "
             "MiB/s written)")
    return sample


# --------------------------------------------------------------------------------------------
# Summary, files, plot, docs section

METRICS = ("mib_per_sec", "p50_ms", "p99_ms", "mib_per_broker_cpu_s", "broker_cpu_ms_per_mib",
           "broker_cores", "busiest_loop_cores", "client_cores", "zookeeper_cores",
           "other_cores", "kernel_cores",
           "other_processes_cores", "harness_cores", "unattributed_cores",
           "machine_busy_cores", "iowait_cores", "disk_busy", "disk_write_mib_per_sec")


def summarise(samples: list[dict], max_other: float | None = None) -> list[dict]:
    """Medians per (part, system, brokers, driver), in the order first seen. With
    ``max_other``: a run during which other processes (other work on a shared machine) kept
    more cores busy than that is *disturbed*, and left out of the medians when the
    configuration has an undisturbed run (``runs``, ``counted`` and ``disturbed`` say so)."""
    keys: dict[tuple, list[dict]] = {}
    for s in samples:
        if s.get("status") == "failed":
            continue
        keys.setdefault((s["part"], s["system"], s["brokers"], s["driver"],
                         s.get("durable", True)), []).append(s)
    out = []
    for (part, system, n, driver, durable), ss in keys.items():
        clean = ss if max_other is None else [
            s for s in ss if (s.get("other_processes_cores") or 0.0) <= max_other]
        use = clean or ss
        row = {"part": part, "system": system, "brokers": n, "driver": driver,
               "durable": durable, "runs": len(ss),
               "counted": len(use), "disturbed": len(ss) - len(clean)}
        for m in METRICS:
            vals = [s[m] for s in use if s.get(m) is not None]
            row[m] = statistics.median(vals) if vals else None
        tp = [s["mib_per_sec"] for s in use]
        row["mib_per_sec_range"] = [min(tp), max(tp)]
        out.append(row)
    # grouped by part, then flush mode, then driver, each in the order first seen (a failed
    # run must not scatter a group)
    first: dict[tuple, int] = {}
    for r in out:
        for k in ((r["part"],), (r["part"], r["durable"]), (r["part"], r["durable"], r["driver"])):
            first.setdefault(k, len(first))
    return sorted(out, key=lambda r: (first[(r["part"],)], first[(r["part"], r["durable"])],
                                      first[(r["part"], r["durable"], r["driver"])]))


def find(rows: list[dict], **kw) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in kw.items())), None)


def ratios(rows: list[dict]) -> list[dict]:
    """2-worker over 1-worker per driver; Headrace over Kafka (3 brokers)."""
    out = []
    for driver, durable in (("wire", True), ("perf", True), ("wire", False), ("perf", False)):
        a = find(rows, part="scaling", brokers=1, driver=driver, durable=durable)
        b = find(rows, part="scaling", brokers=2, driver=driver, durable=durable)
        if a and b:
            name = ("wire client" if driver == "wire" else "ProducerPerformance") + (
                "" if durable else ", page-cache acks")
            out.append({"what": f"Headrace --workers 2 / --workers 1 ({name})",
                        **{m: _div(b[m], a[m]) for m in ("mib_per_sec", "mib_per_broker_cpu_s",
                                                         "broker_cores")}})
    for part, durable, driver in ((part, durable, driver) for part in ("versus", "replicated")
                                  for durable in (False, True) for driver in ("perf", "wire")):
        k = find(rows, part=part, system="kafka", driver=driver, durable=durable)
        h = find(rows, part=part, system="headrace", driver=driver, durable=durable)
        if k and h:
            name = ("ProducerPerformance" if driver == "perf" else "wire client") + _flush(h)
            rf = ", RF=3" if part == "replicated" else ""
            out.append({"what": f"Headrace x3 / Kafka x3 ({name}{rf})",
                        **{m: _div(h[m], k[m]) for m in (
                            "mib_per_sec", "mib_per_broker_cpu_s", "broker_cores", "p99_ms",
                            "broker_cpu_ms_per_mib")}})
    return out


def _div(a, b):
    return a / b if a is not None and b else None


def headline_rows(results: dict) -> list[str]:
    """Rows of the README's headline table (bench/report.py's ``headline_section``) from an
    RF=3 run: throughput and broker CPU per MiB with each broker's default flush settings,
    Kafka's 3 brokers beside Headrace's, for each driver."""
    rows, out = results.get("summary") or [], []
    for driver, name in (("wire", "wire client"), ("perf", "ProducerPerformance")):
        k = find(rows, part="replicated", system="kafka", driver=driver, durable=False)
        h = find(rows, part="replicated", system="headrace", driver=driver, durable=False)
        if not (k and h):
            continue
        title = f"R1: 3 brokers, RF=3, 64 KiB records, acks=all, {name}"
        for metric, label, digits in (("mib_per_sec", "throughput (MiB/s)", 0),
                                      ("broker_cpu_ms_per_mib", "broker CPU per MiB (ms)", 1)):
            r = _div(h[metric], k[metric])
            out.append(f"| {title}: {label} | {k[metric]:,.{digits}f} | {h[metric]:,.{digits}f} "
                       f"| {'-' if r is None else f'{r:.2f}x'} |")
    return out


def _f(v, digits: int = 1) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _flush(r: dict) -> str:
    """What the run's acks wait for on disk, when its part's text does not already say."""
    if r["part"] == "replicated":
        return ", log.flush.interval.messages=1" if r.get("durable") else ", default flush"
    return "" if r.get("durable", True) else ", page-cache acks"


def _name(r: dict) -> str:
    sysname = "Apache Kafka" if r["system"] == "kafka" else "Headrace"
    unit = "workers" if r["system"] == "headrace" and r["part"] == "scaling" else "brokers"
    drv = "wire client" if r["driver"] == "wire" else "ProducerPerformance"
    return f"{sysname}, {r['brokers']} {unit}, {drv}{_flush(r)}"


COLUMNS = (  # (header, cell) of the summary table, after the run's name
    ("MiB/s (range)", lambda r: f"{_f(r['mib_per_sec'])}{_range(r)}"),
    ("p50 ms", lambda r: _f(r["p50_ms"])),
    ("p99 ms", lambda r: _f(r["p99_ms"])),
    ("MiB per broker CPU-s", lambda r: _f(r["mib_per_broker_cpu_s"])),
    ("broker CPU ms/MiB", lambda r: _f(r["broker_cpu_ms_per_mib"])),
    ("brokers", lambda r: _f(r["broker_cores"], 2)),
    # (Headrace's event loop; a JVM's main thread only waits)
    ("busiest main thread", lambda r: "-" if r["system"] == "kafka"
     else _f(r.get("busiest_loop_cores"), 2)),
    ("clients", lambda r: _f(r["client_cores"], 2)),
    ("ZooKeeper", lambda r: _f(r["zookeeper_cores"], 2)),
    ("kernel", lambda r: _f(r["kernel_cores"], 2)),
    ("other processes", lambda r: _f(r["other_processes_cores"], 2)),
    ("machine busy", lambda r: _f(r["machine_busy_cores"], 2)),
    ("disk busy", lambda r: _pct(r.get("disk_busy"))),
)
OPTIONAL = {"busiest main thread": "busiest_loop_cores", "disk busy": "disk_busy"}


def _runs(r: dict) -> str:
    if r.get("disturbed") and r["disturbed"] == r["runs"]:
        return f" ({r['runs']} runs, all disturbed)"
    if r.get("counted", r["runs"]) != r["runs"]:
        return f" ({r['counted']} of {r['runs']} runs)"
    return ""


def markdown(results: dict) -> str:
    rows = results["summary"]
    # columns an older results file has no figures for are left out
    cols = [(h, cell) for h, cell in COLUMNS
            if h not in OPTIONAL or any(r.get(OPTIONAL[h]) is not None for r in rows)]
    lines = ["| run | " + " | ".join(h for h, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for r in rows:
        lines.append(f"| {_name(r)}{_runs(r)} | " + " | ".join(c(r) for _, c in cols) + " |")
    rr = results.get("ratios", [])
    if rr:
        lines += ["", "| ratio | MiB/s | MiB per broker CPU-s | broker cores | p99 "
                  "| broker CPU per MiB |", "|---|---:|---:|---:|---:|---:|"]
        for r in rr:
            lines.append(f"| {r['what']} | {_x(r.get('mib_per_sec'))} | "
                         f"{_x(r.get('mib_per_broker_cpu_s'))} | {_x(r.get('broker_cores'))} | "
                         f"{_x(r.get('p99_ms'))} | {_x(r.get('broker_cpu_ms_per_mib'))} |")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _range(r: dict) -> str:
    lo, hi = r.get("mib_per_sec_range") or (None, None)
    return "" if lo is None or r.get("counted", 1) < 2 else f" ({_f(lo)}-{_f(hi)})"


def _x(v) -> str:
    return "" if v is None else f"{v:.2f}x"


def write_csv(samples: list[dict], path: Path) -> None:
    cols = ["part", "system", "brokers", "rf", "driver", "rep", "status", "load1", "load5",
            "mib_per_sec", "records_per_sec", "p50_ms", "p99_ms", "wall_s", "broker_cpu_s",
            "broker_cores", "mib_per_broker_cpu_s", "broker_cpu_ms_per_mib",
            "broker_per_process_cores", "broker_main_thread_cores", "client_cpu_s",
            "client_cores", "zookeeper_cores",
            "other_cores", "kernel_threads_cores", "interrupt_cores", "other_processes_cores",
            "harness_cores", "unattributed_cores", "machine_busy_cores", "iowait_cores",
            "disk_busy", "disk_write_mib_per_sec", "durable", "records_checked", "errors"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for s in samples:
            row = dict(s, load1=s["loadavg"][0], load5=s["loadavg"][1])
            cells = []
            for c in cols:
                v = row.get(c)
                if isinstance(v, float):
                    v = round(v, 4)
                elif isinstance(v, (list, dict)):
                    v = json.dumps(v if not isinstance(v, list) else
                                   [round(x, 3) for x in v])
                cells.append("" if v is None else v)
            w.writerow(cells)


def write_plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["summary"]
    if not rows:
        return
    labels = [f"{'Kafka' if r['system'] == 'kafka' else 'Headrace'}\nx{r['brokers']}\n"
              f"{'wire' if r['driver'] == 'wire' else 'perf'}"
              + ("\nno fsync" if not r.get("durable", True) else
                 "\nfsync each" if r["part"] == "replicated" else "") for r in rows]
    colors = ["#555555" if r["system"] == "kafka" else "#1f77b4" for r in rows]
    x = list(range(len(rows)))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    ax = axes[0]
    ax.bar(x, [r["mib_per_sec"] or 0 for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(i, r["mib_per_sec"] or 0, f"{r['mib_per_sec'] or 0:.0f}", ha="center",
                va="bottom", fontsize=8)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylim(0, max(r["mib_per_sec"] or 0 for r in rows) * 1.12 or 1)
    ax.set_ylabel("MiB/s acknowledged")
    ax.set_title("Throughput")
    ax = axes[1]
    bottom = [0.0] * len(rows)
    for key, name, col in (("broker_cores", "brokers", "#1f77b4"),
                           ("client_cores", "clients", "#ff7f0e"),
                           ("zookeeper_cores", "ZooKeeper", "#2ca02c"),
                           ("kernel_cores", "kernel threads, irq", "#9467bd"),
                           ("rest_cores", "other processes, rest", "#bbbbbb")):
        vals = [max(0.0, (r.get("other_cores") or 0.0) - (r.get("kernel_cores") or 0.0))
                if key == "rest_cores" else r.get(key) or 0.0 for r in rows]
        ax.bar(x, vals, bottom=bottom, color=col, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    cpus = results.get("cpus") or 2
    ax.axhline(cpus, color="k", lw=0.8, ls="--")
    ax.set_ylim(0, cpus * 1.45)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel(f"cores busy (of {cpus})")
    ax.set_title("Who used the CPU")
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax = axes[2]
    ax.bar(x, [r["mib_per_broker_cpu_s"] or 0 for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(i, r["mib_per_broker_cpu_s"] or 0,
                f"{r['mib_per_broker_cpu_s'] or 0:.0f}\np99 {r['p99_ms'] or 0:.0f} ms",
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylim(0, max(r["mib_per_broker_cpu_s"] or 0 for r in rows) * 1.2 or 1)
    ax.set_ylabel("MiB per broker CPU-second")
    ax.set_title("Broker efficiency")
    fig.suptitle(f"Cluster benchmark ({_setup(results)}), 64 KiB records, acks=all; load "
                 f"average at start {results['loadavg_start']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _setup(results: dict) -> str:
    if results.get("stem", "cluster") == "cluster-rf3":
        return f"RF=3, min.insync.replicas={results.get('min_insync_replicas', 2)}"
    return "RF=1, log.flush.interval.messages=1"


TITLES = {"cluster": "## Cluster: throughput per core, and 3 brokers beside Apache Kafka's 3",
          "cluster-rf3": "### RF=3: 3 brokers beside Apache Kafka's 3, every record on three"}


def readme_section(results: dict, page: Path = PAGE) -> str:
    """The section of ``page`` for ``results``, its plot linked relative to the page."""
    stem = results.get("stem", "cluster")
    la = results["loadavg_start"]
    loads = [s["loadavg"][0] for s in results["samples"]]
    busy = [s["busy_before"] for s in results["samples"] if s.get("busy_before") is not None]
    busy_text = (f"; other work in the 3 s before each run: {min(busy):.2f} to "
                 f"{max(busy):.2f} cores busy" if busy else "")
    m = results.get("machine", {})
    if stem == "cluster-rf3":
        topic = (f"{results['partitions']} partitions of replication factor 3 (each broker "
                 "leads two and follows four), `min.insync.replicas="
                 f"{results.get('min_insync_replicas', 2)}`; 64 KiB records, acks=all; "
                 "each broker's default flush settings (page-cache acks on every replica; "
                 "Kafka's and Headrace's defaults alike) unless the row says "
                 "`log.flush.interval.messages=1` (then on every broker). The end offsets "
                 "are checked against the records acknowledged after every run. ")
    else:
        topic = (f"{results['partitions']} partitions (RF=1) spread evenly over the brokers; "
                 "64 KiB records, acks=all, `log.flush.interval.messages=1` on every broker. ")
    start, end = markers(stem)
    plot = os.path.relpath(RESULTS.resolve() / f"{stem}.png", page.resolve().parent)
    return "\n".join([
        start,
        TITLES[stem],
        "",
        f"Command: `{results['command']}` ({results['stamp']}; Headrace at "
        f"{results.get('headrace_at')}, Apache Kafka {KAFKA_VERSION}; {m.get('cpu_model', '?')}, "
        f"{m.get('cpus')} CPUs). Load average at start {la}, at end {results['loadavg_end']}; "
        f"1-minute load at the start of each run {min(loads):.2f} to {max(loads):.2f}"
        f"{busy_text}{memory_text(m.get('memory_kept'), '; ')}. {topic}Wire client: "
        f"{results['clients']} processes x {results['inflight']} requests in flight per "
        f"leader, {results['seconds']:g} s window after {results['warmup']:g} s warm-up. "
        f"ProducerPerformance: {results['producers']} processes, {results['perf_records']} "
        "records in all, batch.size=1 MiB, linger.ms=1. Medians of "
        f"{results['runs']} run(s) each, interleaved; a run during which other processes kept "
        f"more than {results.get('max_other_cores')} cores busy is left out when its "
        "configuration has a quieter one (the CSV keeps every run). CPU in cores "
        "(CPU-seconds per second of the window); nothing pinned.",
        "",
        markdown(results),
        "",
        f"![{stem}]({Path(plot).as_posix()})",
        end,
    ])


def update_readme(results: dict, page: Path = PAGE) -> None:
    """The section of ``page`` (docs/benchmarks.md) between this stem's markers, appended
    with its markers when they are absent."""
    text = page.read_text()
    section = readme_section(results, page)
    start, end = markers(results.get("stem", "cluster"))
    if start in text and end in text:
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text)


# --------------------------------------------------------------------------------------------


def plan(args) -> list[Run]:
    runs: list[Run] = []
    parts = args.parts.split(",")
    for rep in range(args.runs):
        if "scaling" in parts:
            for mode in args.scaling_modes.split(","):
                for driver in args.drivers.split(","):
                    if mode == "page-cache" and driver not in args.page_cache_drivers:
                        continue
                    order = [1, 2] if rep % 2 == 0 else [2, 1]
                    runs += [Run("scaling", "headrace", n, driver, rep, mode == "durable")
                             for n in order]
        if "versus" in parts:
            for driver in args.versus_drivers.split(","):
                order = ["kafka", "headrace"] if rep % 2 == 0 else ["headrace", "kafka"]
                runs += [Run("versus", s, 3, driver, rep) for s in order]
        if "replicated" in parts:
            for mode in args.replicated_modes.split(","):
                for driver in args.replicated_drivers.split(","):
                    order = ["kafka", "headrace"] if rep % 2 == 0 else ["headrace", "kafka"]
                    runs += [Run("replicated", s, 3, driver, rep, mode == "durable")
                             for s in order]
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="scaling,versus",
                    help="scaling, versus, replicated (comma-separated)")
    ap.add_argument("--drivers", default="wire,perf", help="drivers of the scaling part")
    ap.add_argument("--scaling-modes", default="durable",
                    help="durable: log.flush.interval.messages=1 (as S2); page-cache: acks=all "
                         "without fsync (as S1), which takes the disk out of the scaling")
    ap.add_argument("--page-cache-drivers", default="wire",
                    help="drivers of the page-cache scaling runs")
    ap.add_argument("--versus-drivers", default="perf,wire",
                    help="drivers of the Kafka-vs-Headrace part (perf is the one asked for; "
                         "wire shows both clusters limited by their brokers)")
    ap.add_argument("--replicated-drivers", default="perf,wire",
                    help="drivers of the RF=3 part")
    ap.add_argument("--replicated-modes", default="default",
                    help="default: each broker's default flush settings; durable: "
                         "log.flush.interval.messages=1 (comma-separated)")
    ap.add_argument("--min-insync-replicas", type=int, default=2,
                    help="the RF=3 topic's min.insync.replicas")
    ap.add_argument("--stem", help="name of the results files and docs section (default: "
                                   "cluster-rf3 for --parts replicated, else cluster)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each configuration")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--clients", type=int, default=4, help="wire client processes")
    ap.add_argument("--inflight", type=int, default=4,
                    help="wire client: requests in flight per connection")
    ap.add_argument("--seconds", type=float, default=20.0, help="wire client: measured window")
    ap.add_argument("--warmup", type=float, default=5.0, help="wire client: warm-up")
    ap.add_argument("--producers", type=int, default=2, help="ProducerPerformance processes")
    ap.add_argument("--perf-records", type=int, default=32768,
                    help="ProducerPerformance: records in all (64 KiB each)")
    ap.add_argument("--perf-timeout", type=float, default=600)
    ap.add_argument("--idle-cores", type=float, default=0.3,
                    help="before each run, wait until the machine keeps fewer cores busy")
    ap.add_argument("--idle-wait", type=float, default=300,
                    help="... for at most this many seconds (0: do not wait)")
    ap.add_argument("--max-other-cores", type=float, default=0.3,
                    help="runs during which other processes kept more cores busy are left "
                         "out of the medians (when their configuration has a quieter run)")
    ap.add_argument("--render", metavar="JSON",
                    help="no runs: summarise the samples of an earlier cluster.json again "
                         "and write the files (and --readme)")
    ap.add_argument("--headrace-ref", default="HEAD",
                    help="commit of Headrace to run (default HEAD, copied out of git); "
                         "'worktree' runs the installed working tree")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--raw-dir", help="logs and data (default: bench/results/raw/<stamp>)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite its section of docs/benchmarks.md")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    def interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)

    progress = Progress(args.quiet)
    if args.render:
        return finish(json.loads(Path(args.render).read_text()), args, progress)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raw = Path(args.raw_dir or RESULTS / "raw") / f"cluster-{stamp}"
    ctx: dict = {"seq": 0, "data": raw / "data", "logs": raw / "logs", "pythonpath": None}
    ctx["logs"].mkdir(parents=True, exist_ok=True)
    headrace_at = brokers.headrace_at(args.headrace_ref)
    if args.headrace_ref != "worktree":
        ctx["pythonpath"] = brokers.headrace_snapshot(args.headrace_ref, raw / "headrace")
    info = {k: v for k, v in machine().items() if k not in ("broker_cpus", "client_cpus")}
    command = "python -m bench.cluster " + " ".join(argv if argv is not None else sys.argv[1:])
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results: dict = {
        "command": command.strip(), "stamp": stamp, "headrace_at": headrace_at,
        "machine": info, "cpus": os.cpu_count(), "uptime_start": uptime,
        "loadavg_start": loadavg(), "runs": args.runs, "partitions": args.partitions,
        "clients": args.clients, "inflight": args.inflight, "seconds": args.seconds,
        "warmup": args.warmup, "producers": args.producers, "perf_records": args.perf_records,
        "parts": args.parts, "min_insync_replicas": args.min_insync_replicas,
        "stem": args.stem or ("cluster-rf3" if args.parts == "replicated" else "cluster"),
        "samples": [],
    }
    progress(f"uptime: {uptime}")
    runs = plan(args)
    failed = 0
    try:
        if any(r.system == "headrace" for r in runs):
            from headrace.broker.tools.zookeeper_server import ZooKeeperServer
            ctx["zk"] = ZooKeeperServer(raw / "zookeeper").start()
            from kazoo.client import KazooClient
            kz = KazooClient(ctx["zk"].connect_string)
            kz.start(timeout=30)
            for i in range(1, len(runs) + 1):
                kz.ensure_path(f"/bench-{i}")
            kz.stop()
            kz.close()
        # (windows of 10 s or more write enough for the host's first touch to show)
        with memory_kept(progress, args.seconds >= 10) as kept:
            info["memory_kept"] = kept
            for i, run in enumerate(runs, 1):
                progress(f"run {i}/{len(runs)}: {run.label} ({run.part})")
                try:
                    results["samples"].append(run_one(run, args, ctx, progress))
                except Exception as e:
                    failed += 1
                    progress(f"run {i} FAILED: {str(e)[-600:]}")
                    results["samples"].append({
                        "part": run.part, "system": run.system, "brokers": run.brokers,
                        "driver": run.driver, "durable": run.durable, "rep": run.rep,
                        "loadavg": loadavg(), "status": "failed", "reason": str(e)[-2000:]})
    finally:
        if ctx.get("zk"):
            ctx["zk"].stop()
        shutil.rmtree(ctx["data"], ignore_errors=True)
    results["loadavg_end"] = loadavg()
    results["elapsed_s"] = round(time.monotonic() - progress.t0, 1)
    return finish(results, args, progress, failed)


def finish(results: dict, args, progress: Progress, failed: int = 0) -> int:
    """Medians, ratios, the files, the plot and (``--readme``) the docs section."""
    results["max_other_cores"] = args.max_other_cores
    results["summary"] = summarise(results["samples"], args.max_other_cores)
    results["ratios"] = ratios(results["summary"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = results.get("stem", "cluster")
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_csv(results["samples"], out / f"{stem}.csv")
    if not args.no_plot:
        write_plot(results, out / f"{stem}.png")
    print(markdown(results))
    if args.readme:
        update_readme(results)
    progress(f"done: {results['elapsed_s']:.0f}s of runs; results in {out}"
             + (f"; {failed} run(s) FAILED" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
