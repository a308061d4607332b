"""Soak: a broker under mixed load and abusive clients for a while, its RSS and descriptors sampled.

    python -m bench.soak                 # 30 minutes; bench/results/soak.png, soak.csv
    python -m bench.soak --minutes 2     # a short run

How this works
--------------
One Headrace broker (a child process, default settings, its own data directory) serves at the
same time:

* well-behaved load, through confluent-kafka: an idempotent producer (acks=all), a consumer
  group of two members reading it, and a transactional producer committing small transactions;
* abusive clients, each in its own thread, reconnecting when the broker closes them, from
  other loopback addresses than the well-behaved clients (as other hosts would be):
  a *slow reader* that pipelines Fetch requests for megabytes and never reads a response,
  a *connection flood* of idle connections and of connections that announce a 100 MiB frame
  and send 10 bytes, a *slow writer* trickling frames a byte at a time, and a *request
  flood* of pipelined ApiVersions requests on one connection that it never reads;
* a probe: one ApiVersions round trip a second on a fresh connection.

Every second the broker's RSS and open descriptors (``/proc/<pid>``) and the probe's round
trip are written to ``soak.csv`` and, at the end, plotted. Flat lines are the bar: the run
fails (exit 1) when the RSS of the last quarter exceeds that of the second quarter by more
than ``--rss-growth`` (default 20%), when descriptors grow likewise, or when a probe took
longer than a second; it stops at once when the RSS passes ``--max-rss-mib``.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.wire import WireClient
from headrace.broker.client.blocking import BlockingConnection
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, messages
from headrace.protocol.client import request_frame

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "soak"


def frame(api_key: int, version: int, msg, correlation_id: int = 1) -> bytes:
    """A request frame the abusers send again and again, never reading the answers."""
    return request_frame(api_key, version, correlation_id, "soak", msg)


API_VERSIONS_REQUEST = messages.ApiVersionsRequest(
    client_software_name="soak", client_software_version="1"
)
API_VERSIONS = frame(ApiKey.API_VERSIONS, 3, API_VERSIONS_REQUEST)


def fetch_frame(topic_id) -> bytes:
    F = messages.FetchRequest
    return frame(
        ApiKey.FETCH,
        13,
        F(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=64 << 20,
            isolation_level=0,
            topics=[
                F.FetchTopic(
                    topic_id=topic_id,
                    partitions=[
                        F.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=16 << 20)
                        for p in range(4)
                    ],
                )
            ],
        ),
    )


def find_topic_id(port: int, topic: str):
    M = messages.MetadataRequest
    request = M(topics=[M.MetadataRequestTopic(name=topic)])
    with BlockingConnection.connect("127.0.0.1", port, 10, client_id="soak") as conn:
        return conn.request(ApiKey.METADATA, 12, request).topics[0].topic_id


def sample(pid: int) -> tuple[int, int]:
    """(RSS in bytes, open descriptors) of process ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def probe(port: int) -> float:
    """Seconds for one ApiVersions round trip on a new connection (inf: no answer in 5 s).
    The answer is taken raw: the probe times the broker, not the decoding."""
    start = time.monotonic()
    try:
        with BlockingConnection.connect("127.0.0.1", port, 5, client_id="soak") as conn:
            conn.send(ApiKey.API_VERSIONS, 3, API_VERSIONS_REQUEST, raw=True)
            conn.receive()
    except OSError:
        return float("inf")
    return time.monotonic() - start


