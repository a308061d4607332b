"""A Fetch client on bench/wire.py's framing that walks only batch headers: little client CPU per
byte, so that the broker and not the client sets the pace (``bench.fetchpath``'s consumers, and
one process of a ``python -m bench.run`` consume run: ``drive`` starts them).

    python -m bench.wirefetch --bootstrap 127.0.0.1:9092 --topic t --out result.json

How this works: Fetch v4 requests, one at a time on each connection: one connection to each
partition leader (from Metadata) asking for its partitions, each response received into one
reused buffer. Of the records only the batch headers are read:
each batch's last offset advances the partition's fetch position and its record count is
added up. As a process (what ``drive`` runs) it reads every partition from offset 0 up to the
end offsets it found at its start, ``--passes`` times, then writes the records and bytes it
received and its CPU time to ``--out``; ``bench.fetchpath`` instead runs ``Consumer`` threads
that start again from 0 at the end of the log, for as long as it measures.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import wire, wireproduce
from bench.cpu import Meter
from headrace.broker.tools.process import terminate

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
FETCH = 1


class Consumer(threading.Thread):
    """Fetch v4 in a loop over all partitions; counts the record bytes and records received.
    ``ends``: read each partition up to this offset once, then stop (else: from 0 again at
    the end of the log, until ``stop`` is set). ``receive_buffer``: the socket's SO_RCVBUF (else
