"""The Headrace a client's scenarios run against, and what the suite reads from its log.

``Broker`` (``BrokerProcess``) is one broker; ``ClusterProcess`` is a cluster of three on this
machine: a standalone ZooKeeper (``headrace.broker.tools.zookeeper_server``, Maven Central's jars)
and ``headrace serve --workers 3`` with ``zookeeper.connect`` set, so brokers 1-3 each run in
their own process with their own port and data directory. Its ``bootstrap`` lists the three
addresses; it is ready once every broker's Metadata lists all three. Both keep the log lines
of every broker (the workers write to their parent's stderr) in ``lines``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Protocol

from headrace.broker.client.blocking import BlockingConnection
from headrace.broker.tools.process import BrokerProcess
from headrace.broker.tools.zookeeper_server import ZooKeeperServer
from headrace.protocol import ApiKey, messages


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


SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SECURE_LISTENERS = ("PLAINTEXT", "SSL", "MTLS", "SASL_SSL", "SASL_PLAINTEXT")


class SecureBroker:
    """One broker with a listener of each kind, for the security table: PLAINTEXT (to set
    up), SSL (server certificate only), MTLS (an SSL listener with ``ssl.client.auth=required``),
    SASL_SSL with SCRAM-SHA-512 and SASL_PLAINTEXT with PLAIN. A CA and the broker's and a
    client's certificates are made for the run (``tests/tlsfiles.py``); the SCRAM user is
    created after the start with AlterUserScramCredentials (a salted password, as clients
    send it), the PLAIN user is in the listener's JAAS setting. What the scenario programs need
    (addresses, files, users) goes to ``security.properties``, named by the environment variable
    ``HEADRACE_COMPAT_SECURITY`` (``env``)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.pki_dir = self.data_dir / "pki"
        self.broker = BrokerProcess(self.data_dir / "broker")
        self.env: dict[str, str] = {}

    @property
    def lines(self) -> list[str]:
        return self.broker.lines

    @property
    def seen(self) -> int:
        return self.broker.seen

    @property
    def bootstrap(self) -> str:  # the PLAINTEXT listener (topics are made through it)
        return self.broker.bootstrap

    @property
    def alive(self) -> bool:
        return self.broker.alive

    def start(self, timeout: float = 30) -> SecureBroker:
        pki = _make_pki(self.pki_dir)
        keystore = self.pki_dir / "client-keystore.pem"  # Java's PEM keystore: chain, then key
        keystore.write_bytes(pki.client_cert.read_bytes() + pki.client_key.read_bytes())
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required"
                f' user_{PLAIN_USER}="{PLAIN_PASSWORD}";')
        self.broker.overrides = {
            "listeners": ",".join(f"{n}://127.0.0.1:0" for n in SECURE_LISTENERS),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                              "SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "ssl.keystore.location": pki.broker,
            "ssl.truststore.location": pki.ca,
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        }
        self.broker.start(timeout)
        add_scram_user(self.broker.port, SCRAM_USER, SCRAM_PASSWORD)
        ports = self.broker.listener_ports
        props = {name.lower(): f"127.0.0.1:{ports[name]}" for name in SECURE_LISTENERS}
        props.update({
            "ca.pem": pki.ca, "client.cert.pem": pki.client_cert, "client.key.pem": pki.client_key,
            "client.keystore.pem": keystore, "client.principal": pki.client_subject,
            "scram.mechanism": "SCRAM-SHA-512", "scram.username": SCRAM_USER,
            "scram.password": SCRAM_PASSWORD, "plain.username": PLAIN_USER,
            "plain.password": PLAIN_PASSWORD,
        })
        path = self.pki_dir / "security.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.env = {"HEADRACE_COMPAT_SECURITY": str(path)}
        return self

    def stop(self) -> None:
        self.broker.stop()


