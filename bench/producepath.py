"""The produce path alone: how fast one Headrace process stores pipelined Produce requests,
and how much CPU each GiB costs it.

    python -m bench.producepath [--clients 2] [--partitions 8] [--record-size 1024]
                                [--batch-records 15] [--inflight 5] [--seconds 15]
                                [--compare REF ...] [--rounds 2] [--unpinned] [--durable]
                                [--kafka] [--perf]

For each round and each broker under test (``--compare REF``: Headrace as committed at REF,
next to the working tree; repeat it for more) a broker is started as one process on an empty
data directory, pinned to the broker CPU, with a topic of ``--partitions`` partitions; then
``--clients`` processes of ``bench.wireproduce`` (pinned to the client CPU: little CPU per
byte; ``--unpinned``: broker and clients share every CPU) keep ``--inflight`` acks=1 Produce
requests of one batch each outstanding, cycling over the partitions (``--durable``: the broker
has ``log.flush.interval.messages=1``, so every ack waits for an fsync). Every acknowledged
record is checked against the partitions' end offsets. ``--kafka``: Apache Kafka (its start
scripts' settings) under the same load, in the same rounds. ``--perf``: ``perf record`` of the
broker process for 5 s in the middle of each run, and its ten busiest functions printed.

Reported per run: MiB/s of records acknowledged, and the broker's CPU-seconds (user + system,
from /proc/<pid>/stat) per GiB stored, and of them the user CPU-seconds (the broker's own code,
without the kernel's). S3 of ``bench.run`` is the same load, through Kafka's own producer and
side by side with Kafka.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from bench import brokers, wire
from bench.brokers import CLIENT_CPUS, HeadraceBroker, compare_variants, cpu_times, pin_self
from bench.wireproduce import drive

MiB = 1 << 20
GiB = 1 << 30
TOPIC = "producepath"


class BrokerCpu:
    """The one broker process's CPU-seconds over the clients' window (``drive``'s meter)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def start(self) -> "BrokerCpu":
        self.t0 = cpu_times(self.pid) or (0.0, 0.0)
        return self

    def stop(self) -> dict:
        user, system = cpu_times(self.pid) or (0.0, 0.0)
        return {"broker_cpu_s": user + system - sum(self.t0), "broker_user_s": user - self.t0[0]}


def perf_top(pid: int, after: float, output: Path) -> None:
    """``perf record`` of ``pid`` for 5 s from ``after`` s on; prints its ten busiest functions."""
    threading.Event().wait(after)
    try:
        record = subprocess.run(["perf", "record", "-o", str(output), "-p", str(pid), "--",
                                 "sleep", "5"], capture_output=True, text=True)
    except OSError as e:  # Debian: apt-get install linux-perf
        record = subprocess.CompletedProcess([], 1, "", str(e))
    if record.returncode != 0:
        print(f"perf record failed: {record.stderr.strip()[-300:]}", flush=True)
        return
    report = subprocess.run(["perf", "report", "-i", str(output), "--no-children", "--sort",
                             "dso,sym", "--stdio"], capture_output=True, text=True).stdout
    top = [line for line in report.splitlines() if line.strip() and not line.startswith("#")]
    print("\n".join(["perf, the broker's busiest functions:", *top[:10]]), flush=True)


def measure(broker, args, logs: Path) -> dict:
    wire.ensure_topic("127.0.0.1", broker.port, TOPIC, args.partitions)
    if args.perf:
        threading.Thread(target=perf_top, args=(broker.pid, args.warmup + args.seconds / 2 - 2.5,
                                                logs / "perf.data"), daemon=True).start()
    res = drive(broker.bootstrap, TOPIC, args.clients, BrokerCpu(broker.pid), logs, "producepath",
                record_size=args.record_size, batch_records=args.batch_records,
                inflight=args.inflight, warmup=args.warmup, seconds=args.seconds)
    stored = sum(wire.end_offsets("127.0.0.1", broker.port, TOPIC).values())
    if stored != res["records_acked"]:
        raise RuntimeError(f"{res['records_acked']} records acknowledged, {stored} stored")
    return {
        "mib_s": res["mib_per_sec"],
        "cpu_s_per_gib": res["broker_cpu_s"] / (res["bytes"] / GiB),
        "user_s_per_gib": res["broker_user_s"] / (res["bytes"] / GiB),
        "client_s_per_gib": res["client_cpu_s"] / (res["bytes"] / GiB),
        "gib": res["bytes"] / GiB,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--batch-records", type=int, default=15)
    ap.add_argument("--inflight", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compare", metavar="REF", action="append", default=[],
                    help="also measure Headrace as committed at REF (may be repeated)")
    ap.add_argument("--unpinned", action="store_true",
                    help="broker and clients share every CPU (default: one CPU each)")
    ap.add_argument("--durable", action="store_true",
                    help="log.flush.interval.messages=1: every ack after an fsync")
    ap.add_argument("--kafka", action="store_true",
                    help="also measure Apache Kafka (kafka-default) under the same load")
    ap.add_argument("--perf", action="store_true",
                    help="perf record the broker for 5 s of each run; print its top functions")
    ap.add_argument("--data", type=Path,
                    default=Path(tempfile.gettempdir()) / "headrace-producepath")
    args = ap.parse_args(argv)

    if not args.unpinned:
        pin_self(CLIENT_CPUS)  # the clients inherit it; brokers pin themselves
    broker_cpus = set(range(os.cpu_count() or 1)) if args.unpinned else None
    if broker_cpus:
        brokers.BROKER_CPUS = broker_cpus  # Kafka's too

    def run(variant: Path | str | None) -> dict:
        data_dir = args.data / "data"
        shutil.rmtree(data_dir, ignore_errors=True)
        if isinstance(variant, str):  # Kafka, on the broker CPUs, with its own settings
            broker = brokers.make_broker(variant, data_dir, durable=args.durable, log_dir=args.data)
            broker.prepare()
            broker.start()
        else:
            overrides = {"log.flush.interval.messages": 1} if args.durable else None
            broker = HeadraceBroker(data_dir, overrides, log_file=args.data / "broker.log",
                                    cpus=broker_cpus, pythonpath=variant).start()
        try:
            return measure(broker, args, args.data / "clients")
        finally:
            broker.stop()
            if isinstance(variant, str):
                broker.cleanup()
            shutil.rmtree(data_dir, ignore_errors=True)

    compare_variants(args.compare, args.data, args.rounds, run,
                     f"{args.clients} clients, {args.partitions} partitions, batches of "
                     f"{args.batch_records} x {args.record_size} B, {args.inflight} in flight, "
                     f"{args.seconds:.0f} s per run" + (", unpinned" if args.unpinned else "")
                     + (", durable" if args.durable else ""),
                     others=("kafka-default",) if args.kafka else ())


if __name__ == "__main__":
    main()
