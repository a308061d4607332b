"""The fault suite's clients: a checked load, a Metadata probe, and the read-back.

    python -m bench.faults.workload load --bootstrap HOSTS --topic T --out DIR [...]
    python -m bench.faults.workload read --bootstrap HOSTS --topic T --out DIR

Both run as processes of their own, in the clients' network namespace (``Host.command``), and
write what they saw as JSON into ``DIR``; ``bench/faults/checker.py`` judges it. Every time is
``time.monotonic()``, which is the same clock in every process and namespace of the machine,
so the runner can set the acknowledgements beside the moments it made and healed each fault.

``load`` runs until a line ``stop`` arrives on its standard input (or it is closed), then
flushes (at most ``--flush-s``) and writes ``load.json``. Meanwhile it prints one JSON line a
second to standard output (``{"t", "acked", "txns", "errors"}``: the runner's progress line).

* **Idempotent producers** (``--producers``, confluent-kafka, acks=all, one thread each):
  producer ``i`` writes ``p<i>:<n>`` to partition ``i mod --partitions`` every ``--interval-ms``,
  so the order of its records is the order they must be read in. Each acknowledgement is kept
  as ``n -> [partition, offset, time]``; each failure with its error.
* **Transactional producers** (``--txn-producers``): each transaction writes ``t<j>:<k>:<p>``
  to every partition ``p`` (partitions led by every broker), then commits, or aborts one time in
  ``--abort-every``. Kept per transaction: start, end, the outcome (``commit``, ``abort``, or
  ``unknown`` when the commit's end is not known: a timeout or a fatal error, after which the
  producer is made again, which aborts or completes what it left) and the commit's own time
  (from ``commit_transaction`` called to returned).
* **Metadata probe** (``--probe-ms``, 0: off): every broker of ``--bootstrap`` in turn, on a new
  connection each time, gets Metadata v12 for every topic; an answer without brokers, without a
  controller, without the cluster id or without the topic is kept (``probe_bad``) with its
  time; refused or timed-out connections count as ``probe_down`` (a broker that is down or
  starting: not an anomaly).

``read`` reads every partition from its start to its high watermark with ``read_committed``
and writes ``read.json``: per partition the ``[offset, value]`` of every record read.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


class Load:
    def __init__(self, args) -> None:
        self.args = args
        self.stopping = threading.Event()
        self.acks = [{"acked": {}, "failed": {}, "sent": 0} for _ in range(args.producers)]
        self.txns: list[dict] = []  # every transaction, as it ends
        self.errors: list[str] = []
        self.probe_bad: list[dict] = []
        self.probe_down = 0
        self.probe_ok = 0
        self.lock = threading.Lock()

    # idempotent producers ---------------------------------------------------------------

    def producer(self, i: int) -> None:
        a = self.args
        mine = self.acks[i]
        partition = i % a.partitions
        producer = Producer(
            {
                "bootstrap.servers": a.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 300000,
                "topic.metadata.refresh.interval.ms": 1000,
                "client.id": f"faults-p{i}",
            }
        )

        def delivered(err, msg, n) -> None:
            if err is not None:
                mine["failed"][n] = str(err)
            else:
                mine["acked"][n] = [msg.partition(), msg.offset(), time.monotonic()]

        n = 0
        while not self.stopping.is_set():
            try:
                producer.produce(
                    a.topic,
                    value=f"p{i}:{n}".encode(),
                    partition=partition,
                    on_delivery=lambda err, msg, n=n: delivered(err, msg, n),
                )
            except BufferError:
                producer.poll(0.05)
                continue
            except KafkaException as e:  # a fatal idempotence error ends this producer
                self.errors.append(f"producer {i}: {e}")
                return
            mine["sent"] = n = n + 1
            producer.poll(0)
            time.sleep(a.interval_ms / 1000)
        left = producer.flush(a.flush_s)
        if left:
            self.errors.append(f"producer {i}: {left} records never answered")

    # transactional producers ------------------------------------------------------------

    def _txn_producer(self, j: int, generation: int) -> Producer:
        a = self.args
        p = Producer(
            {
                "bootstrap.servers": a.bootstrap,
                "transactional.id": f"faults-tx{j}",
                "transaction.timeout.ms": 60000,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 1000,
                "client.id": f"faults-tx{j}-{generation}",
            }
        )
        while not self.stopping.is_set():
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.errors.append(f"tx{j} init: {e}")
                time.sleep(0.5)
        return p

    def transactions(self, j: int) -> None:
        a = self.args
        rng = random.Random(j)
        generation = 0
        producer = self._txn_producer(j, generation)
        k = 0
        while not self.stopping.is_set():
            record = {"producer": j, "k": k, "start": time.monotonic(), "outcome": "unknown"}
            commit = a.abort_every <= 0 or rng.randrange(a.abort_every) != 0
            try:
                producer.begin_transaction()
                for p in range(a.partitions):
                    producer.produce(a.topic, value=f"t{j}:{k}:{p}".encode(), partition=p)
                if commit:
                    t0 = time.monotonic()
                    producer.commit_transaction(60)
                    record["commit_s"] = time.monotonic() - t0
                    record["outcome"] = "commit"
                else:
                    producer.abort_transaction(60)
                    record["outcome"] = "abort"
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                record["error"] = str(e)
                if err is not None and err.txn_requires_abort():
                    try:
                        producer.abort_transaction(60)
                        record["outcome"] = "abort"
                    except KafkaException as e2:
                        record["error"] += f"; abort: {e2}"
                if record["outcome"] == "unknown":
                    # the end of this transaction is not known: a new producer with the id
                    # aborts it, or finds it completed
                    generation += 1
                    producer = self._txn_producer(j, generation)
            record["end"] = time.monotonic()
            with self.lock:
                self.txns.append(record)
            k += 1

    # Metadata probe ---------------------------------------------------------------------

    def probe(self) -> None:
        a = self.args
        hosts = [h.rsplit(":", 1) for h in a.bootstrap.split(",")]
        while not self.stopping.is_set():
            for host, port in hosts:
                t = time.monotonic()
                try:
                    md = metadata(socket.create_connection, host, int(port))
                except OSError:
                    self.probe_down += 1
                    continue
                problems = []
                if not md.brokers:
                    problems.append("no brokers")
                if md.controller_id < 0:
                    problems.append("no controller")
                if not md.cluster_id:
                    problems.append("no cluster id")
                if a.topic not in {x.name for x in md.topics}:
                    problems.append("no topic")
                if problems:
                    self.probe_bad.append(
                        {"t": t, "broker": f"{host}:{port}", "problems": problems}
                    )
                else:
                    self.probe_ok += 1
                self.stopping.wait(a.probe_ms / 1000)

    # the run ------------------------------------------------------------------------------

    def run(self) -> None:
        a = self.args
        threads = [threading.Thread(target=self.producer, args=(i,)) for i in range(a.producers)]
        threads += [
            threading.Thread(target=self.transactions, args=(j,)) for j in range(a.txn_producers)
        ]
        if a.probe_ms > 0:
            threads.append(threading.Thread(target=self.probe, daemon=True))
        for t in threads:
            t.start()
        threading.Thread(target=self._stdin, daemon=True).start()
        while not self.stopping.wait(1.0):
            self._progress()
        for t in threads:
            if not t.daemon:
                t.join()
        out = {
            "producers": self.acks,
            "txns": self.txns,
            "errors": self.errors,
            "probe": {"bad": self.probe_bad, "down": self.probe_down, "ok": self.probe_ok},
        }
        (Path(a.out) / "load.json").write_text(json.dumps(out))
        self._progress()

    def _stdin(self) -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        self.stopping.set()

    def _progress(self) -> None:
        with self.lock:
            txns = len(self.txns)
        line = {
            "t": time.monotonic(),
            "acked": sum(len(x["acked"]) for x in self.acks),
            "txns": txns,
            "errors": len(self.errors),
        }
        print(json.dumps(line), flush=True)


def request(connect, host: str, port: int, api_key: int, version: int, message, timeout=5.0):
    """The decoded answer of the broker at ``host:port`` to one request, on a new connection
    made by ``connect(address, timeout)`` (``socket.create_connection``, or a ``NetnsThread``'s
    to reach into a namespace). OSError if none."""
    from headrace.broker.client.blocking import BlockingConnection

    with connect((host, port), timeout) as s:
        s.settimeout(timeout)
        return BlockingConnection(s, client_id="faults").request(api_key, version, message)


def metadata(connect, host: str, port: int, topics: list[str] | None = None, timeout=5.0):
    """Metadata v12 (every topic, or ``topics``): ``request``."""
    from headrace.protocol import ApiKey, messages

    M = messages.MetadataRequest
    named = None if topics is None else [M.MetadataRequestTopic(name=t) for t in topics]
    message = M(topics=named, allow_auto_topic_creation=False)
    return request(connect, host, port, ApiKey.METADATA, 12, message, timeout)


def read(args) -> None:
    """Every committed record of the topic, per partition, up to its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"faults-read-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    partitions = args.partitions
    ends = {}
    for p in range(partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=60)
        ends[p] = high
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + args.timeout_s
    done: set[int] = set()
    prefilled = 0
    while len(done) < partitions and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error():
                continue
            value = m.value().decode()
            if value.startswith("f:"):  # (a prefill's: not judged, only counted)
                prefilled += 1
                continue
            got[m.partition()].append([m.offset(), value])
        for p in range(partitions):
            if p in done:
                continue
            position = consumer.position([TopicPartition(args.topic, p)])[0].offset
            if ends[p] <= 0 or position >= ends[p]:
                done.add(p)
    consumer.close()
    complete = sorted(done) == list(range(partitions))
    out = {"ends": ends, "records": got, "complete": complete, "prefilled": prefilled}
    (Path(args.out) / "read.json").write_text(json.dumps(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults.workload")
    ap.add_argument("what", choices=["load", "read"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--out", required=True)
    ap.add_argument("--producers", type=int, default=6)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--txn-producers", type=int, default=1)
    ap.add_argument("--abort-every", type=int, default=4)
    ap.add_argument("--probe-ms", type=float, default=100.0)
    ap.add_argument("--flush-s", type=float, default=120.0)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.what == "load":
        Load(args).run()
    else:
        read(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
