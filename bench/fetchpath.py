"""The fetch path alone: how fast one broker serves records already in the page cache, and
how much CPU each GiB costs it.

    python -m bench.fetchpath [--gib 2] [--partitions 4] [--consumers 2] [--seconds 15]
                              [--compare REF ...] [--rounds 2] [--unpinned] [--kafka]
                              [--perf] [--receive-buffer BYTES]

A topic of ``--gib`` GiB (batches of ``--batch-kib`` KiB, segments of 256 MiB, so reads
cross segment rolls) is written once into a data directory kept between runs
(``--data``). Then, for each round and each broker under test (``--compare REF``: Headrace
as committed at REF, next to the working tree; repeat it for more), a broker is started on
that directory, pinned to the broker CPU, and ``--consumers`` client threads (pinned to the
client CPU; ``--unpinned``: broker and clients share every CPU) send raw Fetch v4 requests
for every partition (``--max-bytes`` per response, ``--max-bytes / partitions`` or
``--partition-max-bytes`` per partition), one at a time per connection, each going back to
offset 0 at the end of the log. The clients receive into a reused buffer (``--receive-buffer``:
their sockets' SO_RCVBUF) and walk only the batch headers, so the broker is the bottleneck.
The files are read once before the first round, so every round reads the page cache.
``--kafka``: Apache Kafka (its start scripts' settings) too, the same topic written into it
before each of its runs. ``--perf``: ``perf record`` of the broker for 5 s of each run, its
busiest functions printed.

Reported per run: MiB/s of records received, the broker's CPU-seconds (user + system, from
/proc/<pid>/stat) per GiB served, and how often its threads were switched out per MiB served
(each time a thread sleeps, on the socket, a queue or a lock, and is woken again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench import brokers, wire
from bench.brokers import CLIENT_CPUS, HeadraceBroker, compare_variants, cpu_seconds, pin_self
from bench.cpu import context_switches
from bench.producepath import perf_top
from bench.wirefetch import Consumer

MiB = 1 << 20
GiB = 1 << 30
TOPIC = "fetchpath"
SEGMENT_BYTES = 256 * MiB


def big_batch(size: int) -> bytes:
    """One batch of about ``size`` bytes holding one record (the broker never opens batches
    on fetch, so how many records a batch holds does not matter here)."""
    return wire.record_batch(b"x" * (size - 80))


def fill(data_dir: Path, gib: float, partitions: int, batch_kib: int) -> None:
    """Write the topic once (skipped when ``data_dir`` already holds it)."""
    marker = data_dir / f".filled-{gib}-{partitions}-{batch_kib}"
    if marker.exists():
        return
    shutil.rmtree(data_dir, ignore_errors=True)  # (a topic written with other parameters)
    data_dir.mkdir(parents=True)
    broker = HeadraceBroker(data_dir, {"log.segment.bytes": SEGMENT_BYTES}).start()
    try:
        write(broker.port, gib, partitions, batch_kib)
    finally:
        broker.stop()
    marker.touch()


def write(port: int, gib: float, partitions: int, batch_kib: int) -> None:
    """Produce ``gib`` GiB to the topic of the broker at ``port``, spread over its partitions."""
    wire.ensure_topic("127.0.0.1", port, TOPIC, partitions)
    batch = big_batch(batch_kib * 1024)
    per_partition = int(gib * GiB / partitions / len(batch)) + 1
    with wire.WireClient("127.0.0.1", port, timeout=60) as c:
        for _ in range(per_partition):
            for p in range(partitions):
                err, _ = c.produce(TOPIC, p, batch, acks=1)
                if err:
                    raise wire.WireError(f"produce error {err}")
    print(f"wrote {per_partition * partitions * len(batch) / GiB:.2f} GiB", flush=True)


def warm(data_dir: Path) -> None:
    """Read every segment once, so the runs read the page cache."""
    buf = bytearray(8 * MiB)
    for path in sorted(data_dir.glob(f"**/{TOPIC}-*/*.log")):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def measure(broker, args) -> dict:
    stop = threading.Event()
    consumers = [Consumer(("127.0.0.1", broker.port), TOPIC, list(range(args.partitions)),
                          args.max_bytes, stop, args.partition_max_bytes,
                          receive_buffer=args.receive_buffer)
                 for _ in range(args.consumers)]
    for c in consumers:
        c.start()
    time.sleep(args.warmup)
    if args.perf:
        threading.Thread(target=perf_top, args=(broker.pid, args.seconds / 2 - 2.5,
                                                args.data / "perf.data"), daemon=True).start()
    b0, c0, t0 = sum(c.bytes for c in consumers), cpu_seconds(broker.pid), time.monotonic()
    s0 = context_switches(broker.pid)
    time.sleep(args.seconds)
    b1, c1, t1 = sum(c.bytes for c in consumers), cpu_seconds(broker.pid), time.monotonic()
    s1 = context_switches(broker.pid)
    stop.set()
    for c in consumers:
        c.join(30)
    errors = [c.error for c in consumers if c.error is not None]
    if errors:
        raise RuntimeError(f"consumer failed: {errors[0]!r}")
    served = b1 - b0
    if not served:
        raise RuntimeError("no records served during the run")
    return {
        "mib_s": served / MiB / (t1 - t0),
        "cpu_s_per_gib": (c1 - c0) / (served / GiB) if served else float("nan"),
        "gib": served / GiB,
        "switches_per_mib": (s1 - s0) / (served / MiB),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-kib", type=int, default=256)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=50 * MiB)
    ap.add_argument("--partition-max-bytes", type=int, default=None,
                    help="per partition in each fetch (default: --max-bytes / --partitions)")
    ap.add_argument("--receive-buffer", type=int, default=None,
                    help="the clients' SO_RCVBUF (65536: Kafka's consumers' receive.buffer.bytes;"
                         " default: the kernel's)")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compare", metavar="REF", action="append", default=[],
                    help="also measure Headrace as committed at REF (may be repeated)")
    ap.add_argument("--unpinned", action="store_true",
                    help="broker and clients share every CPU (the headline layout)")
    ap.add_argument("--kafka", action="store_true",
                    help="also Apache Kafka (its start scripts' settings), the topic written "
                         "into it before each run")
    ap.add_argument("--perf", action="store_true",
                    help="perf record each broker for 5 s of each run; its busiest functions")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "headrace-fetchpath")
    args = ap.parse_args(argv)

    data_dir = args.data / "data"
    fill(data_dir, args.gib, args.partitions, args.batch_kib)
    warm(data_dir)
    broker_cpus = None
    if args.unpinned:  # broker and clients share every CPU
        broker_cpus = brokers.BROKER_CPUS = set(range(os.cpu_count() or 1))  # Kafka's too
    else:
        pin_self(CLIENT_CPUS)  # after the fill: brokers started later pin themselves

    def run(path: Path | str | None) -> dict:
        if isinstance(path, str):  # Kafka: a broker of its own, written before each run
            kafka_dir = args.data / "kafka"
            shutil.rmtree(kafka_dir, ignore_errors=True)
            broker = brokers.make_broker(path, kafka_dir, log_dir=args.data)
            broker.prepare()
            broker.start()
            try:
                write(broker.port, args.gib, args.partitions, args.batch_kib)
                warm(kafka_dir)
                return measure(broker, args)
            finally:
                broker.stop()
                broker.cleanup()
        broker = HeadraceBroker(data_dir, {"log.segment.bytes": SEGMENT_BYTES}, cpus=broker_cpus,
                                log_file=args.data / "broker.log", pythonpath=path).start()
        try:
            return measure(broker, args)
        finally:
            broker.stop()

    per = args.partition_max_bytes or args.max_bytes // args.partitions
    compare_variants(args.compare, args.data, args.rounds, run,
                     f"{args.consumers} consumers, {args.partitions} partitions, max_bytes "
                     f"{args.max_bytes // MiB} MiB ({per // 1024} KiB per partition), "
                     f"{args.seconds:.0f} s per run" + (", unpinned" if args.unpinned else ""),
                     others=("kafka-default",) if args.kafka else ())


if __name__ == "__main__":
    main()
