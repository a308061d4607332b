"""The Headrace a client's scenarios run against, and what the suite reads from its log.

``Broker`` (``BrokerProcess``) is one broker; ``ClusterProcess`` is a cluster of three on this
machine: a standalone ZooKeeper (``headrace.broker.zookeeper_server``, Maven Central's jars)
and ``headrace serve --workers 3`` with ``zookeeper.connect`` set, so brokers 1-3 each run in
their own process with their own port and data directory. Its ``bootstrap`` lists the three
addresses; it is ready once every broker's Metadata lists all three. Both keep the log lines
of every broker (the workers write to their parent's stderr) in ``lines``.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Protocol

from headrace.broker.process import BrokerProcess
from headrace.broker.zookeeper_server import ZooKeeperServer
from headrace.protocol import (
    ApiKey,
    RequestHeader,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_header,
    messages,
    response_header_is_flexible,
)


class Target(Protocol):
    """What the runner needs of a broker or a cluster."""

    lines: list[str]
    seen: int

    @property
    def bootstrap(self) -> str: ...

    @property
    def alive(self) -> bool: ...


CLUSTER_SIZE = 3


class ClusterProcess:
    """ZooKeeper and ``brokers`` Headrace brokers, all on 127.0.0.1, data under ``data_dir``."""

    def __init__(self, data_dir: Path, brokers: int = CLUSTER_SIZE) -> None:
        self.data_dir = Path(data_dir)
        self.count = brokers
        self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper")
        self.brokers = BrokerProcess(self.data_dir / "brokers", args=["--workers", str(brokers)])
        self.started = False

    @property
    def lines(self) -> list[str]:
        return self.brokers.lines

    @property
    def seen(self) -> int:
        return self.brokers.seen

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.brokers.ports)

    @property
    def alive(self) -> bool:
        zk = self.zookeeper.proc
        return self.brokers.alive and zk is not None and zk.poll() is None

    def start(self, timeout: float = 60) -> ClusterProcess:
        self.started = True
        self.zookeeper.start()
        self.brokers.overrides = {
            "zookeeper.connect": self.zookeeper.connect_string + "/headrace",
            "node.id": 1,
        }
        self.brokers.start(timeout)
        deadline = time.monotonic() + timeout
        for port in self.brokers.ports:
            while len(_brokers_seen(port)) < self.count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker on port {port} does not see {self.count} "
                                       f"brokers: {_brokers_seen(port)}")
                time.sleep(0.1)
        return self

    def stop(self) -> None:
        self.brokers.stop()
        self.zookeeper.stop()


def _brokers_seen(port: int) -> list[int]:
    """The node ids in the Metadata answer of the broker on ``port``."""
    request = encode_request_header(RequestHeader(ApiKey.METADATA, 12, 1, "compat")) + \
        encode_request(ApiKey.METADATA, 12, messages.MetadataRequest(
            topics=[], allow_auto_topic_creation=False))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = _read(sock, size)
    _, offset = decode_response_header(frame, response_header_is_flexible(ApiKey.METADATA, 12))
    md = decode_response(ApiKey.METADATA, 12, frame, offset)
    return sorted(b.node_id for b in md.brokers)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out


def complaints_since(broker: Target, mark: int, limit: int = 3) -> list[str]:
    """What the broker logged about failed or refused requests since ``seen`` was
    ``mark``: "closing ..." lines and the last line of each traceback, deduplicated."""
    new = broker.lines[-(broker.seen - mark):] if broker.seen > mark else []
    out: list[str] = []
    for i, line in enumerate(new):
        text = None
        if " closing " in line or " WARNING " in line or " ERROR " in line:
            text = line.split(" ", 3)[-1] if line[:2].isdigit() else line
        elif line and not line.startswith((" ", "Traceback")) and \
                i > 0 and new[i - 1].startswith(" ") and ("Error" in line or "Exception" in line):
            where = next((ln.strip() for ln in reversed(new[:i]) if ln.strip().startswith("File ")), "")
            text = f"{line} ({where})" if where else line
        if text:
            text = text.replace("request failed", "request failed:")
            if text not in out:
                out.append(text)
    return out[-limit:]


def tail(broker: Target, n: int = 5) -> str:
    return " | ".join(broker.lines[-n:])
