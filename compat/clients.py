"""The clients of the compatibility suite and how each is installed.

Each client is installed the way its users install it (Maven Central jars, PyPI, npm, the Go
module proxy, Debian), into caches in known places: ``~/.m2`` (Maven), ``~/.cache/pip``,
``~/.cache/headrace/`` (Go modules and build cache, the Kafka class path), and
``compat/kafkajs/node_modules``. A ``Client``'s ``setup`` installs it and returns the command
that runs one of its scenarios (see ``compat/kit.py`` for that program's convention); a
client that cannot be installed here raises ``Unavailable``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compat import kit

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
CACHE = Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))


class Unavailable(Exception):
    """A client that cannot be installed here (reported, not hidden)."""


def log(msg: str) -> None:
    print(f"[compat] {msg}", flush=True)


def run_quiet(cmd: list[str], cwd: Path | None = None, env: dict | None = None,
              timeout: float = 1800, what: str = "") -> str:
    """Run an install/build step; on failure raise Unavailable with the tail of its output."""
    log(f"{what or 'running'}: {' '.join(map(str, cmd))}")
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=timeout)
    except FileNotFoundError as exc:
        raise Unavailable(f"{cmd[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"{' '.join(map(str, cmd[:3]))} timed out after {timeout}s") from exc
    if res.returncode != 0:
        tail = (res.stdout + res.stderr).strip().splitlines()[-15:]
        raise Unavailable(f"{' '.join(map(str, cmd[:3]))} failed: " + " | ".join(tail))
    log(f"  done in {time.monotonic() - t0:.1f}s")
    return res.stdout



@dataclass
class Client:
    name: str
    title: str                      # what it is, for the matrix
    scenarios: tuple[str, ...]
    setup: Callable[[], list[str]]  # installs; returns the command prefix of its program
    table: str = "clients"          # which matrix table it belongs to
    timeout: float = 90.0           # per scenario
    env: Callable[[], dict] | None = None
    version: str = ""
    # what it runs against (compat/broker.py): "one" broker, "cluster" (three brokers with
    # ZooKeeper, headrace serve --workers 3), "killable-cluster" (three separate broker
    # processes), "secure" (one broker with SSL, mutual TLS, SASL_SSL and SASL_PLAINTEXT)
    broker: str = "one"
    # run by tests/compat (part of the CI test command) unless HEADRACE_COMPAT_CLIENTS says
    # otherwise; False: only by python -m compat (rows that would overrun the tests' budget);
    # a tuple of scenario names: only those by tests/compat, all by python -m compat
    in_tests: bool | tuple[str, ...] = True
    # settings of the broker ("one") it runs against, beyond Headrace's defaults
    settings: dict[str, str] | None = None

    def test_scenarios(self) -> tuple[str, ...]:
        """The scenarios tests/compat runs of this client, unless it is asked for by name."""
        if isinstance(self.in_tests, tuple):
            return tuple(s for s in self.scenarios if s in self.in_tests)
        return self.scenarios if self.in_tests else ()


def _pip_ensure(modules: dict[str, str]) -> None:
    """Install the PyPI distributions whose import name is missing in this interpreter."""
    import importlib.util
    missing = [dist for mod, dist in modules.items() if importlib.util.find_spec(mod) is None]
    if missing:
        run_quiet([sys.executable, "-m", "pip", "install", "-q", *missing], what="pip install")


CODECS = {"lz4": "lz4", "snappy": "python-snappy", "zstandard": "zstandard"}


def _python_client(folder: str, modules: dict[str, str]) -> Callable[[], list[str]]:
    def setup() -> list[str]:
        _pip_ensure({**modules, **CODECS})
        return [sys.executable, str(COMPAT / folder / "scenarios.py")]
    return setup


def _dist_version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


# Java: one Maven project, built once per kafka-clients version into its own target folder.
JAVA_VERSIONS = {"java39": ("3.9.2", None), "java4": ("4.0.2", "kafka40"),
                 "java44": ("4.4.0", "kafka44")}


def _once(setup: Callable[[], list[str]]) -> Callable[[], list[str]]:
    """``setup`` run at most once per run of the suite (a client's single-broker and cluster
    rows share it); a failure (Unavailable) is not remembered."""
    done: list[list[str]] = []

    def once() -> list[str]:
        if not done:
            done.append(setup())
        return done[0]
    return once


@functools.cache  # one setup per name, shared by the rows that use it
def _java_setup(name: str) -> Callable[[], list[str]]:
    version, profile = JAVA_VERSIONS[name]

    @_once
    def setup() -> list[str]:
        if shutil.which("java") is None or shutil.which("mvn") is None:
            raise Unavailable("java or mvn not on PATH")
        out = COMPAT / "java" / "target" / f"kafka-clients-{version}"
        cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "package"]
        if profile:
            cmd.append(f"-P{profile}")
        run_quiet(cmd, cwd=COMPAT / "java", what=f"building compat/java ({version})")
        cp = (out / "classpath.txt").read_text().strip()
        return ["java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", f"{out / 'classes'}:{cp}", "dev.headrace.compat.Suite"]
    return setup


@functools.cache
def _tools_setup(version: str) -> Callable[[], list[str]]:
    @_once
    def setup() -> list[str]:
        if shutil.which("java") is None or shutil.which("mvn") is None:
            raise Unavailable("java or mvn not on PATH")
        import importlib.util
        spec = importlib.util.spec_from_file_location("apache_kafka",
                                                      ROOT / "bench" / "apache_kafka.py")
        apache_kafka = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(apache_kafka)
        try:
            apache_kafka.classpath(version)  # resolves with Maven once, then cached
        except RuntimeError as exc:
            raise Unavailable(str(exc)[-400:]) from exc
        _pip_ensure({"kafka": "kafka-python"})
        return [sys.executable, str(COMPAT / "kafka-tools" / "scenarios.py"), "--version",
                version]
    return setup


def _kcat_setup() -> list[str]:
    if shutil.which("kcat") is None:
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            raise Unavailable("kcat not installed and apt-get not usable here")
        try:
            run_quiet(["apt-get", "install", "-y", "-q", "kcat"], what="installing kcat")
        except Unavailable:
            run_quiet(["apt-get", "update", "-q"], what="apt-get update")
            run_quiet(["apt-get", "install", "-y", "-q", "kcat"], what="installing kcat")
    _pip_ensure({})
    return [sys.executable, str(COMPAT / "kcat" / "scenarios.py")]


def _kcat_version() -> str:
    try:
        out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"Version ([\w.\-]+) .*?librdkafka ([\w.\-]+)", out, re.S)
    return f"{m.group(1)} (librdkafka {m.group(2)})" if m else ""


def _kafkajs_setup() -> list[str]:
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise Unavailable("node or npm not on PATH")
    folder = COMPAT / "kafkajs"
    stamp = folder / "node_modules" / ".package-lock.json"
    lock = folder / "package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        run_quiet(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder,
                  what="npm ci (compat/kafkajs)")
    return ["node", str(folder / "scenarios.js")]


def _go_env() -> dict:
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(CACHE / "go" / "mod"))
    env.setdefault("GOCACHE", str(CACHE / "go" / "build"))
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly -buildvcs=false").strip()
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def _franz_setup() -> list[str]:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                                else None)
    if go is None:
        raise Unavailable("go not on PATH")
    folder = COMPAT / "franz-go"
    binary = CACHE / "bin" / "franz-go-compat"
    binary.parent.mkdir(parents=True, exist_ok=True)
    run_quiet([go, "build", "-o", str(binary), "."], cwd=folder, env=_go_env(),
              what="go build (compat/franz-go)")
    return [str(binary)]


def _franz_version() -> str:
    gomod = COMPAT / "franz-go" / "go.mod"
    m = re.search(r"github.com/twmb/franz-go (v[\w.\-]+)", gomod.read_text()) if gomod.exists() else None
    return m.group(1) if m else ""


def _npm_version(pkg: str) -> str:
    lock = COMPAT / "kafkajs" / "package-lock.json"
    try:
        return json.loads(lock.read_text())["packages"][f"node_modules/{pkg}"]["version"]
    except (OSError, KeyError, ValueError):
        return ""


def _spark_setup() -> list[str]:
    if shutil.which("java") is None:
        raise Unavailable("java not on PATH")
    _pip_ensure({"pyspark": "pyspark>=4.0,<4.1"})
    return [sys.executable, str(COMPAT / "spark" / "scenarios.py")]


STD = kit.STANDARD_SCENARIOS
# scenarios only some clients run (other rows show "-" there): the group scenario with KIP-848's
# consumer protocol (group.protocol=consumer); share groups (KIP-932): consumers of one share
# group acknowledging explicitly (ACCEPT, RELEASE, REJECT; the Java client's with a consumer
# killed while it holds records), and implicitly; Kafka Streams' word count with two instances
# joining and leaving, with group.protocol=streams (KIP-1071) at least once and exactly once,
# and with the classic protocol
SHARE_SCENARIOS = ("share-group", "share-group-implicit")
STREAMS_SCENARIOS = ("streams-at-least-once", "streams-exactly-once-v2", "streams-classic-protocol")
CLIENT_SCENARIOS = STD + ("group-consumer-protocol",) + SHARE_SCENARIOS + STREAMS_SCENARIOS
# kafka-clients 3.9 and 4.0 answer the share and streams-group ones n/a (no share consumer
# Headrace or Kafka 4.4 serve, no streams groups); Kafka Streams is run with kafka-clients 4.4
JAVA_SCENARIOS = STD + ("group-consumer-protocol", "share-group", "streams-at-least-once",
                        "streams-exactly-once-v2")
JAVA44_SCENARIOS = JAVA_SCENARIOS + ("streams-classic-protocol",)
CONFLUENT_SCENARIOS = STD + SHARE_SCENARIOS
# the broker of the java44 row: streams group members heartbeat every second and a new streams
# group is assigned after 1 s (Kafka's defaults: 5 s and 3 s), so that Kafka Streams' instances
# join and leave in seconds; nothing but streams groups reads these settings
STREAMS_SETTINGS = {"group.streams.heartbeat.interval.ms": "1000",
                    "group.streams.min.heartbeat.interval.ms": "500",
                    "group.streams.initial.rebalance.delay.ms": "1000"}
TOOL_SCENARIOS = ("kafka-topics", "kafka-console-producer", "kafka-console-consumer",
                  "kafka-consumer-groups", "kafka-consumer-groups-kip848",
                  "kafka-consumer-groups-deleted-topic", "kafka-configs",
                  "kafka-producer-perf-test", "kafka-consumer-perf-test", "kafka-transactions",
                  "kafka-log-dirs", "kafka-share-groups", "kafka-console-share-consumer")
# Kafka 4.4's tools run by the test command (the rest of the row only by python -m compat)
TOOL_SHARE_SCENARIOS = ("kafka-share-groups", "kafka-console-share-consumer")
SPARK_SCENARIOS = ("batch-read", "streaming-windows", "streaming-restart", "starting-offsets",
                   "starting-offsets-by-timestamp", "subscribe-pattern")
# against a cluster of three brokers (the "cluster" table; rows named <client>-cluster)
JAVA_CLUSTER_SCENARIOS = ("cluster-produce-consume", "cluster-group", "cluster-transactions")
TOOL_CLUSTER_SCENARIOS = ("cluster-kafka-topics", "cluster-kafka-consumer-groups",
                          "cluster-kafka-broker-api-versions", "cluster-kafka-log-dirs")
SPARK_CLUSTER_SCENARIOS = ("cluster-streaming-windows", "cluster-pipeline-example")
# against three separate broker processes: the partition leader is killed with SIGKILL while an
# idempotent acks=all producer writes (the harness kills it when the program asks, HOOK lines)
KILL_SCENARIOS = ("cluster-leader-kill-9",)
# the same cluster: three share consumers of one partition (RF=3) while its leader is killed
# with SIGKILL and, 8 s later, started again (HOOK kill-leader, HOOK restart)
SHARE_KILL_SCENARIOS = ("cluster-share-leader-kill-9",)
CLUSTER_SCENARIOS = (JAVA_CLUSTER_SCENARIOS + TOOL_CLUSTER_SCENARIOS + SPARK_CLUSTER_SCENARIOS
                     + KILL_SCENARIOS + SHARE_KILL_SCENARIOS)
# against a broker with a listener of each security protocol (the "security" table)
SECURITY_SCENARIOS = kit.SECURITY_SCENARIOS
SPARK_SECURITY_SCENARIOS = ("security-sasl-ssl-scram-sha-512",)

CLIENTS: dict[str, Client] = {c.name: c for c in [
    Client("java39", "Java kafka-clients", JAVA_SCENARIOS, _java_setup("java39"),
           version=JAVA_VERSIONS["java39"][0]),
    Client("java4", "Java kafka-clients", JAVA_SCENARIOS, _java_setup("java4"),
           version=JAVA_VERSIONS["java4"][0]),
    Client("java44", "Java kafka-clients", JAVA44_SCENARIOS, _java_setup("java44"),
           version=JAVA_VERSIONS["java44"][0], timeout=150, settings=STREAMS_SETTINGS),
    Client("confluent-kafka", "librdkafka via confluent-kafka (PyPI)", CONFLUENT_SCENARIOS,
           _python_client("confluent-kafka", {"confluent_kafka": "confluent-kafka"})),
    Client("kcat", "librdkafka via kcat (Debian)", STD, _kcat_setup),
    Client("kafka-python", "kafka-python (PyPI)", STD,
           _python_client("kafka-python", {"kafka": "kafka-python"})),
    Client("aiokafka", "aiokafka (PyPI)", STD,
           _python_client("aiokafka", {"aiokafka": "aiokafka"})),
    Client("kafkajs", "kafkajs (npm)", STD, _kafkajs_setup),
    Client("franz-go", "franz-go (Go)", STD, _franz_setup),
    Client("kafka-tools-3.9", "Kafka's tools (main classes from Maven Central)", TOOL_SCENARIOS,
           _tools_setup("3.9.2"), table="tools", timeout=120, version="3.9.2", in_tests=False),
    Client("kafka-tools-4.0", "Kafka's tools (main classes from Maven Central)", TOOL_SCENARIOS,
           _tools_setup("4.0.2"), table="tools", timeout=120, version="4.0.2"),
    Client("kafka-tools-4.4", "Kafka's tools (main classes from Maven Central)", TOOL_SCENARIOS,
           _tools_setup("4.4.0"), table="tools", timeout=120, version="4.4.0",
           in_tests=TOOL_SHARE_SCENARIOS),
    Client("spark", "PySpark with spark-sql-kafka-0-10", SPARK_SCENARIOS, _spark_setup,
           table="spark", timeout=420),
    Client("java4-cluster", "Java kafka-clients", JAVA_CLUSTER_SCENARIOS, _java_setup("java4"),
           table="cluster", version=JAVA_VERSIONS["java4"][0], broker="cluster"),
    Client("kafka-tools-4.0-cluster", "Kafka's tools (main classes from Maven Central)",
           TOOL_CLUSTER_SCENARIOS, _tools_setup("4.0.2"), table="cluster", timeout=150,
           version="4.0.2", broker="cluster"),
    Client("java44-cluster", "Java kafka-clients", JAVA_CLUSTER_SCENARIOS, _java_setup("java44"),
           table="cluster", version=JAVA_VERSIONS["java44"][0], broker="cluster"),
    Client("kafka-tools-4.4-cluster", "Kafka's tools (main classes from Maven Central)",
           TOOL_CLUSTER_SCENARIOS, _tools_setup("4.4.0"), table="cluster", timeout=150,
           version="4.4.0", broker="cluster", in_tests=False),
    Client("spark-cluster", "PySpark with spark-sql-kafka-0-10", SPARK_CLUSTER_SCENARIOS,
           _spark_setup, table="cluster", timeout=420, broker="cluster"),
    Client("java4-cluster-kill", "Java kafka-clients", KILL_SCENARIOS, _java_setup("java4"),
           table="cluster", version=JAVA_VERSIONS["java4"][0], broker="killable-cluster",
           timeout=150),
    Client("confluent-kafka-cluster-kill", "librdkafka via confluent-kafka (PyPI)",
           KILL_SCENARIOS,
           _python_client("confluent-kafka", {"confluent_kafka": "confluent-kafka"}),
           table="cluster", broker="killable-cluster", timeout=150),
    Client("java44-cluster-kill", "Java kafka-clients", SHARE_KILL_SCENARIOS,
           _java_setup("java44"), table="cluster", version=JAVA_VERSIONS["java44"][0],
           broker="killable-cluster", timeout=150),
    Client("java4-security", "Java kafka-clients", SECURITY_SCENARIOS, _java_setup("java4"),
           table="security", version=JAVA_VERSIONS["java4"][0], broker="secure"),
    Client("java39-security", "Java kafka-clients", SECURITY_SCENARIOS, _java_setup("java39"),
           table="security", version=JAVA_VERSIONS["java39"][0], broker="secure"),
    Client("java44-security", "Java kafka-clients", SECURITY_SCENARIOS, _java_setup("java44"),
           table="security", version=JAVA_VERSIONS["java44"][0], broker="secure"),
    Client("confluent-kafka-security", "librdkafka via confluent-kafka (PyPI)",
           SECURITY_SCENARIOS,
           _python_client("confluent-kafka", {"confluent_kafka": "confluent-kafka"}),
           table="security", broker="secure"),
    Client("kcat-security", "librdkafka via kcat (Debian)", SECURITY_SCENARIOS, _kcat_setup,
           table="security", broker="secure"),
    Client("spark-security", "PySpark with spark-sql-kafka-0-10", SPARK_SECURITY_SCENARIOS,
           _spark_setup, table="security", timeout=420, broker="secure"),
]}

VERSIONS: dict[str, Callable[[], str]] = {
    "confluent-kafka": lambda: (_dist_version("confluent-kafka")
                                + (f" (librdkafka {_librdkafka()})" if _librdkafka() else "")),
    "kcat": _kcat_version,
    "kafka-python": lambda: _dist_version("kafka-python"),
    "aiokafka": lambda: _dist_version("aiokafka"),
    "kafkajs": lambda: _npm_version("kafkajs"),
    "franz-go": _franz_version,
    "spark": lambda: _spark_version(),
    "spark-cluster": lambda: _spark_version(),
    "spark-security": lambda: _spark_version(),
    "kcat-security": _kcat_version,
}
for _name in ("confluent-kafka-cluster-kill", "confluent-kafka-security"):
    VERSIONS[_name] = VERSIONS["confluent-kafka"]


def _spark_version() -> str:
    found = sorted(CACHE.glob("spark-sql-kafka-*.version"))
    connector = found[-1].read_text().strip() if found else ""
    return _dist_version("pyspark") + (f" (connector {connector})" if connector else "")


def _librdkafka() -> str:
    try:
        import confluent_kafka
        return confluent_kafka.libversion()[0]
    except Exception:  # not installed yet
        return ""
