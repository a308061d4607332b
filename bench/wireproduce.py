"""A pipelined Produce client on bench/wire.py's framing: little client CPU per byte, so that
the brokers and not the client set the pace (one process of a ``python -m bench.cluster`` or
``python -m bench.run`` run; ``drive`` starts them).

    python -m bench.wireproduce --bootstrap 127.0.0.1:9092 --topic t --start-at T0 --end-at T1 \\
        --out result.json [--record-size 65536] [--batch-records 15] [--inflight 4] [--rate B]

How this works: one record batch of ``--batch-records`` records of ``--record-size`` bytes is
built once; a Produce v3 request carrying it is prepared for every partition of the topic (the
base offset lies outside the batch's CRC, so the same bytes are valid every time: the broker
assigns the offsets). One connection goes to each partition leader (from Metadata), with a
sender thread that keeps ``--inflight`` requests outstanding, cycling over that leader's
partitions, and a receiver thread that reads the responses in order, checks each error code and
frees a slot. With ``--rate`` (record bytes per second for the process) the senders pace their
requests to it, a request due every batch / rate seconds, so that latency is measured at a load
below the broker's maximum. Sending starts at once (the warm-up); ``--start-at`` and ``--end-at``
are ``time.monotonic()`` values, the same clock in every process on Linux, and only
responses that arrive between them are counted: their record bytes, their latency (send to
response) and the process's CPU time over the window. Then the senders stop, the outstanding
requests are drained, and the counts go to ``--out`` as JSON (``all_acked_records`` also counts
what was acknowledged outside the window: the harness checks it against the partitions' end
offsets).
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import wire
from bench.cpu import Meter
from headrace.broker.tools.process import terminate

ROOT = Path(__file__).resolve().parent.parent

MAX_SAMPLES = 1_000_000  # latencies kept per process


class Connection:
    """One connection to one leader, ``inflight`` requests outstanding."""

    def __init__(self, addr: tuple[str, int], bodies: list[bytes], payload: int,
                 inflight: int, window: tuple[float, float], stop: threading.Event,
                 interval: float = 0.0) -> None:
        # ApiVersions first, as Kafka's clients do (a broker may bound a connection's first
        # frame tighter than the later ones)
        client = wire.WireClient(*addr, timeout=60)
        client.api_versions()
        self.sock = client.sock
        self.bodies = bodies
        self.payload = payload
        self.slots = threading.Semaphore(inflight)
        self.window = window
        self.stop = stop
        self.interval = interval  # seconds between requests when paced, else 0
        self.sent: dict[int, float] = {}
        self.lock = threading.Lock()
        self.acked_bytes = 0
        self.acked = 0
        self.requests = 0
        self.errors: dict[int, int] = {}  # error code: count, in the window
        self.warmup_errors: dict[int, int] = {}  # error code: count, before the window
        self.all_acked = 0  # batches acknowledged without error, window or not (a check)
        self.latencies: list[float] = []
        self.failure: str | None = None
        self.done_sending = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True),
                        threading.Thread(target=self._receive, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _send(self) -> None:
        cid, i = 0, 0
        due = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.interval:
                    due += self.interval
                    time.sleep(max(0.0, due - time.monotonic()))
                if not self.slots.acquire(timeout=0.2):
                    due -= self.interval  # that slot was not taken: still owed
                    continue
                if self.stop.is_set():
                    break
                body = self.bodies[i % len(self.bodies)]
                i += 1
                cid += 1
                with self.lock:
                    self.sent[cid] = time.monotonic()
                self.sock.sendall(wire.request_header(wire.PRODUCE, 3, cid, len(body)))
                self.sock.sendall(body)
                self.requests += 1
        except OSError as e:
            self.failure = f"send: {e}"
        finally:
            self.done_sending.set()

    def _receive(self) -> None:
        # framed by hand, as bench.wire (not headrace.protocol.client): the measuring client
        # shares nothing with the broker; a sender and a receiver thread share the connection,
        # and only the response's error code and base offset are read (the measured hot path)
        reader = self.sock.makefile("rb")
        t0, t1 = self.window
        try:
            while True:
                with self.lock:
                    idle = not self.sent
                if idle and self.done_sending.is_set():
                    return
                head = reader.read(4)
                if len(head) < 4:
                    if not self.done_sending.is_set() or self.sent:
                        self.failure = self.failure or "connection closed by the broker"
                    return
                (size,) = struct.unpack(">i", head)
                if not 0 < size <= 1 << 20:
                    raise ValueError(f"response of {size} bytes")
                data = reader.read(size)
                now = time.monotonic()
                r = wire.Reader(data, 0)
                cid = r.take(">i")
                with self.lock:
                    started = self.sent.pop(cid)
                err, _base = wire.produce_result(r)
                self.slots.release()
                self.all_acked += err == 0
                if not t0 <= now <= t1:
                    if err:
                        self.warmup_errors[err] = self.warmup_errors.get(err, 0) + 1
                    continue
                if err:
                    self.errors[err] = self.errors.get(err, 0) + 1
                    continue
                self.acked += 1
                self.acked_bytes += self.payload
                if len(self.latencies) < MAX_SAMPLES:
                    self.latencies.append((now - started) * 1000)
        except (OSError, ValueError, KeyError, struct.error) as e:
            self.failure = self.failure or f"receive: {e!r}"
            self.stop.set()

    def close(self, timeout: float) -> None:
        """(After ``stop`` is set.) Wait for the outstanding responses, then close."""
        sender, receiver = self.threads
        sender.join(timeout)
        deadline = time.monotonic() + timeout
        while self.sent and receiver.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the receiver blocked in a read
        except OSError:
            pass
        receiver.join(timeout)
        self.sock.close()


def leaders(bootstrap: str, topic: str) -> dict[tuple[str, int], list[int]]:
    """{leader address: [its partitions]} from Metadata."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with wire.WireClient(host, int(port)) as c:
        terr, parts = c.metadata([topic])[topic]
        if terr:
            raise wire.WireError(f"Metadata {topic}: error {terr}")
        out: dict[tuple[str, int], list[int]] = {}
        for p, (err, leader) in sorted(parts.items()):
            if err or leader not in c.brokers:
                raise wire.WireError(f"{topic}-{p} has no leader (error {err})")
            out.setdefault(c.brokers[leader], []).append(p)
    return out


