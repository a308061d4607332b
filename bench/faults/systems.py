"""The two systems under test of the fault scenarios: ZooKeeper + 3 brokers of Headrace, and
ZooKeeper + 3 brokers of Apache Kafka 3.9.2 in ZooKeeper mode (the reference), behind one
interface, so that the same scenario runs against both.

    from bench.faults.systems import HeadraceCluster, KafkaCluster, Placement

    with KafkaCluster("/tmp/ak-faults", Placement.loopback()) as cluster:  # start() ... stop()
        produce(cluster.bootstrap)           # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.kill(2)                      # SIGKILL broker 2
        cluster.start_broker(2)              # same data, same address

Layout (both systems)
---------------------
Four nodes: one ZooKeeper and brokers 1, 2, 3 (``broker.id`` = 1, 2, 3). A ``Placement``
gives each node an IPv4 address to bind and advertise and an argv prefix to launch it with
(e.g. ``["ip", "netns", "exec", "hr-b1"]``: each process in its own network namespace; the
prefix must exec the program, so that ``pid`` is the program's own and SIGSTOP, SIGCONT,
SIGKILL and SIGTERM go straight to it). Ports are fixed per role, ZooKeeper 2181 and brokers
9092, except on a loopback address (127.0.0.1 in development and tests), where every node gets
a free port, chosen once at the first ``start()`` and kept across restarts. A loopback
address means this network namespace.

The harness's own connections (readiness probes: ZooKeeper's session, the brokers' Metadata;
``registered()``, ``controller()``) are made from ``Placement.probe_netns``, a namespace from
which the nodes are reachable (e.g. a client host of bench/faults/net.py, whose hosts are not
reachable from the root namespace), or from this process's namespace when it is None: one
thread of this process enters that namespace (setns) and makes the sockets there
(``NetnsThread``). Readiness of a Headrace broker's listener goes through a file
(``--ready-file``), so the file system must be shared (``ip netns exec`` shares it).

The data directory root, chosen by the caller, holds::

    ROOT/zookeeper/       zoo.cfg, version-2/ (snapshots, transaction log), zookeeper.log
    ROOT/broker-N/data/   the broker's log directory (``log.dirs`` / ``--data-dir``)
    ROOT/broker-N/...     its logs: Headrace ``broker.log`` (stderr, INFO); Kafka
                          ``server.properties``, ``log4j.properties``, ``logs/server.log``
                          (INFO), ``logs/controller.log``, ``logs/state-change.log`` and
                          ``kafka.out`` (stdout/stderr: WARN and up, JVM messages)

ZooKeeper (both systems): one standalone server (ZooKeeper 3.9, Maven Central's jars,
``headrace.broker.tools.zookeeper_server``) with ``tickTime`` 500 ms: ZooKeeper grants sessions of
2 to 20 ticks (so 4 s sessions are allowed) and checks for expired sessions once a tick, so a
killed broker's session ends within half a second of the timeout. ``maxSessionTimeout`` is
raised to the session timeout when that is above 20 ticks (Kafka's old default of 18 s, say).
No chroot: both systems use the same znodes (``/brokers/ids/N``, ``/controller``, ...).

Headrace: ``python -m headrace serve --workers 1`` per broker (one process, so ``pid`` is the
broker's: the default in cluster mode would be a parent with one child per core), with
``broker.id``, ``zookeeper.connect`` and ``listeners=PLAINTEXT://IP:PORT`` (advertised as
given), ``--log-level INFO``. Readiness first through ``--ready-file`` (``BrokerProcess``).

Kafka: ``java ... kafka.Kafka server.properties`` per broker, class path of ``kafka_2.13``
3.9.2 from ``bench/kafka/pom.xml`` (``bench.apache_kafka.classpath``; it includes the
ZooKeeper 3.8 client Kafka needs). ZooKeeper mode is the absence of ``process.roles``:
``broker.id``, ``zookeeper.connect``, ``listeners`` = ``advertised.listeners`` =
``PLAINTEXT://IP:PORT``, ``log.dirs``; nothing to format (the cluster id is created in
ZooKeeper by the first broker). The JVM flags are the start scripts' (``-Xmx1G -Xms1G
-XX:+UseG1GC -XX:MaxGCPauseMillis=20 ...``, ``bench.apache_kafka.BROKER_JVM_FLAGS``); logging
is reload4j configured by a ``log4j.properties`` written into the broker's directory, laid
out like Kafka's stock one (``-Dlog4j.configuration=file:...``, ``-Dkafka.logs.dir``).

Shared settings (``SHARED_SETTINGS``, overridable per cluster with ``settings=``)
----------------------------------------------------------------------------------
Each is given to both systems where the system has the setting (Headrace: a name it knows or
accepts as a no-op Kafka setting; names it does not know are left out and listed in
``cluster.not_applied``). ``extra=`` passes settings to one system unfiltered.

* ``zookeeper.session.timeout.ms`` (the ``session_timeout_ms`` parameter, default 6000): how
  long after a broker stops (kill, pause) the controller notices; failover takes at least
  this, so every failover figure must say which one it used.
* ``min.insync.replicas=2``, ``default.replication.factor=3``: acks=all survives one lost
  broker and refuses writes (NOT_ENOUGH_REPLICAS) when two are gone, the setting under which
  "no acknowledged write is lost" is the property to check.
* ``offsets.topic.replication.factor=3``, ``transaction.state.log.replication.factor=3``,
  ``transaction.state.log.min.isr=2``: the internal topics as durable as the data.
* ``unclean.leader.election.enable=false``: no replica outside the ISR becomes leader (the
  default of both; stated because a scenario may flip it).
* ``auto.create.topics.enable=false``: scenarios create their topics explicitly, with RF=3;
  a typo must not create an RF=1 topic behind the scenario's back.
* ``num.partitions=3``: small, for the two cores of the test machine.
* ``group.initial.rebalance.delay.ms=0``: consumer groups start at once (Kafka's 3 s default
  would add 3 s to every consumer start; tests do not want it).

Defaults the two already share are left alone: ``replica.lag.time.max.ms`` 30 s,
``offsets.topic.num.partitions`` and ``transaction.state.log.num.partitions`` 50,
``controlled.shutdown.enable`` true, ``zookeeper.connection.timeout.ms`` = the session timeout.

Start-up: ``start()`` starts ZooKeeper, then the three brokers at once, and returns when each
broker answers Metadata (v1) listing all three. ``start_broker(id)`` first waits until the
broker's old registration (``/brokers/ids/N``, an ephemeral znode of a killed broker's
session) is gone, since Kafka 3.9 refuses to start while it exists (Headrace waits for it on
its own); then it starts the broker and waits until it and the running brokers list it.

Stopping: ``stop_broker(id)`` is SIGTERM, a controlled shutdown in both systems (a Kafka JVM
exits with 143 after its shutdown hook, Headrace with 0). ``stop()`` SIGTERMs the brokers
other than the controller at once, then the controller, then ZooKeeper. Kafka's last broker
cannot hand its leaderships to anyone, so its controlled shutdown fails three times 5 s apart
(``controlled.shutdown.max.retries``, ``controlled.shutdown.retry.backoff.ms``) before it
shuts down anyway: a clean ``stop()`` of Kafka takes 10-15 s, Headrace's about 1 s;
``stop(clean=False)`` is SIGKILL. An interpreter exit SIGKILLs what a cluster still runs.
"""

