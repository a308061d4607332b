"""Watching a broker process from outside while a test misbehaves at it: its memory (RSS) and
open file descriptors from /proc, and how long a well-behaved client waits for an answer."""

from __future__ import annotations

import os
import resource
import socket
import struct
import threading
import time

from kafkawire import WireClient

from headrace.protocol import (
    ApiKey,
    ErrorCode,
    RequestHeader,
    encode_request,
    encode_request_header,
    messages,
)
from headrace.protocol.records import Record, build_batch

MB = 1 << 20


def produce_one(client: WireClient, topic: str, value: bytes) -> int:
    """Produce one record of ``value`` to partition 0 of ``topic`` (acks=1); the error code."""
    P = messages.ProduceRequest
    batch = build_batch([Record(key=None, value=value)])
    r = client.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    return r.responses[0].partition_responses[0].error_code


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def raise_nofile(n: int, pid: int | None = None) -> None:
    """Let this process (and ``pid``, if given) open ``n`` files, or as many as the hard limit
    allows when raising it is not permitted."""
    for target in [0] + ([pid] if pid else []):
        soft, hard = resource.prlimit(target, resource.RLIMIT_NOFILE)
        if soft >= n:
            continue
        try:
            resource.prlimit(target, resource.RLIMIT_NOFILE, (n, max(hard, n)))
        except (PermissionError, ValueError):
            resource.prlimit(target, resource.RLIMIT_NOFILE, (hard, hard))


def frame(api_key: int, version: int, correlation_id: int, msg) -> bytes:
    """A request's frame: its length, header and body."""
    body = encode_request_header(RequestHeader(api_key, version, correlation_id, "probe"))
    body += encode_request(api_key, version, msg)
    return struct.pack(">i", len(body)) + body


def api_versions_frame(correlation_id: int = 1) -> bytes:
    body = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 3, correlation_id, "probe"))
    body += encode_request(
        ApiKey.API_VERSIONS,
        3,
        messages.ApiVersionsRequest(client_software_name="probe", client_software_version="1"),
    )
    return struct.pack(">i", len(body)) + body


def round_trip(port: int, timeout: float = 10.0) -> float:
    """Seconds for a new client to connect and get its ApiVersions answer."""
    started = time.monotonic()
    with WireClient(port, timeout=timeout) as client:
        r = client.request(
            ApiKey.API_VERSIONS,
            3,
            messages.ApiVersionsRequest(client_software_name="probe", client_software_version="1"),
        )
        assert r.error_code == ErrorCode.NONE
    return time.monotonic() - started


class Watch:
    """Samples the broker's RSS and fd count and a new client's round trip, every ``every`` s,
    in a thread, while the ``with`` block runs."""

    def __init__(self, pid: int, port: int, every: float = 0.25) -> None:
        self.pid, self.port, self.every = pid, port, every
        self.rss: list[int] = []
        self.fds: list[int] = []
        self.trips: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rss.append(rss(self.pid))
            self.fds.append(fds(self.pid))
            try:
                self.trips.append(round_trip(self.port, timeout=5))
            except OSError:
                self.trips.append(float("inf"))
            self._stop.wait(self.every)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def max_rss(self) -> int:
        return max(self.rss)

    @property
    def slowest(self) -> float:
        return max(self.trips)

    def summary(self) -> str:
        return (
            f"rss max {self.max_rss / MB:.0f} MiB, fds max {max(self.fds)}, "
            f"slowest round trip {self.slowest * 1000:.0f} ms over {len(self.trips)} samples"
        )


def open_idle(port: int, n: int, source: str | None = None) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        if source:
            s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def closed_soon(sock: socket.socket, timeout: float = 2.0) -> bool:
    """True when the peer closes ``sock`` within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
