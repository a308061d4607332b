"""Run Apache Kafka (broker and tools) straight from Maven Central.

No tarball: Maven resolves ``org.apache.kafka:kafka_2.13`` (broker), ``kafka-tools``,
``kafka-clients`` and the reload4j logging backend from ``bench/kafka/pom.xml`` once, and the
resulting class path is cached in ``~/.cache/headrace/`` (``$HEADRACE_CACHE`` overrides it).
Everything listens on 127.0.0.1 only. The Maven resolution is ``headrace.broker.tools.maven``'s.

Library use::

    from bench.apache_kafka import ApacheKafka, run_tool
    with ApacheKafka("/tmp/ak", port=9192) as kafka:      # formats, starts, waits for Metadata
        print(kafka.bootstrap)                            # "127.0.0.1:9192"
        out = run_tool("org.apache.kafka.tools.ProducerPerformance",
                       ["--topic", "t", "--num-records", "1000", "--record-size", "100",
                        "--throughput", "-1", "--producer-props",
                        f"bootstrap.servers={kafka.bootstrap}"])
        print(parse_producer_performance(out))

Command line::

    python bench/apache_kafka.py classpath                      # resolve (and cache) only
    python bench/apache_kafka.py start --port 9192 --data-dir DIR [--advertised-port P]
    python bench/apache_kafka.py stop --data-dir DIR
    python bench/apache_kafka.py tool org.apache.kafka.tools.ProducerPerformance -- ARGS...

``start`` leaves the broker running in the background (pid in ``DIR/kafka.pid``, broker log in
``DIR/logs/server.log``, console output in ``DIR/kafka.out``); ``stop`` ends it (SIGTERM, then
SIGKILL after a grace period).

With ``advertised_port`` different from ``port`` the broker advertises
``PLAINTEXT://127.0.0.1:<advertised_port>`` (e.g. a recording proxy in front of it) and keeps
its own inter-broker traffic on a separate INTERNAL listener (``internal_port``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import socket
import string
import subprocess
import sys
import time
from pathlib import Path

from headrace.broker.client.blocking import BlockingConnection
from headrace.broker.tools.maven import CACHE_DIR, build_classpath, cached_classpath
from headrace.protocol import ApiKey, messages

KAFKA_VERSION = "3.9.2"
KAFKA4_VERSION = "4.0.2"  # also works: pass version=KAFKA4_VERSION (log4j2 instead of reload4j)
HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent
POM_DIR = HERE / "kafka"

# The heap and GC flags Kafka's own start scripts use.
BROKER_JVM_FLAGS = [
    "-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
]
TOOL_JVM_FLAGS = ["-Xmx512M", "-Djava.awt.headless=true"]


def _log(msg: str) -> None:
    print(f"[apache_kafka] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Class path resolution


def classpath(version: str = KAFKA_VERSION, refresh: bool = False) -> str:
    """Return the class path of Apache Kafka ``version``, resolving it with Maven if needed.

    The result is cached in ``CACHE_DIR/kafka-<version>-<pom hash>.classpath``; a cached file is
    reused only while every jar it names still exists.
    """
    pom = POM_DIR / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cp_file = CACHE_DIR / f"kafka-{version}-{digest}.classpath"
    cp = None if refresh else cached_classpath(cp_file)
    if cp is not None:
        return cp
    profile = "log4j2" if _major(version) >= 4 else "log4j1"
    build_classpath(POM_DIR, cp_file, [f"-Dkafka.version={version}", f"-P{profile}"])
    return cp_file.read_text().strip()


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def log_flags(version: str, tool: bool) -> list[str]:
    """JVM flags selecting the logging configuration (reload4j for 3.x, log4j2 for 4.x)."""
    prefix = "tools-" if tool else ""
    if _major(version) >= 4:
        return [f"-Dlog4j2.configurationFile={POM_DIR / (prefix + 'log4j2.properties')}"]
    return [f"-Dlog4j.configuration=file:{POM_DIR / (prefix + 'log4j.properties')}"]


# --------------------------------------------------------------------------------------------
# Wire checks (a tiny Metadata v1 round trip)


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[tuple[int, str, int]]:
    """Send Metadata v1 (all topics) and return the advertised brokers as (id, host, port)."""
    with BlockingConnection.connect(host, port, timeout, client_id="headrace-bench") as conn:
        answer = conn.request(ApiKey.METADATA, 1, messages.MetadataRequest(topics=None))
    return [(b.node_id, b.host, b.port) for b in answer.brokers]


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# Broker


class ApacheKafka:
    """One single-node KRaft Apache Kafka process on 127.0.0.1."""

    def __init__(self, data_dir: str | os.PathLike, port: int = 9192,
                 controller_port: int | None = None, advertised_port: int | None = None,
                 internal_port: int | None = None, version: str = KAFKA_VERSION,
                 jvm_flags: list[str] | None = None,
                 properties: dict[str, object] | None = None,
                 offsets_partitions: int = 50, txn_partitions: int = 50,
                 cpus: set[int] | None = None, ssl_port: int | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.controller_port = controller_port or port + 1
        self.advertised_port = advertised_port or port
        self.internal_port = internal_port or port + 2
        self.version = version
        self.jvm_flags = list(jvm_flags if jvm_flags is not None else BROKER_JVM_FLAGS)
        self.properties = dict(properties or {})
        self.offsets_partitions = offsets_partitions
        self.txn_partitions = txn_partitions
        self.cpus = set(cpus) if cpus else None  # CPU affinity of the broker (all its threads)
        self.ssl_port = ssl_port  # an SSL listener too (its ssl.keystore.* in ``properties``)
        self.spawned_at: float | None = None  # time.monotonic() just before the JVM is spawned
        self.proc: subprocess.Popen | None = None
        self._out = None

    # paths
    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.advertised_port}"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "kafka.pid"

    def write_properties(self) -> Path:
        proxied = self.advertised_port != self.port
        listeners = [f"PLAINTEXT://{HOST}:{self.port}", f"CONTROLLER://{HOST}:{self.controller_port}"]
        advertised = [f"PLAINTEXT://{HOST}:{self.advertised_port}"]
        if proxied:
            listeners.append(f"INTERNAL://{HOST}:{self.internal_port}")
            advertised.append(f"INTERNAL://{HOST}:{self.internal_port}")
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"
        if self.ssl_port:
            listeners.append(f"SSL://{HOST}:{self.ssl_port}")
            advertised.append(f"SSL://{HOST}:{self.ssl_port}")
            protocols += ",SSL:SSL"
        template = string.Template((POM_DIR / "server.properties.template").read_text())
        text = template.substitute(
            controller_port=self.controller_port,
            listeners=",".join(listeners),
            advertised_listeners=",".join(advertised),
            inter_broker_listener="INTERNAL" if proxied else "PLAINTEXT",
            protocol_map=protocols,
            log_dir=self.data_dir / "kraft-logs",
            offsets_partitions=self.offsets_partitions,
            txn_partitions=self.txn_partitions,
        )
        if self.properties:
            text += "\n# caller overrides\n" + "".join(
                f"{k}={v}\n" for k, v in self.properties.items())
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(text)
        return self.properties_file

    def format_storage(self, cp: str, cluster_id: str | None = None) -> None:
        """Format the log directory with ``cluster_id`` (every node of a cluster needs the
        same one; default: a fresh one), unless it already is formatted."""
        if (self.data_dir / "kraft-logs" / "meta.properties").exists():
            return
        java = ["java", *TOOL_JVM_FLAGS, *log_flags(self.version, tool=True),
                "-cp", cp, "kafka.tools.StorageTool"]
        if cluster_id is None:
            cluster_id = subprocess.run([*java, "random-uuid"], check=True, capture_output=True,
                                        text=True).stdout.strip().splitlines()[-1]
        res = subprocess.run([*java, "format", "-t", cluster_id, "-c", str(self.properties_file),
                              "--ignore-formatted"], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"StorageTool format failed:\n{res.stdout}\n{res.stderr}")

    def start(self, timeout: float = 120.0, detach: bool = False) -> "ApacheKafka":
        cp = classpath(self.version)
        for p in (self.port, self.controller_port):
            if _port_open(HOST, p):
                raise RuntimeError(f"port {p} is already in use on {HOST}")
        self.write_properties()
        self.format_storage(cp)
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        cmd = ["java", *self.jvm_flags, *log_flags(self.version, tool=False),
               f"-Dkafka.logs.dir={logs}", "-cp", cp, "kafka.Kafka", str(self.properties_file)]
        self._out = open(self.data_dir / "kafka.out", "ab")
        cpus = self.cpus
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.spawned_at = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=detach,
                                     preexec_fn=pin)
        self.pid_file.write_text(str(self.proc.pid))
        _log(f"Apache Kafka {self.version} starting (pid {self.proc.pid}) on {HOST}:{self.port}, "
             f"advertised {self.bootstrap}, data in {self.data_dir}")
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until the port accepts connections and Metadata lists at least one broker."""
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited with {self.proc.returncode}:\n"
                                   + self._tail())
            try:
                if metadata_brokers(HOST, self.port):
                    _log(f"ready after {time.monotonic() - t0:.1f}s")
                    return
            except (OSError, ValueError):  # (DecodeError is a ValueError)
                pass
            time.sleep(0.3)
        raise TimeoutError(f"Apache Kafka not ready after {timeout}s:\n" + self._tail())

    def _tail(self, lines: int = 30) -> str:
        out = []
        for f in (self.data_dir / "kafka.out", self.data_dir / "logs" / "server.log"):
            if f.exists():
                out += f.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        _terminate(self.proc.pid, timeout, wait=self.proc.wait)
        self.proc = None
        if self._out:
            self._out.close()
            self._out = None
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> "ApacheKafka":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _terminate(pid: int, timeout: float, wait=None) -> None:
    """SIGTERM ``pid``; SIGKILL it if it is still there after ``timeout`` seconds."""
    def alive() -> bool:
        if wait is not None:
            try:
                wait(timeout=0)
                return False
            except subprocess.TimeoutExpired:
                return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.2)
    _log(f"pid {pid} still running after {timeout}s; killing it")
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if wait is not None:
        wait()