from __future__ import annotations

import abc
import atexit
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench.* when this file is loaded by path
    sys.path.insert(0, str(ROOT))

from bench.apache_kafka import BROKER_JVM_FLAGS, KAFKA_VERSION  # noqa: E402
from bench.apache_kafka import classpath as kafka_classpath  # noqa: E402
from headrace.broker.tools.maven import JavaToolMissing, require_tools  # noqa: E402
from headrace.broker.tools.process import BrokerProcess  # noqa: E402
from headrace.broker.tools.zookeeper_server import ZooKeeperServer  # noqa: E402

__all__ = [
    "BROKER_IDS",
    "BROKER_PORT",
    "SHARED_SETTINGS",
    "ZOOKEEPER_PORT",
    "Cluster",
    "HeadraceCluster",
    "JavaToolMissing",
    "KafkaCluster",
    "Node",
    "Placement",
    "NetnsThread",
    "ZooKeeperNode",
    "metadata",
    "proc_state",
    "tools_missing",
]

ZOOKEEPER_PORT = 2181
BROKER_PORT = 9092
BROKER_IDS = (1, 2, 3)
START_TIMEOUT = 60.0  # a Headrace broker's spawn to its ready file (BrokerProcess.start)
TICK_MS = 500  # ZooKeeper's tickTime: sessions of 1 to 10 s granted by default, see the docstring

SHARED_SETTINGS: dict[str, object] = {
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}

