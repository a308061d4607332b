"""A standalone Apache ZooKeeper server, run the way its users run it: jars from Maven Central.

    from headrace.broker.tools.zookeeper_server import ZooKeeperServer

    with ZooKeeperServer("/tmp/zk") as zk:       # a free port on 127.0.0.1 unless one is given
        KazooClient(zk.connect_string).start()    # "127.0.0.1:<port>"

or from a shell: ``headrace zookeeper [--port 2181] [--data-dir DIR]`` (runs in the foreground).

How this works: the class path of ``org.apache.zookeeper:zookeeper`` is resolved once with
Maven (``maven.py``, cached in ``~/.cache/headrace``) together with three jars the server
needs but its pom declares ``provided`` (so Maven leaves them out): metrics-core (without
it: ClassNotFoundException com.codahale.metrics.Reservoir at start), snappy-java (without it the
server's main thread dies on NoClassDefFoundError org/xerial/snappy/SnappyInputStream while the
client port stays open, so clients hang in CONNECTING) and slf4j-simple (the log). Then
``java ... ZooKeeperServerMain zoo.cfg`` starts it in about a second. ``zoo.cfg`` is written
into the data directory: the snapshots and transaction logs are kept there too (``version-2/``),
the server's log goes to ``zookeeper.log``.

Ready means a real ZooKeeper request succeeded (a session is opened and ``/`` is listed), never
just an open port: the port accepts connections before the server serves them.

Only ``host`` is bound (``clientPortAddress``), the admin HTTP server is off, and the
``srvr``, ``ruok`` and ``mntr`` four-letter words are enabled. The JVM is kept small
(``JVM_FLAGS``): a 256 MB heap cap starting at 16 MB, the serial collector (no parallel GC
threads), the C1 compiler only and a smaller code cache and thread stacks. Measured on a busy
2-core machine: ready 0.4 to 1.2 s after the spawn (class path cached), 55 MB resident idle and
65 to 85 MB with 20 sessions and 1000 nodes (the JVM's defaults: 65 MB and 115 to 120 MB). The
first resolution takes about 6 s with an empty ``~/.m2`` (339 files, Maven's plugins included),
3.5 s when only the class path file is missing.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from .maven import JavaToolMissing, pom_classpath, require_tools
from .process import terminate

ZOOKEEPER_VERSION = "3.9.5"
HOST = "127.0.0.1"
JVM_FLAGS = [
    "-Xmx256m",
    "-Xms16m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=32m",
    "-Xss512k",
    "-Djava.awt.headless=true",
]
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

__all__ = ["ZOOKEEPER_VERSION", "JavaToolMissing", "ZooKeeperServer", "classpath"]

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.headrace</groupId>
  <artifactId>zookeeper-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.zookeeper</groupId>
      <artifactId>zookeeper</artifactId>
      <version>{version}</version>
    </dependency>
    <!-- declared "provided" by zookeeper's pom, needed by the server -->
    <dependency>
      <groupId>io.dropwizard.metrics</groupId>
      <artifactId>metrics-core</artifactId>
      <version>4.1.12.1</version>
    </dependency>
    <dependency>
      <groupId>org.xerial.snappy</groupId>
      <artifactId>snappy-java</artifactId>
      <version>1.1.10.5</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>2.0.13</version>
    </dependency>
  </dependencies>
</project>
"""


def classpath(version: str = ZOOKEEPER_VERSION, refresh: bool = False) -> str:
    """The class path of ZooKeeper ``version`` and the jars its server needs (cached)."""
    return pom_classpath(f"zookeeper-{version}", _POM.format(version=version), refresh)


# the readiness probe's failed attempts are expected: kazoo's warnings about them go nowhere
_PROBE_LOG = logging.getLogger("headrace.zookeeper.probe")
_PROBE_LOG.propagate = False
_PROBE_LOG.addHandler(logging.NullHandler())


