"""A minimal Kafka wire client for the benchmark harness.

It is deliberately independent of ``headrace.protocol``: the harness must not share a codec with
the broker it measures. It speaks only what the harness needs, in the oldest versions both
Apache Kafka 3.9/4.0 and Headrace accept:

- ApiVersions v0 (which APIs a broker lists, e.g. whether consumer groups are there),
- Metadata v1 (partition leaders; a named topic is auto-created by both brokers),
- CreateTopics v2 (a topic with N partitions, or placed replicas and topic configs),
- Produce v3 with one record batch v2 (cold-start probe),
- ListOffsets v1 (end offsets: a run proves how many records the broker holds).

Standard library plus ``crc32c`` (a Headrace dependency, so always installed).

The framing (size prefix, request header v1, the correlation id checked) is written out here
rather than taken from ``headrace.protocol.client``, for the same reason: the client that
measures a broker must not share its framing with the broker either, or a fault in one would
hide in the other. ``bench.wireproduce`` and ``bench.wirefetch`` build on it; their loops are
the measured hot paths, and stay byte-level for speed as well.
"""

from __future__ import annotations

import socket
import struct
import time

import crc32c

# API keys
PRODUCE, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 2, 3, 18, 19
FIND_COORDINATOR, OFFSET_COMMIT, JOIN_GROUP, DELETE_TOPICS = 10, 8, 11, 20
CLIENT_ID = b"headrace-bench"


class WireError(Exception):
    """A Kafka error code in a response the harness needs to succeed."""


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _varint(n: int) -> bytes:
    """Zig-zag varint (record fields)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record_batch(value: bytes, timestamp_ms: int | None = None, count: int = 1) -> bytes:
    """A record batch v2 holding ``count`` records of ``value`` (no key, no headers), base
    offset 0. The base offset is outside the CRC, so the same bytes can be sent again and again
    (the broker assigns the offsets).

    Layout: baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8 = 2,
    crc u32 (CRC-32C of everything after it), attributes i16, lastOffsetDelta i32,
    baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16, baseSequence i32,
    recordCount i32, records.
    """
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    records = []
    for delta in range(count):
        body = (b"\x00" + _varint(0) + _varint(delta) + _varint(-1) + _varint(len(value)) + value
                + _varint(0))
        records.append(_varint(len(body)) + body)
    after_crc = (struct.pack(">hiqqqhii", 0, count - 1, ts, ts, -1, -1, -1, count)
                 + b"".join(records))
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">iBI", -1, 2, crc)
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


class Reader:
    """Big-endian reads over a response body."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s