# a stock-like reload4j configuration (Kafka 3.x config/log4j.properties), files in
# ${kafka.logs.dir}; WARN and up also on stdout (kafka.out)
KAFKA_LOG4J = """\
log4j.rootLogger=INFO, stdout, kafkaAppender
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Threshold=WARN
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stateChangeAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.stateChangeAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.stateChangeAppender.File=${kafka.logs.dir}/state-change.log
log4j.appender.stateChangeAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.stateChangeAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.controllerAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.controllerAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.controllerAppender.File=${kafka.logs.dir}/controller.log
log4j.appender.controllerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.controllerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=INFO
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN, kafkaAppender
log4j.additivity.kafka.request.logger=false
log4j.logger.kafka.controller=TRACE, controllerAppender
log4j.additivity.kafka.controller=false
log4j.logger.state.change.logger=INFO, stateChangeAppender
log4j.additivity.state.change.logger=false
"""

_log = logging.getLogger("bench.faults.systems")
# kazoo's warnings about probes that fail while a server starts go nowhere
_quiet = logging.getLogger("bench.faults.systems.probe")
_quiet.propagate = False
_quiet.addHandler(logging.NullHandler())


def _say(msg: str) -> None:
    print(f"[systems] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Placement


@dataclass(frozen=True)
class Node:
    """Where one process runs: the IPv4 address it binds and advertises, and the argv prefix
    it is launched with (``()``: this network namespace)."""

    ip: str = "127.0.0.1"
    argv_prefix: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        ipaddress.IPv4Address(self.ip)  # ValueError if not an IPv4 address
        object.__setattr__(self, "argv_prefix", tuple(self.argv_prefix))  # a list is fine too

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.ip).is_loopback

    def port(self, fixed: int) -> int:
        """``fixed`` (the role's port), or a free port now on a loopback address."""
        if not self.loopback:
            return fixed
        with socket.socket() as s:
            s.bind((self.ip, 0))
            return s.getsockname()[1]


@dataclass(frozen=True)
class Placement:
    """The four nodes of a cluster: ZooKeeper and brokers 1, 2, 3 (``brokers[id - 1]``)."""

    zookeeper: Node = field(default_factory=Node)
    brokers: tuple[Node, Node, Node] = field(default_factory=lambda: (Node(), Node(), Node()))
    # the network namespace (a name ``ip netns`` lists, or a path such as /proc/PID/ns/net)
    # from which this process reaches the nodes for its own checks; None: its own namespace
    probe_netns: str | None = None

    def __post_init__(self) -> None:
        if len(self.brokers) != len(BROKER_IDS):
            raise ValueError(f"a placement has {len(BROKER_IDS)} brokers")
        object.__setattr__(self, "brokers", tuple(self.brokers))

    @classmethod
    def loopback(cls) -> Placement:
        """Everything on 127.0.0.1 in this namespace, free ports (development and tests)."""
        return cls()

    @classmethod
    def of(
        cls,
        zookeeper: tuple[str, Sequence[str]],
        brokers: Sequence[tuple[str, Sequence[str]]],
        probe_netns: str | None = None,
    ) -> Placement:
        """From plain ``(ip, argv_prefix)`` pairs: ZooKeeper's, then brokers 1..3."""
        nodes = tuple(Node(ip, tuple(prefix)) for ip, prefix in brokers)
        return cls(
            Node(zookeeper[0], tuple(zookeeper[1])),
            nodes,  # type: ignore[arg-type]
            probe_netns,
        )

    def broker(self, broker_id: int) -> Node:
        return self.brokers[broker_id - 1]


