"""Saturation runs: N client processes at once against one broker process, checked and metered.

How this works
--------------
A *session* is one broker process (fresh data directory): it is started, takes one discarded
warm-up run (so Kafka's JIT and both brokers' caches are warm), then the measured runs of a
plan, then it is stopped and its data removed. A *run* is ``clients`` client processes started
together, with the CPU of every broker process metered from /proc over the run
(``bench.cpu.Meter``: a ``--workers`` broker's parent and workers together). Two produce
drivers:

* ``wire`` (the default; ``bench/wireproduce.py``): pipelined Produce requests of one prebuilt
  batch as large as the scenario's ``batch.size`` holds, 5 in flight per connection (Kafka's
  ``max.in.flight.requests.per.connection``), acks=all. It costs the client little CPU per
  byte, so on two cores the broker, not the client, is what saturates. A run is a window of
  fixed length after a short warm-up inside the run; throughput and the broker's CPU are
  measured over the window, latency is each request's, send to response.
* ``perf``: Kafka's ProducerPerformance, each process doing ``records / clients`` records. On
  two cores its JVMs take the CPU a broker would use, so its curve stops at the clients.

Consumers, each reading the whole topic (the broker serves ``clients`` times the topic): with
``wire``, ``bench/wirefetch.py`` processes (Fetch requests of up to 50 MiB, only batch headers
read); with ``perf``, ConsumerPerformance processes, each in a group of its own.

A run proves its work, or raises (the harness then fails the cell, it does not drop the run):
every producer printed its summary with the records asked of it, its ``record-error-total``
is 0 (``--print-metrics``; ``record-retry-total`` is kept), and the topic's end offsets
(ListOffsets to each leader) add up to the records requested; a wire client had every request
answered without an error, and the end offsets add up to the records acknowledged; every
consumer read at least the records asked of it.

ProducerPerformance's throughput is bytes over the run's wall time, from the first client's
spawn to the last one's exit (JVM start-up included: conservative, and the same for both
brokers); the tools' own rates, summed, are kept too (``tool_mb_per_sec``). MiB per broker
CPU-second is the bytes stored (produce) or fetched (consume) over the broker processes'
CPU-seconds in the run.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

from bench import brokers, wire, wirefetch, wireproduce
from bench.apache_kafka import HOST, KAFKA_VERSION, TOOL_JVM_FLAGS, classpath, log_flags
from bench.consume import parse_consumer_performance
from bench.cpu import Meter
from bench.produce import PRODUCER, producer_args
from bench.scenarios import MiB, Scenario
from headrace.broker.tools.process import pinned, terminate

CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
WIRE_WARMUP_S = 3.0  # a wire run connects and fills its pipeline before the window opens
WIRE_INFLIGHT = 5  # Kafka's max.in.flight.requests.per.connection
_METRIC = re.compile(r"^producer-metrics:(record-error-total|record-retry-total|"
                     r"record-send-total):\{[^}]*\}\s*:\s*([-\d.eE+]+)", re.M)
_PERF_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


class RunFailed(RuntimeError):
    """A run that did not do the work asked of it (or a tool that failed)."""


def parse_producer(out: str) -> dict | None:
    """ProducerPerformance's final summary and the ``--print-metrics`` counters."""
    found = list(_PERF_LINE.finditer(out))
    if not found:
        return None
    keys = ["records", "records_per_sec", "mb_per_sec", "avg_ms", "max_ms", "p50_ms", "p95_ms",
            "p99_ms", "p999_ms"]
    res = {k: float(v) for k, v in zip(keys, found[-1].groups())}
    for name, value in _METRIC.findall(out):
        res[name.replace("-", "_")] = float(value)
    return res


