"""Durable produce latency at one rate, with the disk's own floor beside the brokers.

    python -m bench.durablelatency [--mib-per-sec 123] [--seconds 30] [--rounds 3]
                                   [--workers 2] [--no-kafka]

S2's latency point in equal, fresh conditions: each run starts a broker on an empty data
directory with ``log.flush.interval.messages=1`` (Headrace ``--workers N`` with a ZooKeeper of
its own, and Kafka with its start script's JVM settings), makes a one-partition topic, and one
paced ``bench.wireproduce`` client writes S2's requests (15 records of 64 KiB, 5 in flight) at
``--mib-per-sec`` for ``--seconds`` after a warm-up. Beside them, the **disk alone**: one
process writes the same request size at the same rate to a file in the same directory, each
write followed by ``fdatasync``, and times each from when it was due (a write that comes due
while the one before is still syncing waits, as a request would). No broker can acknowledge a
durable write sooner than that loop does, so its p99 is the floor for any durable p99 at this
rate. Prints p50/p99/p99.9 of every run and the medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import brokers, wire
from bench.context import RESULTS
from bench.cpu import Meter
from bench.wireproduce import drive, percentile

MiB = 1 << 20
RECORD = 64 * 1024
BATCH = 15  # S2's requests: as many 64 KiB records as a 1 MiB batch.size holds
TOPIC = "durable"


def disk_alone(directory: Path, bytes_per_sec: float, request: int, seconds: float) -> dict:
    """Paced write + fdatasync of ``request`` bytes to one file in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "floor.probe"
    buf = os.urandom(request)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    lat: list[float] = []
    try:
        t0, n = time.monotonic(), 0
        while (due := t0 + n * request / bytes_per_sec) < t0 + seconds:
            time.sleep(max(0.0, due - time.monotonic()))
            os.write(fd, buf)
            os.fdatasync(fd)
            lat.append((time.monotonic() - due) * 1000)
            n += 1
    finally:
        os.close(fd)
        path.unlink()
    return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "p999_ms": percentile(lat, 99.9)}


def broker_run(kind: str, root: Path, bytes_per_sec: float, seconds: float) -> dict:
    broker = brokers.make_broker(kind, root / "data", durable=True, log_dir=root)
    broker.prepare()
    broker.start()
    try:
        wire.ensure_topic("127.0.0.1", broker.port, TOPIC, 1)
        res = drive(broker.bootstrap, TOPIC, 1, Meter({"broker": broker.pids}), root / "clients",
                    kind, record_size=RECORD, batch_records=BATCH, inflight=5, warmup=5.0,
                    seconds=seconds, rate=bytes_per_sec)
        stored = sum(wire.end_offsets("127.0.0.1", broker.port, TOPIC).values())
        if stored != res["records_acked"]:
            raise RuntimeError(f"{kind}: {res['records_acked']} records acknowledged, "
                               f"{stored} stored")
    finally:
        broker.stop()
        broker.cleanup()
    achieved = res["mib_per_sec"] * MiB
    if achieved < 0.95 * bytes_per_sec:
        raise RuntimeError(f"{kind} took {res['mib_per_sec']:.0f} MiB/s of the rate offered")
    return {k: res[k] for k in ("p50_ms", "p99_ms", "p999_ms")}


def kafka_half() -> float | None:
    """The offered rate of the S2 sweep's point at 50% of Kafka's maximum in the committed
    results (MiB/s), None without one."""
    try:
        kinds = json.loads((RESULTS / "results.json").read_text())["scenarios"]["S2"]["kinds"]
    except (OSError, ValueError, KeyError):
        return None
    for point in (p for k in kinds.values() for p in k.get("sweep", [])):
        if point.get("load") == "50% of Kafka's maximum" and point.get("records_per_sec"):
            return point["records_per_sec"] * 64 * 1024 / MiB
    return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib-per-sec", type=float, default=kafka_half() or 123.0,
                    help="the offered rate (default: 50%% of Kafka's S2 maximum in the "
                         "committed results)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="Headrace --workers (1: one process)")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--data", type=Path,
                    default=Path(tempfile.gettempdir()) / "headrace-durablelatency")
    args = ap.parse_args(argv)
    rate = args.mib_per_sec * MiB
    shutil.rmtree(args.data, ignore_errors=True)
    zk = None
    if args.workers > 1:
        from headrace.broker.tools.zookeeper_server import ZooKeeperServer
        zk = ZooKeeperServer(args.data / "zookeeper").start()
        brokers.ZOOKEEPER = zk.connect_string
    kinds = ["disk", f"headrace-w{args.workers}" if args.workers > 1 else "headrace"]
    if not args.no_kafka:
        kinds.append("kafka-default")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    print(f"durable produce at {args.mib_per_sec:.0f} MiB/s, requests of {BATCH} x 64 KiB, "
          f"{args.seconds:.0f} s per run", flush=True)
    try:
        for r in range(args.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                root = args.data / f"{kind}-{r}"
                res = (disk_alone(root, rate, BATCH * RECORD, args.seconds) if kind == "disk"
                       else broker_run(kind, root, rate, args.seconds))
                shutil.rmtree(root, ignore_errors=True)
                runs[kind].append(res)
                print(f"round {r + 1} {kind:>14}: p50 {res['p50_ms']:6.2f}  p99 "
                      f"{res['p99_ms']:6.2f}  p99.9 {res['p999_ms']:6.2f} ms", flush=True)
    finally:
        if zk is not None:
            zk.stop()
    print(f"\nmedians of {args.rounds}:")
    for kind, rs in runs.items():
        med = {q: statistics.median(x[q] for x in rs) for q in ("p50_ms", "p99_ms", "p999_ms")}
        lo, hi = min(x["p99_ms"] for x in rs), max(x["p99_ms"] for x in rs)
        print(f"  {kind:>14}: p50 {med['p50_ms']:6.2f}  p99 {med['p99_ms']:6.2f} "
              f"({lo:.2f}-{hi:.2f})  p99.9 {med['p999_ms']:6.2f} ms")


if __name__ == "__main__":
    main()
