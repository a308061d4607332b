"""Start to first acknowledged produce: the in-process broker, BrokerProcess, Apache Kafka.

    python -m bench.startup [--runs N] [--kafka-runs N] [--no-kafka]

What a test suite waits for before its first test can produce. Each run starts a broker on a
fresh data directory and times, with ``time.monotonic()``, from the call that starts it to
the first Produce (acks=all) acknowledged without error; the client is ``bench.wire``'s bare
wire client (its own codec), retrying connect / Metadata v1 (which auto-creates the topic) /
Produce v3 every millisecond from the moment the start is called:

- ``headrace.Broker``: from ``Broker(...).start()`` (BrokerServer built, data directory
  opened, listening) to the ack, in this process; the modules are imported once before the
  runs, and what that import costs a fresh interpreter is reported on its own line.
- ``BrokerProcess``: from the spawn of ``python -m headrace serve`` to the ack.
- Apache Kafka (KRaft, one node, from Maven Central's jars as ``bench.apache_kafka`` runs it):
  from the spawn of the JVM to the ack. Formatting its storage (``kafka-storage format``,
  which a Kafka user must run first) is done before and reported on its own line.

Headrace's bytecode is compiled first (``compileall``, as ``pip install`` does), so that the
figures are an installed Headrace's even where PYTHONDONTWRITEBYTECODE is set. Broker
processes are pinned to CPU 0, this process (client, and the in-process broker) to
CPU 1, as in the other benchmarks. Prints the median, the fastest and the slowest of each,
and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import wire
from bench.apache_kafka import HOST, classpath
from bench.brokers import (BROKER_CPUS, CLIENT_CPUS, KafkaBroker, compile_bytecode,
                           free_port_block, installed_tree, pin_self)
from bench.context import loadavg
from headrace.broker.tools.process import BrokerProcess

TOPIC = "startup"
POLL_S = 0.001
DEADLINE_S = 180


def _poller(port: int, result: dict) -> threading.Thread:
    def poll() -> None:
        try:
            deadline = time.monotonic() + DEADLINE_S
            result["ack"] = wire.first_ack(HOST, port, TOPIC, deadline, poll_s=POLL_S)
        except Exception as e:  # reported by the caller
            result["error"] = repr(e)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


def in_process(root: Path) -> float:
    import headrace

    port = free_port_block(1)
    result: dict = {}
    broker = headrace.Broker(listeners=f"PLAINTEXT://{HOST}:{port}", data_dir=root / "data")
    t0 = time.monotonic()
    thread = _poller(port, result)
    broker.start()
    thread.join(DEADLINE_S)
    broker.close()
    if "ack" not in result:
        raise RuntimeError(f"in-process: no acknowledged produce: {result.get('error')}")
    return (result["ack"] - t0) * 1000


def process(root: Path) -> float:
    port = free_port_block(1)
    result: dict = {}
    broker = BrokerProcess(root / "data", port=port, cpus=BROKER_CPUS)
    thread = _poller(port, result)
    broker.start()
    thread.join(DEADLINE_S)
    broker.stop()
    if "ack" not in result or broker.spawned_at is None:
        raise RuntimeError(f"BrokerProcess: no acknowledged produce: {result.get('error')}")
    return (result["ack"] - broker.spawned_at) * 1000


def kafka(root: Path, formats: list[float]) -> float:
    broker = KafkaBroker(root / "kafka")
    t0 = time.monotonic()
    broker.prepare()  # properties and kafka-storage format: not in the figure
    formats.append((time.monotonic() - t0) * 1000)
    result: dict = {}
    thread = _poller(broker.port, result)
    try:
        broker.start()
        thread.join(DEADLINE_S)
    finally:
        broker.stop()
    if "ack" not in result or broker.spawned_at is None:
        raise RuntimeError(f"Apache Kafka: no acknowledged produce: {result.get('error')}")
    return (result["ack"] - broker.spawned_at) * 1000


def import_ms() -> float:
    """Milliseconds a fresh interpreter takes to import ``headrace.Broker``'s modules."""
    code = (
        "import time; t = time.perf_counter(); import headrace.broker.app.embedded; "
        "print((time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _row(name: str, samples: list[float]) -> str:
    return (f"| {name} | {statistics.median(samples):,.1f} | {min(samples):,.1f} | "
            f"{max(samples):,.1f} | {len(samples)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each Headrace kind")
    parser.add_argument("--kafka-runs", type=int, default=3, help="runs of Apache Kafka")
    parser.add_argument("--no-kafka", action="store_true", help="leave Apache Kafka out")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) >= 2:
        pin_self(CLIENT_CPUS)
    import headrace.broker.app.embedded  # noqa: F401  (imported once, before any timing)

    compile_bytecode(installed_tree())  # as an installed Headrace starts

    before = loadavg()
    results: dict[str, list[float]] = {"headrace.Broker (in-process)": [], "BrokerProcess": []}
    formats: list[float] = []
    with tempfile.TemporaryDirectory(prefix="headrace-startup-") as tmp:
        for i in range(args.runs):  # interleaved, so that both see the same machine
            results["headrace.Broker (in-process)"].append(in_process(Path(tmp) / f"i{i}"))
            results["BrokerProcess"].append(process(Path(tmp) / f"p{i}"))
        if not args.no_kafka:
            classpath()  # resolved (and cached) before any timing
            name = "Apache Kafka (KRaft, jars)"
            results[name] = [kafka(Path(tmp) / f"k{i}", formats) for i in range(args.kafka_runs)]
    after = loadavg()
    imported = statistics.median(import_ms() for _ in range(3))
    print("| broker | start to first ack, median (ms) | fastest | slowest | runs |")
    print("|---|---:|---:|---:|---:|")
    for name, samples in results.items():
        print(_row(name, samples))
    print()
    print(f"Importing headrace.broker.app.embedded in a fresh interpreter (once per test session, "
          f"not in the figures): {imported:.0f} ms (median of 3).")
    if formats:
        print(f"kafka-storage format before each Kafka start (not in the figures): median "
              f"{statistics.median(formats):,.0f} ms.")
    print(f"Load average before: {before}; after: {after}. Broker processes on CPU "
          f"{sorted(BROKER_CPUS)}, this process (client and in-process broker) on CPU "
          f"{sorted(CLIENT_CPUS)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