def run_tools(main: str, argss: list[list[str]], log_prefix: Path, timeout: float) -> list[str]:
    """Start one Java tool process per argument list at once (on ``brokers.CLIENT_CPUS``);
    return their outputs. Raises ``RunFailed`` if one exits non-zero or is still running
    after ``timeout`` seconds."""
    cp = classpath()
    log_prefix.parent.mkdir(parents=True, exist_ok=True)
    procs, outs, logs = [], [], []
    for i, args in enumerate(argss):
        log = open(f"{log_prefix}-c{i}.log", "w")
        logs.append(log)
        cmd = ["java", *TOOL_JVM_FLAGS, *log_flags(KAFKA_VERSION, tool=True), "-cp", cp, main,
               *args]
        log.write("$ " + " ".join([main, *args]) + "\n")
        log.flush()
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                      stdin=subprocess.DEVNULL,
                                      preexec_fn=pinned(brokers.CLIENT_CPUS)))
        outs.append([])

    def pump(i: int) -> None:
        assert procs[i].stdout is not None
        for line in procs[i].stdout:
            outs[i].append(line)

    readers = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(len(procs))]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                terminate(p, 5)
    except BaseException:
        for p in procs:
            terminate(p, 5)
        raise
    for t in readers:
        t.join(10)
    texts = ["".join(o) for o in outs]
    for log, text in zip(logs, texts):
        log.write(text)
        log.close()
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RunFailed(f"{main.rsplit('.', 1)[-1]} client(s) {bad} (index, exit code) failed; "
                        f"see {log_prefix}-c*.log")
    return texts


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _derive(sample: dict, bytes_: int, cpu: dict) -> dict:
    wall = cpu["wall_s"]
    sample.update({k: cpu.get(k) for k in (
        "wall_s", "broker_cpu_s", "broker_per_process_cpu_s", "machine_busy_cores",
        "iowait_cores", "other_processes_cores", "kernel_threads_cores", "interrupt_cores",
        "harness_cores", "disk_write_mib_per_sec", "disk_busy", "broker_main_thread_cores",
        "reaped_children_cpu_s")})
    sample["bytes"] = bytes_
    sample["mb_per_sec"] = bytes_ / MiB / wall
    sample["broker_cores"] = cpu["broker_cpu_s"] / wall
    sample["client_cores"] = cpu["reaped_children_cpu_s"] / wall
    sample["mib_per_broker_cpu_s"] = (bytes_ / MiB / cpu["broker_cpu_s"]
                                      if cpu["broker_cpu_s"] else None)
    return sample


def produce_run(sc: Scenario, broker: brokers.Broker, topic: str, clients: int, records: int,
                log_prefix: Path, rate: float | None = None, timeout: float = 1800) -> dict:
    """``clients`` ProducerPerformance processes writing ``records`` records in all to a new
    topic (``rate``: records/s in all, else unlimited). Checked as the module says."""
    wire.ensure_topic(HOST, broker.port, topic, sc.partitions)
    counts = split(records, clients)
    argss = []
    for n in counts:
        args = ["--print-metrics", *producer_args(sc, topic, broker.bootstrap, n)]
        if rate:
            args[args.index("--throughput") + 1] = str(max(1, int(rate / clients)))
        argss.append(args)
    meter = Meter({"broker": broker.pids}, disk=broker.data_dir).start()
    try:
        outs = run_tools(PRODUCER, argss, log_prefix, timeout)
    finally:
        cpu = meter.stop()
    parsed = [parse_producer(o) for o in outs]
    problems = []
    for i, (p, n) in enumerate(zip(parsed, counts)):
        if p is None:
            problems.append(f"producer {i}: no summary line")
        elif int(p["records"]) != n:
            problems.append(f"producer {i}: {int(p['records'])} records sent of {n}")
        elif p.get("record_error_total", 0) != 0:
            problems.append(f"producer {i}: record-error-total {p['record_error_total']:g}")
        elif "record_error_total" not in p:
            problems.append(f"producer {i}: no record-error-total in --print-metrics")
    ends = wire.end_offsets(HOST, broker.port, topic)
    stored = sum(ends.values())
    if stored != records:
        problems.append(f"end offsets add up to {stored}, {records} records requested")
    if problems:
        raise RunFailed("; ".join(problems))
    ok = [p for p in parsed if p is not None]
    sample = {"clients": clients, "records": records, "records_stored": stored,
              "offered_records_per_sec": rate,
              "retries": sum(p.get("record_retry_total", 0) for p in ok),
              "errors": 0,
              "tool_mb_per_sec": sum(p["mb_per_sec"] for p in ok),
              "p50_ms": statistics.median(p["p50_ms"] for p in ok),
              "p99_ms": max(p["p99_ms"] for p in ok),
              "p999_ms": max(p["p999_ms"] for p in ok),
              "avg_ms": statistics.mean(p["avg_ms"] for p in ok)}
    _derive(sample, records * sc.record_size, cpu)
    sample["records_per_sec"] = records / cpu["wall_s"]
    return sample


