"""A pipelined Produce client on bench/wire.py's framing: little client CPU per byte, so that
the brokers and not the client set the pace (one process of a ``python -m bench.cluster`` run).

    python -m bench.wireproduce --bootstrap 127.0.0.1:9092 --topic t --start-at T0 --end-at T1 \\
        --out result.json [--record-size 65536] [--batch-records 15] [--inflight 4]

How this works: one record batch of ``--batch-records`` records of ``--record-size`` bytes is
built once; a Produce v3 request carrying it is prepared for every partition of the topic (the
base offset lies outside the batch's CRC, so the same bytes are valid every time: the broker
assigns the offsets). One connection goes to each partition leader (from Metadata), with a
sender thread that keeps ``--inflight`` requests outstanding, cycling over that leader's
partitions, and a receiver thread that reads the responses in order, checks each error code
and frees a slot. Sending starts at once (the warm-up); ``--start-at`` and ``--end-at`` are
``time.monotonic()`` values, the same clock in every process on Linux, and only responses that
arrive between them are counted: their record bytes, their latency (send to response) and the
process's CPU time over the window. Then the senders stop, the outstanding requests are
drained, and the counts go to ``--out`` as JSON (``all_acked_records`` also counts what was
acknowledged outside the window: the harness checks it against the partitions' end offsets).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from bench import wire

MAX_SAMPLES = 1_000_000  # latencies kept per process


class Connection:
    """One connection to one leader, ``inflight`` requests outstanding."""

    def __init__(self, addr: tuple[str, int], bodies: list[bytes], payload: int,
                 inflight: int, window: tuple[float, float], stop: threading.Event) -> None:
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
        self.sent: dict[int, float] = {}
        self.lock = threading.Lock()
        self.acked_bytes = 0
        self.acked = 0
        self.requests = 0
        self.errors: dict[int, int] = {}  # error code: count, in the window
        self.warmup_errors = 0
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
        try:
            while not self.stop.is_set():
                if not self.slots.acquire(timeout=0.2):
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
                    self.warmup_errors += err != 0
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
    batch = wire.record_batch(b"x" * args.record_size, count=args.batch_records)
    stop = threading.Event()
    window = (args.start_at, args.end_at)
    conns = [Connection(addr, [wire.produce_body(args.topic, p, batch, args.acks)
                               for p in parts], args.record_size * args.batch_records,
                        args.inflight, window, stop)
             for addr, parts in leaders(args.bootstrap, args.topic).items()]
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
    for c in conns:
        for code, n in c.errors.items():
            errors[str(code)] = errors.get(str(code), 0) + n
    return {
        "seconds": args.end_at - args.start_at,
        "acked_bytes": sum(c.acked_bytes for c in conns),
        "acked_records": sum(c.acked for c in conns) * args.batch_records,
        "all_acked_records": sum(c.all_acked for c in conns) * args.batch_records,
        "requests": sum(c.requests for c in conns),
        "errors": errors,
        "warmup_errors": sum(c.warmup_errors for c in conns),
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
    ap.add_argument("--start-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--end-at", type=float, required=True, help="time.monotonic() value")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    result = run(args)
    Path(args.out).write_text(json.dumps(result))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