class WireClient:
    """One blocking connection; one request at a time."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0
        self.brokers: dict[int, tuple[str, int]] = {}  # filled by metadata()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: bytes) -> Reader:
        """Send one request (header v1) and return a reader positioned after the
        correlation id of its response (header v0). (Framed by hand: see the module's
        docstring.)"""
        self.correlation_id += 1
        frame = struct.pack(">hhih", api_key, version, self.correlation_id, len(CLIENT_ID)) \
            + CLIENT_ID + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        data = self._recv_exact(size)
        (cid,) = struct.unpack_from(">i", data, 0)
        if cid != self.correlation_id:
            raise WireError(f"correlation id {cid}, expected {self.correlation_id}")
        return Reader(data, 4)

    # -- APIs ---------------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: {api key: (min, max)}."""
        r = self.request(API_VERSIONS, 0, b"")
        err = r.take(">h")
        if err:
            raise WireError(f"ApiVersions error {err}")
        return {k: (lo, hi) for k, lo, hi in (r.take(">hhh") for _ in range(r.take(">i")))}

    def metadata(self, topics: list[str] | None) -> dict[str, tuple[int, dict[int, tuple[int, int]]]]:
        """Metadata v1: {topic: (error, {partition: (error, leader)})}. Naming a topic makes
        both brokers create it when auto-creation is on."""
        if topics is None:
            body = struct.pack(">i", -1)
        else:
            body = struct.pack(">i", len(topics)) + b"".join(_str(t) for t in topics)
        r = self.request(METADATA, 1, body)
        self.brokers = {}  # node id: (host, port), of the last Metadata response
        for _ in range(r.take(">i")):  # brokers: node id, host, port, rack
            node, host, port, _rack = r.take(">i"), r.string(), r.take(">i"), r.string()
            self.brokers[node] = (host or "", port)
        r.take(">i")  # controller id
        out = {}
        for _ in range(r.take(">i")):
            terr = r.take(">h")
            name = r.string()
            r.take(">?")  # is_internal
            parts = {}
            for _ in range(r.take(">i")):
                perr, idx, leader = r.take(">hii")
                for _ in range(2):  # replicas, isr: arrays of node ids
                    n = r.take(">i")
                    r.pos += 4 * n
                parts[idx] = (perr, leader)
            out[name] = (terr, parts)
        return out

    def create_topic(self, name: str, partitions: int, timeout_ms: int = 30000,
                     assignments: dict[int, list[int]] | None = None,
                     configs: dict[str, str] | None = None) -> int:
        """CreateTopics v2; returns the error code (0, or 36 TOPIC_ALREADY_EXISTS, ...).
        ``assignments``: {partition: [broker ids]} (manual placement; ``partitions`` is then
        their count); ``configs``: topic configs (``min.insync.replicas``, ...)."""
        cfg = struct.pack(">i", len(configs or {})) + b"".join(
            _str(k) + _str(str(v)) for k, v in (configs or {}).items())
        if assignments:
            placed = b"".join(struct.pack(">ii", p, len(ids)) + struct.pack(f">{len(ids)}i", *ids)
                              for p, ids in sorted(assignments.items()))
            topic = struct.pack(">ihi", -1, -1, len(assignments)) + placed + cfg
        else:
            topic = struct.pack(">ihi", partitions, 1, 0) + cfg
        body = (struct.pack(">i", 1) + _str(name) + topic + struct.pack(">i?", timeout_ms, False))
        r = self.request(CREATE_TOPICS, 2, body)
        r.take(">i")  # throttle
        for _ in range(r.take(">i")):
            r.string()
            err = r.take(">h")
            r.string()
            return err
        raise WireError("CreateTopics: empty response")

    def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> dict[str, int]:
        """DeleteTopics v1; each topic's error code (0, or 3 UNKNOWN_TOPIC_OR_PARTITION...)."""
        body = struct.pack(">i", len(names)) + b"".join(_str(n) for n in names)
        r = self.request(DELETE_TOPICS, 1, body + struct.pack(">i", timeout_ms))
        r.take(">i")  # throttle
        return {r.string(): r.take(">h") for _ in range(r.take(">i"))}

    def list_offsets(self, topic: str, partitions: list[int], timestamp: int = -1
                     ) -> dict[int, tuple[int, int]]:
        """ListOffsets v1 (-1: the end offset, -2: the log start): {partition: (error,
        offset)}, asked of this broker (which must lead the partitions)."""
        body = struct.pack(">ii", -1, 1) + _str(topic) + struct.pack(">i", len(partitions)) \
            + b"".join(struct.pack(">iq", p, timestamp) for p in partitions)
        r = self.request(LIST_OFFSETS, 1, body)
        out = {}
        for _ in range(r.take(">i")):
            r.string()
            for _ in range(r.take(">i")):
                part, err, _ts, offset = r.take(">ihqq")
                out[part] = (err, offset)
        return out

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                timeout_ms: int = 30000) -> tuple[int, int]:
        """Produce v3 of one batch to one partition: (error code, base offset)."""
        r = self.request(PRODUCE, 3, produce_body(topic, partition, batch, acks, timeout_ms))
        return produce_result(r)


def produce_body(topic: str, partition: int, batch: bytes, acks: int = -1,
                 timeout_ms: int = 30000) -> bytes:
    """The body of a Produce v3 request of one batch to one partition."""
    return (_str(None) + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1)
            + _str(topic) + struct.pack(">i", 1) + struct.pack(">ii", partition, len(batch))
            + batch)


def request_header(api_key: int, version: int, correlation_id: int, body_len: int) -> bytes:
    """Size prefix and request header v1 of a request whose body is ``body_len`` bytes."""
    return struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(CLIENT_ID) + body_len, api_key, version,
                       correlation_id, len(CLIENT_ID)) + CLIENT_ID