the kernel's, which grows it)."""

    def __init__(self, addr: tuple[str, int], topic: str, partitions: list[int], max_bytes: int,
                 stop: threading.Event, partition_max_bytes: int | None = None,
                 ends: dict[int, int] | None = None, receive_buffer: int | None = None):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:  # before connecting, as Kafka's clients do (the window scale)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(60)
        self.sock.connect(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.topic = wire._str(topic)
        self.partitions = partitions
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes or max(1, max_bytes // len(partitions))
        self.offsets = dict.fromkeys(partitions, 0)
        self.ends = ends
        self.stop = stop
        self.bytes = 0
        self.records = 0
        self.error: BaseException | None = None
        self.buf = bytearray(max_bytes + 4 * MiB)

    def request(self, cid: int) -> bytes:
        per = self.partition_max_bytes
        wanted = [p for p in self.partitions
                  if self.ends is None or self.offsets[p] < self.ends.get(p, 0)]
        body = struct.pack(">iiiib", -1, 500, 1, self.max_bytes, 0) + struct.pack(">i", 1)
        body += self.topic + struct.pack(">i", len(wanted))
        for p in wanted:
            body += struct.pack(">iqi", p, self.offsets[p], per)
        frame = struct.pack(">hhih", FETCH, 4, cid, len(wire.CLIENT_ID)) + wire.CLIENT_ID + body
        return struct.pack(">i", len(frame)) + frame

    def done(self) -> bool:
        return self.ends is not None and all(
            self.offsets[p] >= self.ends.get(p, 0) for p in self.partitions)

    def recv_into(self, view: memoryview, n: int) -> None:
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:n])
            if not k:
                raise ConnectionError("closed by the broker")
            got += k

    def run(self) -> None:
        try:
            view = memoryview(self.buf)
            cid = 0
            # framed by hand, as bench.wire (not headrace.protocol.client): the measuring client
            # shares nothing with the broker, and each response is received into one reused
            # buffer and only its batch headers are walked (the loop is the measured hot path)
            while not self.stop.is_set() and not self.done():
                cid += 1
                self.sock.sendall(self.request(cid))
                self.recv_into(view, 4)
                (size,) = struct.unpack_from(">i", self.buf, 0)
                if size > len(self.buf):
                    raise ValueError(f"response of {size} bytes")
                self.recv_into(view, size)
                self.parse(size)
        except BaseException as e:  # reported by the harness
            if not self.stop.is_set():
                self.error = e
        finally:
            self.sock.close()

    def parse(self, size: int) -> None:
        buf = self.buf
        pos = 4 + 4  # correlation id, throttle
        (ntopics,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        for _ in range(ntopics):
            (n,) = struct.unpack_from(">h", buf, pos)
            pos += 2 + n
            (nparts,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            for _ in range(nparts):
                p, err, hw, _lso, naborted = struct.unpack_from(">ihqqi", buf, pos)
                pos += 26
                if naborted > 0:
                    pos += 16 * naborted
                (rlen,) = struct.unpack_from(">i", buf, pos)
                pos += 4
                if err:
                    raise ValueError(f"partition {p}: error {err}")
                if rlen <= 0:
                    if self.ends is None and self.offsets[p] >= hw:
                        self.offsets[p] = 0  # the end of the log: from the start again
                    continue
                end, b, last = pos + rlen, pos, -1
                while b + 61 <= end:
                    base, blen = struct.unpack_from(">qi", buf, b)
                    if b + 12 + blen > end:
                        break  # a partial batch at the end (not counted)
                    (delta,) = struct.unpack_from(">i", buf, b + 23)
                    last = base + delta
                    self.records += delta + 1
                    self.bytes += 12 + blen
                    b += 12 + blen
                if last < 0:
                    raise ValueError(f"partition {p}: no whole batch in {rlen} bytes; raise "
                                     "the partition's maximum bytes")
                self.offsets[p] = last + 1
                if self.ends is None and last + 1 >= hw:
                    self.offsets[p] = 0
                pos = end
        if pos != size:
            raise ValueError(f"parsed {pos} of {size} bytes")


def read(bootstrap: str, topic: str, max_bytes: int, passes: int) -> dict:
    """Read the whole topic ``passes`` times, up to the end offsets at the start."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    ends = wire.end_offsets(host, int(port), topic)
    groups = wireproduce.leaders(bootstrap, topic)
    stop = threading.Event()
    records = size = 0
    errors: list[str] = []
    t0, cpu0 = time.monotonic(), time.process_time()
    for _ in range(passes):
        consumers = [Consumer(addr, topic, parts, max_bytes, stop, ends=ends)
                     for addr, parts in groups.items()]
        for c in consumers:
            c.start()
        for c in consumers:
            c.join()
        records += sum(c.records for c in consumers)
        size += sum(c.bytes for c in consumers)
        errors += [repr(c.error) for c in consumers if c.error is not None]
        if errors:
            break
    t1, cpu1 = time.monotonic(), time.process_time()
    return {"records": records, "expected": sum(ends.values()) * passes, "bytes": size,
            "seconds": t1 - t0, "cpu_s": cpu1 - cpu0, "failures": errors}


def drive(bootstrap: str, topic: str, clients: int, meter: Meter, logs: Path, tag: str,
          passes: int = 1, max_bytes: int = 50 * MiB, timeout: float = 1800) -> dict:
    """The harness side: ``clients`` processes at once, each reading the whole topic
    ``passes`` times;
    ``meter`` runs from their spawn to the last one's exit. Raises ``RuntimeError`` if one
    failed or read other than every record."""
    logs.mkdir(parents=True, exist_ok=True)
    outs = [logs / f"{tag}-client{i}.json" for i in range(clients)]
    meter.start()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bench.wirefetch", "--bootstrap", bootstrap, "--topic", topic,
         "--max-bytes", str(max_bytes), "--passes", str(passes), "--out", str(out)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stderr=open(logs / f"{tag}-client{i}.log", "w"))
        for i, out in enumerate(outs)]
    try:
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        cpu = meter.stop()
        for p in procs:
            terminate(p, 5)
    results = wireproduce.collect(procs, outs)
    for r in results:
        if r["records"] != r["expected"]:
            raise RuntimeError(f"fetch client read {r['records']} records of {r['expected']}")
    return {"clients": clients, "bytes": sum(r["bytes"] for r in results),
            "records": sum(r["records"] for r in results),
            "client_cpu_s": sum(r["cpu_s"] for r in results),
            "client_seconds": [r["seconds"] for r in results], **cpu}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--max-bytes", type=int, default=50 * MiB)
    ap.add_argument("--passes", type=int, default=1, help="read the topic this many times")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    result = read(args.bootstrap, args.topic, args.max_bytes, args.passes)
    Path(args.out).write_text(json.dumps(result))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