def _make_pki(directory: Path):
    """The test suite's certificate maker (``tests/tlsfiles.py``, ``cryptography``)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tlsfiles", Path(__file__).resolve().parent.parent / "tests" / "tlsfiles.py")
    assert spec is not None and spec.loader is not None
    tlsfiles = sys.modules.setdefault("tlsfiles", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(tlsfiles)
    return tlsfiles.make_pki(directory)


def add_scram_user(port: int, user: str, password: str, iterations: int = 8192) -> None:
    """A SCRAM-SHA-512 user, through AlterUserScramCredentials on the PLAINTEXT ``port``."""
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    A = messages.AlterUserScramCredentialsRequest
    answer = _ask(port, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, A(deletions=[], upsertions=[
        A.ScramCredentialUpsertion(name=user, mechanism=2, iterations=iterations, salt=salt,
                                   salted_password=salted)]))
    errors = [(r.user, r.error_code, r.error_message) for r in answer.results if r.error_code]
    if errors:
        raise RuntimeError(f"AlterUserScramCredentials refused: {errors}")


class KillableCluster:
    """ZooKeeper and three brokers, each its own ``headrace serve`` process (node ids 1-3), so
    that one can be killed with SIGKILL while the others carry on (``--workers 3`` stops every
    worker when one exits). ``zookeeper.session.timeout.ms`` is 6000 (Kafka's ZooKeeper-era
    default was 18000): a killed broker is taken for gone, and its partitions get new leaders,
    about 6 s after it stops answering. A scenario asks for the kill with ``HOOK kill-leader
    TOPIC PARTITION`` (``hook``); a killed broker stays down until a scenario asks for it back
    with ``HOOK restart NODE`` (same data directory, node id and port)."""

    SESSION_MS = 6000

    def __init__(self, data_dir: Path, brokers: int = CLUSTER_SIZE) -> None:
        self.data_dir = Path(data_dir)
        self.count = brokers
        self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper")
        self.nodes: dict[int, BrokerProcess] = {}
        self.killed: set[int] = set()
        self.lines: list[str] = []  # every broker's lines, shared
        self.env: dict[str, str] = {}

    @property
    def seen(self) -> int:
        return sum(b.seen for b in self.nodes.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.nodes.values())

    @property
    def alive(self) -> bool:
        zk = self.zookeeper.proc
        return zk is not None and zk.poll() is None and bool(self.nodes) and all(
            b.alive for node, b in self.nodes.items() if node not in self.killed)

    def start(self, timeout: float = 60) -> KillableCluster:
        self.zookeeper.start()
        connect = self.zookeeper.connect_string + "/headrace"
        for node in range(1, self.count + 1):
            b = BrokerProcess(self.data_dir / f"node{node}", {
                "zookeeper.connect": connect, "node.id": node,
                "zookeeper.session.timeout.ms": self.SESSION_MS,
                "replica.lag.time.max.ms": 4000,
            }, args=["--workers", "1"])
            b.lines = self.lines
            self.nodes[node] = b
            b.start(timeout)
        deadline = time.monotonic() + timeout
        for b in self.nodes.values():
            while len(_brokers_seen(b.port)) < self.count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker on port {b.port} does not see {self.count} "
                                       f"brokers: {_brokers_seen(b.port)}")
                time.sleep(0.1)
        return self

    def hook(self, words: list[str]) -> str:
        """``kill-leader TOPIC PARTITION``: SIGKILL the partition's leader (as a live broker's
        Metadata names it); answers ``killed NODE``. ``restart NODE``: start a killed broker
        again; answers ``restarted NODE`` once it listens."""
        if len(words) == 2 and words[0] == "restart":
            return self.restart(int(words[1]))
        if len(words) != 3 or words[0] != "kill-leader":
            return f"error unknown hook {' '.join(words)}"
        topic, partition = words[1], int(words[2])
        live = [b for node, b in self.nodes.items() if node not in self.killed]
        md = _metadata(live[0].port, topic)
        leaders = [p.leader_id for t in md.topics for p in t.partitions
                   if p.partition_index == partition]
        if not leaders or leaders[0] not in self.nodes or leaders[0] in self.killed:
            return f"error no live leader of {topic}-{partition}: {leaders}"
        node = leaders[0]
        self.killed.add(node)
        self.nodes[node].kill()
        self.lines.append(f"[compat] broker {node}, the leader of {topic}-{partition}, "
                          "killed with SIGKILL")
        return f"killed {node}"

    def restart(self, node: int) -> str:
        if node not in self.killed:
            return f"error broker {node} was not killed"
        self.nodes[node].start()
        self.killed.discard(node)
        self.lines.append(f"[compat] broker {node} started again")
        return f"restarted {node}"

    def stop(self) -> None:
        for b in self.nodes.values():
            b.stop()
        self.zookeeper.stop()


def _ask(port: int, api_key: int, version: int, message):
    """One request to the broker on ``port`` of 127.0.0.1 (PLAINTEXT), its decoded answer."""
    with BlockingConnection.connect("127.0.0.1", port, 10, client_id="compat") as conn:
        return conn.request(api_key, version, message)


def _metadata(port: int, topic: str | None = None):
    topics = [] if topic is None else [messages.MetadataRequest.MetadataRequestTopic(name=topic)]
    return _ask(port, ApiKey.METADATA, 12, messages.MetadataRequest(
        topics=topics, allow_auto_topic_creation=False))


def _brokers_seen(port: int) -> list[int]:
    """The node ids in the Metadata answer of the broker on ``port``."""
    return sorted(b.node_id for b in _metadata(port).brokers)


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