def _free_port(host: str = HOST) -> int:
    """A port free on ``host`` now (ZooKeeper binds it a moment later: a small race)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """One standalone ZooKeeper server process on 127.0.0.1.

    ``port=0`` picks a free port at the first start; a restart keeps the port and the data.
    ``tick_ms`` is ZooKeeper's tickTime: sessions may ask for timeouts from 2 to 20 ticks.
    ``log_file``: where the server's log goes (default ``DATA_DIR/zookeeper.log``; "-" keeps it
    on this process's stderr). ``host``: the address to bind (``clientPortAddress``) and to
    connect to (default 127.0.0.1); ``argv_prefix``: put before ``java`` on the command line,
    e.g. ``["ip", "netns", "exec", "zk"]`` (a prefix that execs keeps ``pid`` the server's);
    ``settings``: more ``zoo.cfg`` lines (e.g. ``{"maxSessionTimeout": 60000}``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        tick_ms: int = 2000,
        version: str = ZOOKEEPER_VERSION,
        jvm_flags: list[str] | None = None,
        log_file: str | os.PathLike[str] | None = None,
        *,
        host: str = HOST,
        argv_prefix: list[str] | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.argv_prefix = list(argv_prefix or [])
        self.settings = dict(settings or {})
        self.port = port
        self.tick_ms = tick_ms
        self.version = version
        self.jvm_flags = list(JVM_FLAGS if jvm_flags is None else jvm_flags)
        self.log_file = self.data_dir / "zookeeper.log" if log_file is None else log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def write_config(self) -> Path:
        cfg = self.data_dir / "zoo.cfg"
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            "maxClientCnxns=0",
            *(f"{key}={value}" for key, value in self.settings.items()),
        ]
        cfg.write_text("".join(line + "\n" for line in lines))
        return cfg

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start the server and return once it serves requests."""
        if self.proc is not None:
            raise RuntimeError("ZooKeeper is already running")
        require_tools("java", purpose="ZooKeeper")
        cp = classpath(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            self.port = _free_port(self.host)
        cfg = self.write_config()
        cmd = [
            *self.argv_prefix,
            "java",
            *self.jvm_flags,
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
            "-cp",
            cp,
            MAIN_CLASS,
            str(cfg),
        ]
        out: IO[bytes] | None = None
        if str(self.log_file) != "-":
            out = self._log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _probe_client(self):
        """The client ``wait_ready`` tries with: a short session timeout, as kazoo waits that
        long for an answer to its connect request, and a server that accepts connections may
        not answer yet."""
        from kazoo.client import KazooClient

        return KazooClient(self.connect_string, timeout=0.5, logger=_PROBE_LOG)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until a session opens and ``/`` can be listed (the process must stay alive)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(f"ZooKeeper exited with {code}:\n{self.tail()}")
            client = self._probe_client()
            try:
                client.start(timeout=1.0)
                client.get_children("/")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"ZooKeeper not ready after {timeout}s:\n{self.tail()}"
                    ) from None
                time.sleep(0.05)
            finally:
                client.stop()
                client.close()

    def tail(self, lines: int = 30) -> str:
        log = Path(self.log_file)
        if str(self.log_file) == "-" or not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (SIGKILL after ``timeout`` seconds)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: the unclean end (the data on disk is what was synced)."""
        self._end(signal.SIGKILL, 10.0)

    def restart(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Stop and start again on the same port with the same data directory."""
        self.stop()
        return self.start(timeout)

    def _end(self, sig: int, timeout: float) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc, timeout, sig)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_foreground(port: int = 2181, data_dir: str = "zookeeper-data") -> int:
    """``headrace zookeeper``: one server, its log on stderr, until Ctrl-C or SIGTERM."""
    zk = ZooKeeperServer(data_dir, port=port, log_file="-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        try:
            zk.start()
        except (RuntimeError, TimeoutError) as e:  # JavaToolMissing is a RuntimeError
            print(f"headrace: {e}", file=sys.stderr)
            return 3
        print(
            f"ZooKeeper {zk.version} ready on {zk.connect_string}, data in {zk.data_dir}",
            file=sys.stderr,
            flush=True,
        )
        assert zk.proc is not None
        return zk.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        zk.stop()