def produce_result(r: Reader) -> tuple[int, int]:
    """(error code, base offset) of a Produce v3 response of one partition (``r`` positioned
    after the correlation id)."""
    r.take(">i")  # topics
    r.string()
    r.take(">i")  # partitions
    _idx, err, base = r.take(">ihq")
    return err, base


# -- helpers used by the harness ------------------------------------------------------------


def wait_ready(host: str, port: int, timeout: float = 60.0) -> None:
    """Wait until Metadata answers."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with WireClient(host, port, timeout=2) as c:
                c.metadata(None)
                return
        except (OSError, ConnectionError, struct.error, WireError) as e:
            last = e
            time.sleep(0.05)
    raise TimeoutError(f"broker on {host}:{port} not ready after {timeout}s: {last}")


def ensure_topic(host: str, port: int, name: str, partitions: int, timeout: float = 60.0) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until every one has a leader
    that answers for it (ListOffsets: a broker may name a new partition's leader in Metadata
    before that leader takes requests for it)."""
    deadline = time.monotonic() + timeout
    with WireClient(host, port) as c:
        err = c.create_topic(name, partitions)
        if err not in (0, 36):
            raise WireError(f"CreateTopics {name}: error {err}")
        while time.monotonic() < deadline:
            md = c.metadata([name])
            terr, parts = md.get(name, (3, {}))
            if terr == 0 and len(parts) == partitions and all(
                    e == 0 and leader >= 0 for e, leader in parts.values()):
                break
            time.sleep(0.05)
        else:
            raise TimeoutError(f"topic {name} has no leaders after {timeout}s")
    while True:
        try:
            end_offsets(host, port, name)
            return
        except WireError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def end_offsets(host: str, port: int, topic: str) -> dict[int, int]:
    """{partition: end offset} of ``topic``, each asked of the partition's leader (a
    ``--workers`` cluster or a Kafka cluster spreads leaders). Raises on any error code."""
    with WireClient(host, port) as c:
        terr, parts = c.metadata([topic]).get(topic, (3, {}))
        if terr:
            raise WireError(f"Metadata {topic}: error {terr}")
        addresses = dict(c.brokers)
    by_leader: dict[int, list[int]] = {}
    for p, (err, leader) in parts.items():
        if err or leader < 0:
            raise WireError(f"{topic}-{p}: error {err}, leader {leader}")
        by_leader.setdefault(leader, []).append(p)
    out: dict[int, int] = {}
    for leader, ps in by_leader.items():
        with WireClient(*addresses[leader]) as c:
            for p, (err, offset) in c.list_offsets(topic, sorted(ps)).items():
                if err:
                    raise WireError(f"ListOffsets {topic}-{p}: error {err}")
                out[p] = offset
    return out


def group_apis_missing(host: str, port: int) -> list[str]:
    """Names of the consumer-group APIs (needed by ConsumerPerformance) the broker lacks."""
    with WireClient(host, port) as c:
        have = c.api_versions()
    need = {FIND_COORDINATOR: "FindCoordinator", JOIN_GROUP: "JoinGroup",
            OFFSET_COMMIT: "OffsetCommit"}
    return [name for key, name in need.items() if key not in have]


def first_ack(host: str, port: int, topic: str, deadline: float,
              poll_s: float = 0.005, create: bool = False) -> float:
    """Retry connect / Metadata / Produce (acks=all) until one produce is acknowledged without
    error; return ``time.monotonic()`` of that acknowledgement. For cold-start timing.
    ``create``: for a broker whose Metadata does not create topics, a CreateTopics first
    wherever Metadata answers UNKNOWN_TOPIC_OR_PARTITION (3)."""
    batch_value = b"cold-start"
    while time.monotonic() < deadline:
        try:
            with WireClient(host, port, timeout=5) as c:
                while time.monotonic() < deadline:
                    terr, parts = c.metadata([topic]).get(topic, (3, {}))
                    if terr == 3 and create:
                        c.create_topic(topic, 1)
                    elif terr == 0 and parts and parts.get(0, (1, -1))[0] == 0:
                        err, _ = c.produce(topic, 0, record_batch(batch_value))
                        if err == 0:
                            return time.monotonic()
                    time.sleep(poll_s)
        except (OSError, ConnectionError, struct.error, WireError):
            time.sleep(poll_s)
    raise TimeoutError("no acknowledged produce before the deadline")