# --------------------------------------------------------------------------------------------
# Processes


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class NetnsThread:
    """One thread that has entered a network namespace, to make sockets there: a socket
    belongs to the namespace of the thread that created it and is then usable from any thread.
    ``call(fn, *args)`` runs ``fn`` on that thread. ``netns=None``: no thread, ``call`` runs
    ``fn`` directly. (setns(2) with CLONE_NEWNET changes the calling thread only; needs
    CAP_SYS_ADMIN.)"""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self._pool: ThreadPoolExecutor | None = None
        if netns is not None:
            path = netns if netns.startswith("/") else f"/var/run/netns/{netns}"
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{Path(path).name}")
            self._pool.submit(self._enter, path).result()

    @staticmethod
    def _enter(path: str) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                err = ctypes.get_errno()
                raise OSError(err, f"setns({path}): {os.strerror(err)}")
        finally:
            os.close(fd)

    def call(self, fn, *args, **kwargs):
        if self._pool is None:
            return fn(*args, **kwargs)
        return self._pool.submit(fn, *args, **kwargs).result()

    def connect(self, address: tuple[str, int], timeout: float) -> socket.socket:
        """A TCP connection made in the namespace."""
        return self.call(socket.create_connection, address, timeout)

    def kazoo(self, hosts: str, **kwargs):
        """A KazooClient whose connections are made in the namespace."""
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import SequentialThreadingHandler

        if self._pool is None:
            return KazooClient(hosts, **kwargs)
        runner = self

        class Handler(SequentialThreadingHandler):
            def create_connection(self, *args, **kw):
                parent = super().create_connection
                return runner.call(parent, *args, **kw)

        return KazooClient(hosts, handler=Handler(), **kwargs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


_HERE = NetnsThread(None)


def metadata(
    address: str, timeout: float = 2.0, via: NetnsThread = _HERE
) -> tuple[list[tuple[int, str, int]], int]:
    """The brokers the broker at ``host:port`` lists, as (id, host, port), and the controller
    it names (-1: none known), from a Metadata answer without topics."""
    from .workload import metadata as ask

    host, port = address.rsplit(":", 1)
    md = ask(via.connect, host, int(port), [], timeout)
    return [(b.node_id, b.host, b.port) for b in md.brokers], md.controller_id


def proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (R, S, D, T stopped, Z zombie); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _await_state(pid: int, stopped: bool, timeout: float = 5.0) -> None:
    """Wait until ``pid`` is stopped (or running again): a signal takes effect a moment
    after ``kill`` returns, once every thread of the process has seen it."""
    deadline = time.monotonic() + timeout
    while True:
        state = proc_state(pid)
        if state is None or (state in ("T", "t")) == stopped:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} still in state {state} {timeout} s after the signal")
        time.sleep(0.001)


def _tail(path: Path, lines: int) -> list[str]:
    if not path.exists():
        return []
    with open(path, "rb") as f:  # the end of a possibly large file
        f.seek(0, os.SEEK_END)
        start = max(0, f.tell() - 400 * lines)
        f.seek(start)
        text = f.read().decode(errors="replace").splitlines()
    return text[1 if start else 0 :][-lines:]  # not a line cut by the seek