def run(args: argparse.Namespace) -> dict:
    value = Path(args.value_file).read_bytes() if args.value_file else b"x" * args.record_size
    args.record_size = len(value)
    batch = wire.record_batch(value, count=args.batch_records)
    stop = threading.Event()
    window = (args.start_at, args.end_at)
    payload = args.record_size * args.batch_records
    groups = leaders(args.bootstrap, args.topic)
    # paced: each connection carries its share of the rate (by its partitions)
    total = sum(len(parts) for parts in groups.values())
    conns = [Connection(addr, [wire.produce_body(args.topic, p, batch, args.acks)
                               for p in parts], payload, args.inflight, window, stop,
                        interval=payload * total / len(parts) / args.rate if args.rate else 0.0)
             for addr, parts in groups.items()]
    for c in conns:
        c.start()
    time.sleep(max(0.0, args.start_at - time.monotonic()))
    cpu0 = time.process_time()
    time.sleep(max(0.0, args.end_at - time.monotonic()))
    cpu1 = time.process_time()
    stop.set()
    for c in conns:
        c.close(timeout=30)
    lat = [x for c in conns for x in c.latencies]
    errors: dict[str, int] = {}
    warmup_errors: dict[str, int] = {}
    for c in conns:
        for code, n in c.errors.items():
            errors[str(code)] = errors.get(str(code), 0) + n
        for code, n in c.warmup_errors.items():
            warmup_errors[str(code)] = warmup_errors.get(str(code), 0) + n
    return {
        "seconds": args.end_at - args.start_at,
        "acked_bytes": sum(c.acked_bytes for c in conns),
        "acked_records": sum(c.acked for c in conns) * args.batch_records,
        "all_acked_records": sum(c.all_acked for c in conns) * args.batch_records,
        "requests": sum(c.requests for c in conns),
        "errors": errors,
        "warmup_errors": warmup_errors,
        "cpu_s": cpu1 - cpu0,
        "connections": len(conns),
        "failures": [c.failure for c in conns if c.failure],
        "latencies_ms": lat,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--record-size", type=int, default=64 << 10)
    ap.add_argument("--batch-records", type=int, default=15)
    ap.add_argument("--inflight", type=int, default=4, help="requests outstanding per connection")
    ap.add_argument("--acks", type=int, default=-1)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="record bytes per second for this process (default: unlimited)")
    ap.add_argument("--start-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--end-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--value-file", help="every record's value (else --record-size bytes of x)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    result = run(args)
    Path(args.out).write_text(json.dumps(result))
    return 1 if result["failures"] else 0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def collect(procs: list[subprocess.Popen], outs: list[Path]) -> list[dict]:
    """The JSON results of finished client processes; RuntimeError for the first that failed
    (its exit code, log and ``failures``)."""
    results = []
    for p, out in zip(procs, outs):
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"client exited with {p.returncode}: see {out.with_suffix('.log')}"
                               + (f" {json.loads(out.read_text())['failures']}"
                                  if out.exists() else ""))
        results.append(json.loads(out.read_text()))
    return results