class Abuser(threading.Thread):
    """One abusive client: ``run_once`` until stopped, reconnecting when closed."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=type(self).__name__)
        self.port, self.stop = port, stop

    source = "127.0.0.2"  # abusers come from another address than the well-behaved clients

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), 5, (self.source, 0))
        s.setblocking(False)
        return s

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.run_once()
            except OSError:
                self.stop.wait(0.2)

    def run_once(self) -> None:
        raise NotImplementedError


class SlowReader(Abuser):
    """Pipelines large Fetch requests and never reads the answers."""

    def __init__(self, port, stop, topic_id) -> None:
        super().__init__(port, stop)
        self.request = fetch_frame(topic_id)

    def run_once(self) -> None:
        with self.connect() as s:
            deadline = time.monotonic() + 20
            while not self.stop.is_set() and time.monotonic() < deadline:
                try:
                    s.send(self.request)
                except BlockingIOError:
                    self.stop.wait(0.05)


class ConnectionFlood(Abuser):
    """Holds many idle connections, some announcing a 100 MiB frame after 10 bytes of it."""

    source = "127.0.0.3"  # an address of its own: it holds up to max.connections.per.ip

    def __init__(self, port, stop, count: int) -> None:
        super().__init__(port, stop)
        self.count = count

    def run_once(self) -> None:
        held = []
        try:
            for i in range(self.count):
                if self.stop.is_set():
                    break
                s = self.connect()
                if i % 4 == 0:
                    s.send(struct.pack(">i", 100 << 20) + bytes(10))
                held.append(s)
            self.stop.wait(30)
        finally:
            for s in held:
                s.close()


class SlowWriter(Abuser):
    """Trickles ApiVersions frames, one byte every 50 ms, on a few connections."""

    def run_once(self) -> None:
        socks = [self.connect() for _ in range(20)]
        try:
            for i in range(len(API_VERSIONS) * 3):
                if self.stop.is_set():
                    return
                byte = API_VERSIONS[i % len(API_VERSIONS)].to_bytes(1, "big")
                for s in socks:
                    s.send(byte)
                self.stop.wait(0.05)
        finally:
            for s in socks:
                s.close()


class RequestFlood(Abuser):
    """Pipelines ApiVersions requests without reading, for 20 s a connection."""

    def run_once(self) -> None:
        burst = API_VERSIONS * 100
        with self.connect() as s:
            deadline = time.monotonic() + 20
            while not self.stop.is_set() and time.monotonic() < deadline:
                try:
                    s.send(burst)
                except BlockingIOError:
                    self.stop.wait(0.01)


def well_behaved_load(
    bootstrap: str, stop: threading.Event, errors: list
) -> list[threading.Thread]:
    from confluent_kafka import Consumer, Producer

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        value = os.urandom(1000)
        while not stop.is_set():
            for _ in range(200):
                p.produce(TOPIC, value, on_delivery=lambda e, m: e and errors.append(str(e)))
            p.poll(0)
            p.flush(10)
            stop.wait(0.05)
        p.flush(10)

    def consume(member: int) -> None:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "soak-group",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
            }
        )
        c.subscribe([TOPIC])
        while not stop.is_set():
            c.poll(0.5)
        c.close()

    def transact() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "soak-tx"})
        p.init_transactions(30)
        while not stop.is_set():
            p.begin_transaction()
            for i in range(10):
                p.produce(TOPIC, b"tx-%d" % i)
            p.commit_transaction(30)
            stop.wait(0.5)

    threads = [
        threading.Thread(target=f, args=a, daemon=True)
        for f, a in ((produce, ()), (consume, (0,)), (consume, (1,)), (transact, ()))
    ]
    for t in threads:
        t.start()
    return threads


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["seconds"] for r in rows]
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    a.plot(t, [r["rss_mib"] for r in rows])
    a.set_ylabel("broker RSS (MiB)")
    a.set_ylim(bottom=0)
    b.plot(t, [r["fds"] for r in rows], color="tab:orange")
    b.set_ylabel("open descriptors")
    b.set_ylim(bottom=0)
    c.plot(t, [min(r["probe_ms"], 5000) for r in rows], color="tab:green")
    c.set_ylabel("probe round trip (ms)")
    c.set_xlabel("seconds")
    fig.suptitle("Headrace under mixed load and abusive clients")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument(
        "--connections",
        type=int,
        default=900,
        help="held by the connection flood (from one address: max.connections.per.ip is 1000)",
    )
    ap.add_argument("--rss-growth", type=float, default=0.20)
    ap.add_argument(
        "--max-rss-mib",
        type=float,
        default=4096,
        help="stop at once (and fail) when the broker's RSS passes this",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, args.connections * 2 + 4096))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the broker inherits it
    args.out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as data, BrokerProcess(Path(data) / "data") as broker:
        with WireClient("127.0.0.1", broker.port) as w:
            w.create_topic(TOPIC, 4)
        topic_id = find_topic_id(broker.port, TOPIC)
        load = well_behaved_load(broker.bootstrap, stop, errors)
        time.sleep(5)  # some data for the slow reader to ask for
        abusers = [
            SlowReader(broker.port, stop, topic_id),
            ConnectionFlood(broker.port, stop, args.connections),
            SlowWriter(broker.port, stop),
            RequestFlood(broker.port, stop),
        ]
        for a in abusers:
            a.start()
        rows: list[dict] = []
        start = time.monotonic()
        end = start + args.minutes * 60
        with open(args.out / "soak.csv", "w", newline="") as f:
            out = csv.DictWriter(f, ["seconds", "rss_mib", "fds", "probe_ms"])
            out.writeheader()
            while time.monotonic() < end:
                rss, fds = sample(broker.pid)
                row = {
                    "seconds": round(time.monotonic() - start, 1),
                    "rss_mib": round(rss / 2**20, 1),
                    "fds": fds,
                    "probe_ms": round(probe(broker.port) * 1000, 1),
                }
                rows.append(row)
                out.writerow(row)
                f.flush()
                if row["rss_mib"] > args.max_rss_mib:
                    print(f"[soak] RSS {row['rss_mib']} MiB is over --max-rss-mib: stopping")
                    errors.append("RSS over --max-rss-mib")
                    break
                if len(rows) % 30 == 1:
                    left = (end - time.monotonic()) / 60
                    print(
                        f"[soak] {row['seconds']:7.0f} s  RSS {row['rss_mib']:7.1f} MiB  "
                        f"fds {fds:6d}  probe {row['probe_ms']:7.1f} ms  "
                        f"({left:.1f} min left)",
                        flush=True,
                    )
                time.sleep(max(0.0, 1 - (time.monotonic() - start) % 1))
        stop.set()
        for t in load + abusers:
            t.join(timeout=15)
    plot(rows, args.out / "soak.png")
    q = max(1, len(rows) // 4)
    second, last = rows[q : 2 * q], rows[-q:]

    def grew(key: str) -> float:
        before = max(r[key] for r in second) if second else rows[0][key]
        return max(r[key] for r in last) / max(before, 1) - 1

    slow = [r for r in rows if r["probe_ms"] > 1000]
    verdict = {
        "RSS growth (last quarter vs second)": grew("rss_mib"),
        "descriptor growth": grew("fds"),
    }
    print(
        f"[soak] max RSS {max(r['rss_mib'] for r in rows):.1f} MiB, max fds "
        f"{max(r['fds'] for r in rows)}, slowest probe {max(r['probe_ms'] for r in rows):.1f} ms, "
        f"client errors {len(errors)}"
    )
    for name, value in verdict.items():
        print(f"[soak] {name}: {value:+.1%}")
    print(f"[soak] plot: {args.out / 'soak.png'}")
    failed = (
        [n for n, v in verdict.items() if v > args.rss_growth]
        + ([f"{len(slow)} probes over 1 s"] if slow else [])
        + ([f"{len(errors)} client errors"] if errors else [])
    )
    if failed:
        print("[soak] FAILED: " + "; ".join(failed))
        return 1
    print("[soak] flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