class _ZooKeeperServer(ZooKeeperServer):
    """``ZooKeeperServer`` whose readiness probe connects from ``via``'s namespace."""

    def __init__(self, *args, via: NetnsThread, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.via = via

    def _probe_client(self):
        return self.via.kazoo(self.connect_string, timeout=0.5, logger=_quiet)


class ZooKeeperNode:
    """The ensemble of a cluster: one standalone ZooKeeper server on ``node``. ``via``: where
    this process's own connections to it are made from (``Placement.probe_netns``)."""

    def __init__(
        self, data_dir: Path, node: Node, session_timeout_ms: int, via: NetnsThread = _HERE
    ) -> None:
        self.node = node
        self.data_dir = Path(data_dir)
        self.via = via
        self.server: ZooKeeperServer | None = None
        self.session_timeout_ms = session_timeout_ms
        self.tick_ms = min(TICK_MS, session_timeout_ms // 2)
        self.settings = {"maxSessionTimeout": max(20 * self.tick_ms, session_timeout_ms)}

    def start(self, timeout: float = 60) -> ZooKeeperNode:
        if self.server is None:  # the port is chosen once and kept
            self.server = _ZooKeeperServer(
                self.data_dir,
                port=self.node.port(ZOOKEEPER_PORT),
                tick_ms=self.tick_ms,
                host=self.node.ip,
                argv_prefix=list(self.node.argv_prefix),
                settings=self.settings,
                via=self.via,
            )
        self.server.start(timeout)
        return self

    @property
    def connect(self) -> str:
        """``ip:port`` for ``zookeeper.connect``."""
        assert self.server is not None, "not started"
        return self.server.connect_string

    @property
    def pid(self) -> int | None:
        return None if self.server is None else self.server.pid

    @property
    def alive(self) -> bool:
        s = self.server
        return s is not None and s.proc is not None and s.proc.poll() is None

    def stop(self, timeout: float = 10) -> None:
        if self.server is not None:
            self.server.stop(timeout)

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    def registered(self, timeout: float = 10) -> set[int]:
        """The broker ids registered now (``/brokers/ids``)."""
        client = self.via.kazoo(self.connect, timeout=5.0, logger=_quiet)
        client.start(timeout=timeout)
        try:
            if not client.exists("/brokers/ids"):
                return set()
            return {int(c) for c in client.get_children("/brokers/ids")}
        finally:
            client.stop()
            client.close()

    def log_tail(self, lines: int = 50) -> str:
        return "\n".join(_tail(self.data_dir / "zookeeper.log", lines))


class _Broker(abc.ABC):
    """One broker process of a cluster; the subclasses launch it."""

    def __init__(self, broker_id: int, node: Node, directory: Path, port: int) -> None:
        self.id = broker_id
        self.node = node
        self.dir = directory
        self.port = port
        self.paused = False

    @property
    def address(self) -> str:
        return f"{self.node.ip}:{self.port}"

    # the system's part
    @abc.abstractmethod
    def spawn(self, connect: str) -> None:
        """Start the process (``connect``: zookeeper.connect), without waiting."""

    @abc.abstractmethod
    def await_spawn(self, timeout: float) -> None:
        """Wait for the process's own sign of life, if it has one (raises if it failed)."""

    @property
    @abc.abstractmethod
    def proc(self) -> subprocess.Popen | None:
        """The running process, None when there is none."""

    @abc.abstractmethod
    def log_tail(self, lines: int = 50) -> str: ...

    @abc.abstractmethod
    def forget(self) -> None:
        """Drop the process (it has exited and been waited for)."""

    @property
    def pid(self) -> int | None:
        p = self.proc
        return None if p is None else p.pid

    @property
    def alive(self) -> bool:
        p = self.proc
        return p is not None and p.poll() is None

    def signal(self, sig: int) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            raise RuntimeError(f"broker {self.id} is not running")
        _signal(p.pid, sig)

    def kill(self) -> None:
        p = self.proc
        if p is not None:
            _signal(p.pid, signal.SIGKILL)
            p.wait()
        self.paused = False
        self.forget()

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM (and SIGCONT if paused: the signal waits for it), wait; SIGKILL after
        ``timeout`` s. The exit code (negative: a signal)."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            _signal(p.pid, signal.SIGTERM)
            if self.paused:
                _signal(p.pid, signal.SIGCONT)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                _say(f"broker {self.id} still running {timeout} s after SIGTERM: SIGKILL")
                _signal(p.pid, signal.SIGKILL)
                p.wait()
        self.paused = False
        code = p.returncode
        self.forget()
        return code


class _HeadraceBroker(_Broker):
    def __init__(
        self,
        broker_id: int,
        node: Node,
        directory: Path,
        port: int,
        settings: Mapping[str, object],
        log_level: str,
    ) -> None:
        super().__init__(broker_id, node, directory, port)
        self.settings = dict(settings)
        self.log_level = log_level
        self.process: BrokerProcess | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        return None if self.process is None else self.process.proc

    def spawn(self, connect: str) -> None:
        overrides = {
            **self.settings,
            "broker.id": self.id,
            "zookeeper.connect": connect,
            "listeners": f"PLAINTEXT://{self.address}",
        }
        if self.process is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.process = BrokerProcess(
                self.dir / "data",
                overrides,
                args=["--workers", "1", "--log-level", self.log_level],
                port=self.port,
                log_file=self.dir / "broker.log",
                host=self.node.ip,
                argv_prefix=list(self.node.argv_prefix),
            )
        else:
            self.process.overrides = overrides
        self._error = None

        def run(process: BrokerProcess) -> None:
            try:
                process.start(timeout=START_TIMEOUT)
            except BaseException as e:  # reported by await_spawn
                self._error = e

        # BrokerProcess.start blocks until the ready file: in a thread, so brokers start at once
        self._thread = threading.Thread(target=run, args=(self.process,), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while self.process.proc is None and self._thread.is_alive():  # the Popen is made
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)

    def await_spawn(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"headrace broker {self.id} not listening after {timeout} s")
            self._thread = None
        if self._error is not None:
            raise RuntimeError(f"headrace broker {self.id}: {self._error}")

    def forget(self) -> None:
        if self.process is not None:
            self.process.proc = None

    def log_tail(self, lines: int = 50) -> str:
        return "\n".join(_tail(self.dir / "broker.log", lines))


class _KafkaBroker(_Broker):
    def __init__(
        self,
        broker_id: int,
        node: Node,
        directory: Path,
        port: int,
        settings: Mapping[str, object],
        version: str,
    ) -> None:
        super().__init__(broker_id, node, directory, port)
        self.settings = dict(settings)
        self.version = version
        self._proc: subprocess.Popen | None = None
        self._out: IO[bytes] | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        return self._proc

    def write_files(self, connect: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        props = {
            "broker.id": self.id,
            "zookeeper.connect": connect,
            "listeners": f"PLAINTEXT://{self.address}",
            "advertised.listeners": f"PLAINTEXT://{self.address}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": self.dir / "data",
            **self.settings,
        }
        path = self.dir / "server.properties"
        path.write_text(
            f"# Apache Kafka {self.version}, ZooKeeper mode, written by bench/faults/systems.py\n"
            + "".join(f"{k}={v}\n" for k, v in props.items())
        )
        (self.dir / "log4j.properties").write_text(KAFKA_LOG4J)
        return path

    def spawn(self, connect: str) -> None:
        properties = self.write_files(connect)
        cmd = [
            *self.node.argv_prefix,
            "java",
            *BROKER_JVM_FLAGS,
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self.dir / 'logs'}",
            "-cp",
            kafka_classpath(self.version),
            "kafka.Kafka",
            str(properties),
        ]
        self._out = open(self.dir / "kafka.out", "ab")
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT
        )

    def await_spawn(self, timeout: float) -> None:
        return None  # readiness is Metadata's (Cluster)

    def forget(self) -> None:
        self._proc = None
        if self._out is not None:
            self._out.close()
            self._out = None

    def log_tail(self, lines: int = 50) -> str:
        out = [
            f"--- {self.dir / 'kafka.out'}",
            *_tail(self.dir / "kafka.out", lines),
            f"--- {self.dir / 'logs' / 'server.log'}",
            *_tail(self.dir / "logs" / "server.log", lines),
        ]
        return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Clusters

_LIVE: set[Cluster] = set()  # started and not stopped


@atexit.register
def _kill_leftovers() -> None:
    """At interpreter exit, SIGKILL whatever a cluster that was not stopped still runs."""
    for cluster in list(_LIVE):
        try:
            cluster.stop(clean=False)
        except Exception:
            pass


class Cluster:
    """ZooKeeper and brokers 1, 2, 3 of one system; ``HeadraceCluster`` or ``KafkaCluster``.

    ``root``: the data directory root (created; reused as it is, so a second cluster on the
    same root starts from the first one's data). ``settings``: replaces ``SHARED_SETTINGS``
    (pass ``{**SHARED_SETTINGS, ...}`` to change a few); ``session_timeout_ms``:
    ``zookeeper.session.timeout.ms``; ``extra``: settings for this system only, unfiltered.
    """

    name = "cluster"

    def __init__(
        self,
        root: str | os.PathLike[str],
        placement: Placement | None = None,
        *,
        settings: Mapping[str, object] | None = None,
        session_timeout_ms: int = 6000,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.placement = placement or Placement.loopback()
        self.session_timeout_ms = session_timeout_ms
        shared = {
            **(SHARED_SETTINGS if settings is None else settings),
            "zookeeper.session.timeout.ms": session_timeout_ms,
        }
        self.settings = {k: v for k, v in shared.items() if self.has_setting(k)}
        self.not_applied = sorted(k for k in shared if k not in self.settings)
        self.settings.update(extra or {})
        self.via = _HERE  # where this process connects from (Placement.probe_netns), at start
        self.zookeeper = ZooKeeperNode(
            self.root / "zookeeper", self.placement.zookeeper, session_timeout_ms
        )
        self._brokers: dict[int, _Broker] = {}
        self.start_seconds: float | None = None  # how long the last start() took

    # the system's part --------------------------------------------------------------------
    def has_setting(self, name: str) -> bool:
        return True

    def _make_broker(self, broker_id: int, node: Node, directory: Path, port: int) -> _Broker:
        raise NotImplementedError

    def _check_tools(self) -> None:
        require_tools("java", "mvn", purpose=f"{self.name} (ZooKeeper)")

    # addresses ---------------------------------------------------------------------------
    @property
    def ids(self) -> tuple[int, ...]:
        return BROKER_IDS

    @property
    def bootstrap(self) -> str:
        """``ip:port`` of every broker, comma-separated (after the first ``start``)."""
        return ",".join(self.address(i) for i in self.ids)

    def address(self, broker_id: int) -> str:
        return self._broker(broker_id).address

    def pid(self, broker_id: int) -> int | None:
        """The broker's process id, None while it is not running."""
        return self._broker(broker_id).pid

    @property
    def pids(self) -> dict[int, int | None]:
        return {i: self.pid(i) for i in self.ids}

    def alive(self, broker_id: int) -> bool:
        """The process exists (a paused one too)."""
        return self._broker(broker_id).alive

    def data_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}" / "data"

    def _broker(self, broker_id: int) -> _Broker:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} (started? ids are {self.ids})") from None

    # life cycle -------------------------------------------------------------------------
    def start(self, timeout: float = 120, wait: bool = True) -> Cluster:
        """ZooKeeper, then the three brokers at once; returns when every broker answers
        Metadata listing all three (``wait=False``: once they are spawned, still starting).
        On failure everything started is killed."""
        self._check_tools()
        t0 = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        _LIVE.add(self)
        try:
            if self.via.netns != self.placement.probe_netns:
                self.via = self.zookeeper.via = NetnsThread(self.placement.probe_netns)
            self.zookeeper.start()
            for i in self.ids:
                if i not in self._brokers:
                    node = self.placement.broker(i)
                    self._brokers[i] = self._make_broker(
                        i, node, self.root / f"broker-{i}", node.port(BROKER_PORT)
                    )
            if wait:
                self._spawn_and_wait(list(self.ids), t0 + timeout)
            else:
                for i in self.ids:
                    self._brokers[i].spawn(self.zookeeper.connect)
        except BaseException:
            self.stop(clean=False)
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _spawn_and_wait(self, ids: list[int], deadline: float) -> None:
        for i in ids:
            self._brokers[i].spawn(self.zookeeper.connect)
        for i in ids:
            self._brokers[i].await_spawn(max(1.0, deadline - time.monotonic()))
        self.wait_ready(deadline - time.monotonic(), ids)

    def wait_ready(self, timeout: float = 60, ids: Sequence[int] | None = None) -> None:
        """Wait until each broker of ``ids`` (default: all running, not paused) answers
        Metadata listing all three brokers."""
        want = set(self.ids)
        deadline = time.monotonic() + timeout
        pending = set(
            ids
            if ids is not None
            else [i for i in self.ids if self.alive(i) and not self._broker(i).paused]
        )
        seen: dict[int, object] = {}
        while pending:
            for i in sorted(pending):
                b = self._broker(i)
                p = b.proc
                if p is None or p.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} broker {i} exited"
                        f" ({None if p is None else p.returncode}):\n{b.log_tail(40)}"
                    )
                try:
                    listed, _controller = metadata(b.address, via=self.via)
                except (OSError, ValueError) as e:  # (refused, reset; a cut answer)
                    seen[i] = e
                    continue
                seen[i] = sorted(listed)
                if {node_id for node_id, _h, _p in listed} >= want:
                    pending.discard(i)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: brokers {sorted(pending)} do not list all of {sorted(want)}"
                    f" after {timeout:.0f} s (last answers {seen}):\n"
                    + "\n".join(self._broker(i).log_tail(30) for i in sorted(pending))
                )
            time.sleep(0.2)

    def stop(self, clean: bool = True, timeout: float = 30) -> None:
        """Everything, ZooKeeper too. ``clean``: SIGTERM to the brokers other than the
        controller at once, then to the controller (a broker whose controlled shutdown meets a
        controller that is going away retries after 5 s: Kafka's
        ``controlled.shutdown.retry.backoff.ms``); a paused broker is resumed to receive it;
        SIGKILL after ``timeout`` s. Else SIGKILL."""
        if clean:
            controller = self.controller() if self._brokers else None
            others = [i for i in self._brokers if i != controller]
            threads = [
                threading.Thread(target=self._brokers[i].terminate, args=(timeout,), daemon=True)
                for i in others
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if controller in self._brokers:
                self._brokers[controller].terminate(timeout)
        for b in self._brokers.values():  # SIGKILL, or what a clean stop left
            b.kill()
        if clean:
            self.zookeeper.stop()
        else:
            self.zookeeper.kill()
        _LIVE.discard(self)

    def controller(self) -> int | None:
        """The controller's broker id, as the first running broker that answers says."""
        for b in self._brokers.values():
            if b.alive and not b.paused:
                try:
                    _listed, controller = metadata(b.address, via=self.via)
                except (OSError, ValueError):
                    continue
                if controller >= 0:
                    return controller
        return None

    def processes(self) -> dict[str, int]:
        """Every process of this cluster still running: name -> pid."""
        out = {f"broker-{i}": b.pid for i, b in self._brokers.items() if b.alive}
        if self.zookeeper.alive:
            out["zookeeper"] = self.zookeeper.pid
        return out  # type: ignore[return-value]

    # faults -----------------------------------------------------------------------------
    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker and reap it (a paused one too)."""
        self._broker(broker_id).kill()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP, and wait until the process is stopped (/proc state T). It keeps its
        sockets, and its ZooKeeper session until the session times out."""
        b = self._broker(broker_id)
        b.signal(signal.SIGSTOP)
        b.paused = True
        _await_state(b.pid, stopped=True)  # type: ignore[arg-type]

    def resume(self, broker_id: int) -> None:
        """SIGCONT, and wait until the process runs again."""
        b = self._broker(broker_id)
        b.signal(signal.SIGCONT)
        b.paused = False
        _await_state(b.pid, stopped=False)  # type: ignore[arg-type]

    def stop_broker(self, broker_id: int, timeout: float = 60) -> int | None:
        """SIGTERM, the clean shutdown (Kafka's and Headrace's controlled shutdown: leaderships
        handed over first); waits for the exit (SIGKILL after ``timeout`` s). The exit code."""
        return self._broker(broker_id).terminate(timeout)

    def start_broker(self, broker_id: int, timeout: float = 90) -> None:
        """Start a stopped or killed broker again: same data directory, same address. Waits
        until its old registration has gone (see the module docstring), then until it and
        every other running broker list all three brokers."""
        b = self._broker(broker_id)
        if b.alive:
            raise RuntimeError(f"{self.name} broker {broker_id} is running")
        deadline = time.monotonic() + timeout
        self.wait_unregistered(broker_id, timeout=self.session_timeout_ms / 1000 + 10)
        self._spawn_and_wait([broker_id], deadline)
        self.wait_ready(max(1.0, deadline - time.monotonic()))

    def wait_unregistered(self, broker_id: int, timeout: float) -> float:
        """Wait until ``/brokers/ids/<id>`` is gone; the seconds waited."""
        t0 = time.monotonic()
        while broker_id in self.zookeeper.registered():
            if time.monotonic() > t0 + timeout:
                raise TimeoutError(f"broker {broker_id} still registered after {timeout} s")
            time.sleep(0.1)
        return time.monotonic() - t0

    def kill_all(self) -> None:
        """SIGKILL every broker (ZooKeeper keeps running)."""
        for b in self._brokers.values():
            b.kill()

    def start_all(self, timeout: float = 120) -> None:
        """Start every broker that is not running, at once; returns when all three answer
        Metadata listing all three."""
        deadline = time.monotonic() + timeout
        down = [i for i in self.ids if not self.alive(i)]
        for i in down:
            self.wait_unregistered(i, timeout=self.session_timeout_ms / 1000 + 10)
        self._spawn_and_wait(down, deadline)
        self.wait_ready(max(1.0, deadline - time.monotonic()))

    def log_tail(self, broker_id: int, lines: int = 50) -> str:
        """The last lines of the broker's log (Kafka: kafka.out and logs/server.log)."""
        return self._broker(broker_id).log_tail(lines)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)