def batch_records(sc: Scenario) -> int:
    """Records per wire-client batch: as many as the scenario's ``batch.size`` holds (16 KiB,
    the producer's default, unless set), about 10 bytes of record framing each."""
    size = int(sc.producer_props.get("batch.size", 16384))
    return max(1, (size - 61) // (sc.record_size + 10))


def wire_produce_run(sc: Scenario, broker: brokers.Broker, topic: str, clients: int,
                     seconds: float, log_prefix: Path, rate: float | None = None) -> dict:
    """``clients`` wire-client processes writing to a new topic for a window of ``seconds``
    (``rate``: records/s in all, else unlimited). Checked as the module says."""
    wire.ensure_topic(HOST, broker.port, topic, sc.partitions)
    meter = Meter({"broker": broker.pids}, disk=broker.data_dir)
    try:
        res = wireproduce.drive(
            broker.bootstrap, topic, clients, meter, log_prefix.parent, log_prefix.name,
            record_size=sc.record_size, batch_records=batch_records(sc),
            inflight=WIRE_INFLIGHT, warmup=WIRE_WARMUP_S, seconds=seconds,
            rate=rate * sc.record_size if rate else 0.0)
    except RuntimeError as e:
        raise RunFailed(str(e)) from e
    if res["warmup_errors"]:
        raise RunFailed(f"produce errors before the window (error code: count): "
                        f"{res['warmup_errors']}")
    stored = sum(wire.end_offsets(HOST, broker.port, topic).values())
    if stored != res["records_acked"]:
        raise RunFailed(f"end offsets add up to {stored}, {res['records_acked']} records "
                        "acknowledged")
    sample = {"clients": clients, "driver": "wire", "records_stored": stored,
              "records_acked": res["records_acked"], "offered_records_per_sec": rate,
              "retries": 0, "errors": 0, "batch_records": batch_records(sc),
              **{k: res[k] for k in ("p50_ms", "p99_ms", "p999_ms", "requests_acked")}}
    _derive(sample, res["bytes"], res)
    sample["records_per_sec"] = res["records_per_sec"]
    sample["client_cores"] = res["client_cpu_s"] / seconds
    return sample


def wire_consume_run(sc: Scenario, broker: brokers.Broker, topic: str, clients: int,
                     log_prefix: Path, passes: int = 1) -> dict:
    """``clients`` wire fetch processes, each reading all of ``topic`` ``passes`` times."""
    meter = Meter({"broker": broker.pids}, disk=broker.data_dir)
    try:
        res = wirefetch.drive(broker.bootstrap, topic, clients, meter, log_prefix.parent,
                              log_prefix.name, passes=passes)
    except RuntimeError as e:
        raise RunFailed(str(e)) from e
    sample = {"clients": clients, "driver": "wire", "passes": passes,
              "records": res["records"] // clients,
              "records_consumed": res["records"], "errors": 0}
    _derive(sample, res["bytes"], res)
    sample["records_per_sec"] = res["records"] / res["wall_s"]
    sample["client_cores"] = res["client_cpu_s"] / res["wall_s"]
    return sample


def consume_run(sc: Scenario, broker: brokers.Broker, topic: str, clients: int, records: int,
                log_prefix: Path, group: str, timeout: float = 1800) -> dict:
    """``clients`` ConsumerPerformance processes, each in a group of its own, each reading the
    first ``records`` records of ``topic``."""
    argss = [["--bootstrap-server", broker.bootstrap, "--topic", topic, "--messages",
              str(records), "--group", f"{group}-{i}", "--timeout", "60000"]
             for i in range(clients)]
    meter = Meter({"broker": broker.pids}, disk=broker.data_dir).start()
    try:
        outs = run_tools(CONSUMER, argss, log_prefix, timeout)
    finally:
        cpu = meter.stop()
    parsed = [parse_consumer_performance(o) for o in outs]
    problems = [f"consumer {i}: " + ("no result line" if p is None else
                                     f"{int(p['records'])} records of {records}")
                for i, p in enumerate(parsed) if p is None or p["records"] < records]
    if problems:
        raise RunFailed("; ".join(problems))
    ok = [p for p in parsed if p is not None]
    sample = {"clients": clients, "records": records,
              "records_consumed": sum(int(p["records"]) for p in ok), "errors": 0,
              "tool_mb_per_sec": sum(p["fetch_mb_per_sec"] for p in ok),
              "rebalance_ms": max(p["rebalance_ms"] for p in ok)}
    _derive(sample, int(sum(p["records"] for p in ok)) * sc.record_size, cpu)
    sample["records_per_sec"] = sample["records_consumed"] / cpu["wall_s"]
    return sample