def stop_data_dir(data_dir: str | os.PathLike, timeout: float = 30.0) -> bool:
    """Stop the broker started by ``start --data-dir`` (found through ``kafka.pid``)."""
    data_dir = Path(data_dir).resolve()
    pid_file = data_dir / "kafka.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        pid_file.unlink(missing_ok=True)
        return False
    # only signal the process if it really is the broker of this data directory
    if b"kafka.Kafka" not in cmdline or str(data_dir).encode() not in b" ".join(cmdline):
        raise RuntimeError(f"pid {pid} is not the Apache Kafka broker of {data_dir}")
    _terminate(pid, timeout)
    pid_file.unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------------------------
# Tools


def run_tool(main_class: str, args: list[str], version: str = KAFKA_VERSION,
             timeout: float | None = 600, check: bool = True,
             jvm_flags: list[str] | None = None) -> str:
    """Run a Kafka tool main class (e.g. ``org.apache.kafka.tools.ProducerPerformance``) with
    the resolved class path; return its standard output (stderr is appended on failure)."""
    cmd = ["java", *(jvm_flags if jvm_flags is not None else TOOL_JVM_FLAGS),
           *log_flags(version, tool=True),
           "-cp", classpath(version), main_class, *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{main_class} exited with {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res.stdout


_PERF_RE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def parse_producer_performance(output: str) -> dict[str, float] | None:
    """Parse ProducerPerformance's final summary line."""
    found = None
    for m in _PERF_RE.finditer(output):
        found = m
    if not found:
        return None
    keys = ["records", "records_per_sec", "mb_per_sec", "avg_ms", "max_ms",
            "p50_ms", "p95_ms", "p99_ms", "p999_ms"]
    return {k: float(v) for k, v in zip(keys, found.groups())}


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("classpath", help="resolve and print the class path")
    c.add_argument("--version", default=KAFKA_VERSION)
    c.add_argument("--refresh", action="store_true")
    s = sub.add_parser("start", help="start a broker in the background")
    s.add_argument("--port", type=int, default=9192)
    s.add_argument("--controller-port", type=int)
    s.add_argument("--advertised-port", type=int)
    s.add_argument("--internal-port", type=int)
    s.add_argument("--data-dir", required=True)
    s.add_argument("--version", default=KAFKA_VERSION)
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra server.properties entry")
    s.add_argument("--timeout", type=float, default=120)
    t = sub.add_parser("stop", help="stop the broker of a data directory")
    t.add_argument("--data-dir", required=True)
    t.add_argument("--timeout", type=float, default=30)
    r = sub.add_parser("tool", help="run a Kafka tool main class")
    r.add_argument("main_class")
    r.add_argument("args", nargs="*", help="tool arguments, after --")
    r.add_argument("--version", default=KAFKA_VERSION)
    argv = list(sys.argv[1:] if argv is None else argv)
    tool_args: list[str] = []
    if "--" in argv:  # everything after "--" belongs to the tool
        cut = argv.index("--")
        argv, tool_args = argv[:cut], argv[cut + 1:]
    a = ap.parse_args(argv)

    if a.cmd == "classpath":
        print(classpath(a.version, refresh=a.refresh))
    elif a.cmd == "start":
        props = dict(kv.split("=", 1) for kv in a.set)
        kafka = ApacheKafka(a.data_dir, port=a.port, controller_port=a.controller_port,
                            advertised_port=a.advertised_port, internal_port=a.internal_port,
                            version=a.version, properties=props)
        kafka.start(timeout=a.timeout, detach=True)
        print(kafka.bootstrap)
    elif a.cmd == "stop":
        if not stop_data_dir(a.data_dir, a.timeout):
            _log(f"no running broker recorded in {a.data_dir}")
            return 1
    elif a.cmd == "tool":
        sys.stdout.write(run_tool(a.main_class, a.args + tool_args, version=a.version,
                                  timeout=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
