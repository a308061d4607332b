"""One transactional producer (confluent-kafka, librdkafka) running small transactions back to
back: one process of a ``python -m bench.transactions`` run, which starts them
(``bench.transactions.drive``).

    python -m bench.txproduce --bootstrap 127.0.0.1:9092 --topic t --transactional-id tx-0 \\
        --start-at T0 --end-at T1 --out result.json [--records 10] [--record-size 100]

How this works: ``init_transactions``, then, until ``--end-at``, one transaction after another:
``begin_transaction``, ``--records`` records of ``--record-size`` bytes produced round-robin
over the topic's partitions (record i to partition i mod partitions), ``commit_transaction``.
Nothing waits between transactions. ``--start-at`` and ``--end-at`` are ``time.monotonic()``
values (the same clock in every process on Linux): a transaction whose commit returned inside
that window is counted, with its commit latency (the time ``commit_transaction`` took: the
flush of its records, EndTxn, the markers) and its whole time (begin to committed). The
transactions before the window are the warm-up. The process's CPU time over the window
(user + system of every thread: librdkafka's are threads of this process) tells whether the
client kept up. Every committed record is counted, window or not (``committed_records``): the
harness checks it against what a read_committed consumer sees. A failed commit is aborted and
counted, and the run goes on; the counts go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from confluent_kafka import KafkaException, Producer

MAX_SAMPLES = 1_000_000  # latencies kept per process


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(bootstrap: str, topic: str, transactional_id: str, partitions: int, records: int,
        record_size: int, start_at: float, end_at: float, config: dict[str, str]) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         **config})
    producer.init_transactions(60)
    value = os.urandom(record_size)
    commit_ms: list[float] = []
    txn_ms: list[float] = []
    committed = committed_records = aborted = 0
    failures: list[str] = []
    cpu0: float | None = None
    cpu_s = 0.0
    while True:
        now = time.monotonic()
        if cpu0 is None and now >= start_at:
            cpu0 = cpu_seconds()
        if now >= end_at:
            break
        t0 = time.monotonic()
        producer.begin_transaction()
        for i in range(records):
            producer.produce(topic, value, partition=i % partitions)
        t1 = time.monotonic()
        try:
            producer.commit_transaction(60)
        except KafkaException as e:
            aborted += 1
            failures.append(str(e)[:300])
            if e.args[0].txn_requires_abort():
                producer.abort_transaction(60)
            elif not e.args[0].retriable():
                raise
            continue
        t2 = time.monotonic()
        producer.poll(0)  # serve the delivery reports
        committed_records += records
        if start_at <= t2 < end_at:
            committed += 1
            if len(commit_ms) < MAX_SAMPLES:
                commit_ms.append((t2 - t1) * 1000)
                txn_ms.append((t2 - t0) * 1000)
    if cpu0 is not None:
        cpu_s = cpu_seconds() - cpu0
    producer.flush(30)
    return {"transactional_id": transactional_id, "committed": committed,
            "committed_records": committed_records, "aborted": aborted,
            "failures": failures[:20], "commit_ms": commit_ms, "txn_ms": txn_ms,
            "cpu_s": cpu_s, "window_s": end_at - start_at}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=10, help="records per transaction")
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--start-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--end-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                    help="a producer setting (librdkafka's name)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    config = dict(c.split("=", 1) for c in args.config)
    result = run(args.bootstrap, args.topic, args.transactional_id, args.partitions,
                 args.records, args.record_size, args.start_at, args.end_at, config)
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