def drive(bootstrap: str, topic: str, clients: int, meter: Meter, logs: Path, tag: str, *,
          record_size: int, batch_records: int, inflight: int, warmup: float, seconds: float,
          rate: float = 0.0, progress=None, value_file: Path | None = None) -> dict:
    """The harness side: ``clients`` processes of this module at once, measured over a window
    of ``seconds`` after ``warmup`` seconds (``meter`` started at the window's start and
    stopped at its end); ``rate``: record bytes per second in all (split evenly);
    ``value_file``: every record's value (then ``record_size`` is its size). Raises
    ``RuntimeError`` if a process failed or a produce in the window was answered with an
    error. Returns the window's acknowledged bytes and records, request latencies (p50, p99,
    p99.9), the clients' CPU, every record acknowledged (``records_acked``, warm-up included:
    for the caller's check against the end offsets) and the meter's figures."""
    logs.mkdir(parents=True, exist_ok=True)
    start_at = time.monotonic() + warmup
    end_at = start_at + seconds
    procs, outs = [], []
    for i in range(clients):
        out = logs / f"{tag}-client{i}.json"
        outs.append(out)
        cmd = [sys.executable, "-m", "bench.wireproduce", "--bootstrap", bootstrap,
               "--topic", topic, "--record-size", str(record_size),
               "--batch-records", str(batch_records), "--inflight", str(inflight),
               "--rate", repr(rate / clients), "--start-at", repr(start_at),
               "--end-at", repr(end_at), "--out", str(out),
               *(["--value-file", str(value_file)] if value_file else [])]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL,
                                      stderr=open(logs / f"{tag}-client{i}.log", "w")))
    try:
        time.sleep(max(0.0, start_at - time.monotonic()))
        meter.start()
        next_note = time.monotonic() + 10
        while time.monotonic() < end_at:
            time.sleep(min(0.2, max(0.0, end_at - time.monotonic())))
            if progress and time.monotonic() >= next_note:
                progress(f"  {tag}: {end_at - time.monotonic():.0f}s of the window left")
                next_note += 10
        cpu = meter.stop()
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            terminate(p, 5)
    results = collect(procs, outs)
    lat = [x for r in results for x in r.pop("latencies_ms")]
    errors: dict[str, int] = {}
    warmup_errors: dict[str, int] = {}
    for r in results:
        for code, n in r["errors"].items():
            errors[code] = errors.get(code, 0) + n
        for code, n in r["warmup_errors"].items():
            warmup_errors[code] = warmup_errors.get(code, 0) + n
    if errors:
        raise RuntimeError(f"produce errors in the window (error code: count): {errors}")
    acked = sum(r["acked_bytes"] for r in results)
    return {
        "clients": clients, "bytes": acked,
        "mib_per_sec": acked / (1 << 20) / seconds,
        "records_per_sec": sum(r["acked_records"] for r in results) / seconds,
        "offered_mib_per_sec": rate / (1 << 20) if rate else None,
        "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
        "p999_ms": percentile(lat, 99.9), "requests_acked": len(lat), "errors": errors,
        "warmup_errors": warmup_errors,  # (error code: count)
        "client_cpu_s": sum(r["cpu_s"] for r in results),
        "client_per_process_cpu_s": [r["cpu_s"] for r in results],
        "records_acked": sum(r["all_acked_records"] for r in results), **cpu,
        "wall_s": seconds,  # the clients' window; the meter's agrees within ms
    }


if __name__ == "__main__":
    sys.exit(main())