class HeadraceCluster(Cluster):
    """ZooKeeper + 3 Headrace brokers (``python -m headrace serve --workers 1``)."""

    name = "headrace"

    def __init__(
        self,
        root: str | os.PathLike[str],
        placement: Placement | None = None,
        *,
        log_level: str = "INFO",
        **kwargs,
    ) -> None:
        self.log_level = log_level
        super().__init__(root, placement, **kwargs)

    def has_setting(self, name: str) -> bool:
        from headrace.broker.config.kafka_settings import IGNORED
        from headrace.broker.config.settings import BROKER_SETTINGS

        return name in BROKER_SETTINGS or name in IGNORED

    def _check_tools(self) -> None:
        require_tools("java", "mvn", purpose="Headrace's cluster (ZooKeeper)")

    def _make_broker(self, broker_id: int, node: Node, directory: Path, port: int) -> _Broker:
        return _HeadraceBroker(broker_id, node, directory, port, self.settings, self.log_level)


class KafkaCluster(Cluster):
    """ZooKeeper + 3 Apache Kafka brokers (``kafka.Kafka``) in ZooKeeper mode."""

    name = "kafka"

    def __init__(
        self,
        root: str | os.PathLike[str],
        placement: Placement | None = None,
        *,
        version: str = KAFKA_VERSION,
        **kwargs,
    ) -> None:
        if not version.startswith("3."):
            raise ValueError("ZooKeeper mode needs Kafka 3.x (4.0 removed it)")
        self.version = version
        super().__init__(root, placement, **kwargs)

    def _check_tools(self) -> None:
        require_tools("java", "mvn", purpose="Apache Kafka")

    def start(self, timeout: float = 180, wait: bool = True) -> Cluster:
        self._check_tools()
        kafka_classpath(self.version)  # resolved (and cached) before the clock matters
        return super().start(timeout, wait)

    def _make_broker(self, broker_id: int, node: Node, directory: Path, port: int) -> _Broker:
        return _KafkaBroker(broker_id, node, directory, port, self.settings, self.version)


def tools_missing() -> str | None:
    """Why the clusters cannot run here (``java`` or ``mvn`` missing), or None."""
    missing = [t for t in ("java", "mvn") if shutil.which(t) is None]
    return f"needs {' and '.join(missing)} on PATH" if missing else None
