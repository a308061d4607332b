"""The brokers under test behind one small interface, and the Java tool runner.

Apache Kafka and Headrace, and Tansu (``bench/tansu.py``: a Kafka-compatible broker in Rust
from crates.io, the peer of issue 36) where a scenario suits it (``skip_reason``). Every
broker is started the same way for every run: a fresh data directory under the same parent
(so the same file system), the broker process pinned to ``BROKER_CPUS`` (every thread
inherits the affinity set before exec), free ports on 127.0.0.1. Tools run pinned to
``CLIENT_CPUS``.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import tansu, wire
from headrace.broker.tools.process import BrokerProcess, pinned, terminate
from bench.apache_kafka import (HOST, KAFKA_VERSION, TOOL_JVM_FLAGS, ApacheKafka, classpath,
                                log_flags)

BROKER_CPUS = {0}
CLIENT_CPUS = {1}


def pin_self(cpus: set[int]) -> None:
    """Pin the calling process (the harness, and so the tools it spawns) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


def cpu_count_ok() -> bool:
    return len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else False


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads) so far, from /proc."""
    times = cpu_times(pid)
    return None if times is None else sum(times)


def cpu_times(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU time of process ``pid`` (all its threads) so far, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_jiffies() -> dict[int, tuple[int, int]]:
    """{cpu: (busy, total)} jiffies from /proc/stat (busy excludes idle and iowait)."""
    out = {}
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals[:8]]
                out[int(name[3:])] = (sum(v) - v[3] - v[4], sum(v))
    except OSError:
        pass
    return out


class CpuMeter:
    """CPU accounting over one run: the share of a core the broker used, and how busy the
    broker's and the client's CPUs were in total (anything above the broker's own share on its
    CPU is other work, e.g. other processes on a shared machine)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids  # the broker's processes (a --workers broker: parent and workers)
        self.t0 = self.c0 = None
        self.j0: dict[int, tuple[int, int]] = {}

    def start(self) -> "CpuMeter":
        self.c0, self.t0, self.j0 = self._cpu(), time.monotonic(), _cpu_jiffies()
        return self

    def _cpu(self) -> float | None:
        seconds = [cpu_seconds(p) for p in self.pids]
        if not seconds or any(c is None for c in seconds):
            return None
        return sum(c for c in seconds if c is not None)

    def stop(self) -> float | None:
        """The broker's share of one core; details in ``self.report``."""
        c1, j1 = self._cpu(), _cpu_jiffies()
        wall = max(time.monotonic() - self.t0, 1e-9)
        self.report: dict[str, float] = {}
        for label, cpus in (("broker_cpu_busy", BROKER_CPUS), ("client_cpu_busy", CLIENT_CPUS)):
            busy = sum(j1[c][0] - self.j0[c][0] for c in cpus if c in j1 and c in self.j0)
            total = sum(j1[c][1] - self.j0[c][1] for c in cpus if c in j1 and c in self.j0)
            if total:
                self.report[label] = busy / total
        if c1 is None or self.c0 is None:
            return None
        share = (c1 - self.c0) / wall
        if "broker_cpu_busy" in self.report:
            self.report["other_on_broker_cpu"] = max(0.0, self.report["broker_cpu_busy"] - share)
        return share


def free_port_block(n: int = 3) -> int:
    """A port p such that p .. p+n-1 are all free on 127.0.0.1 right now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind((HOST, p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free block of ports")


class Broker:
    """What a scenario needs from a broker."""

    name = "?"
    port = 0
    pid = 0
    spawned_at: float | None = None

    @property
    def pids(self) -> list[int]:
        """Every process of the broker (CPU accounting): the one, or a parent and workers."""
        return [self.pid]

    def settings(self) -> dict:
        """The broker's settings in full, as the results record them."""
        return {}

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def prepare(self) -> None:
        """Work done before the process is spawned (not part of cold-start time)."""

    def start(self) -> "Broker":
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Remove the data directory."""
        shutil.rmtree(self.data_dir, ignore_errors=True)


def headrace_snapshot(ref: str, dest: Path) -> Path:
    """Headrace as committed at ``ref``, laid out as an importable tree in ``dest/lib``
    (following ``[tool.setuptools.package-dir]`` of that commit's pyproject.toml), so that a
    run measures one fixed commit while the working tree keeps changing. Returns the
    directory to put first on PYTHONPATH. Its compiled parts (the C extensions, and the modules
    of ``headrace._compiled.MODULES`` where the commit has them) are built as an install builds
    them (``setup.py build_ext``, with this interpreter's Cython), so that the snapshot runs
    as the working tree's editable install does."""
    import tomllib
    repo = Path(__file__).resolve().parent.parent
    src, lib = dest / "src", dest / "lib"
    shutil.rmtree(dest, ignore_errors=True)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    if (src / "setup.py").exists():
        build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=src, capture_output=True, text=True)
        if build.returncode != 0:
            raise RuntimeError(f"building Headrace at {ref} failed: {build.stderr[-2000:]}")
    project = tomllib.loads((src / "pyproject.toml").read_text())
    mapping = project["tool"]["setuptools"]["package-dir"]
    for pkg in sorted(mapping, key=lambda p: p.count(".")):
        target = lib / pkg.replace(".", "/")
        shutil.copytree(src / mapping[pkg], target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    broker = lib / "headrace" / "broker"
    cli = next((p for p in (broker / "app" / "cli.py", broker / "cli.py") if p.exists()), None)
    if cli is None or "--ready-file" not in cli.read_text():
        raise RuntimeError(f"Headrace at {ref} has no 'serve --ready-file', which the harness "
                           "waits on: measure a later commit")
    compile_bytecode([lib])
    return lib


def compile_bytecode(paths) -> None:
    """Compile the Python files under ``paths`` to their ``__pycache__``, as ``pip install``
    does: the brokers then start as an installed Headrace does, whatever
    PYTHONDONTWRITEBYTECODE says (set, every start would compile every module again)."""
    import compileall
    for path in paths:
        if not compileall.compile_dir(str(path), quiet=1):
            raise RuntimeError(f"compiling {path} failed")


def installed_tree() -> list[Path]:
    """The directories of the installed (or editable) Headrace's packages."""
    import headrace.broker
    import headrace.pipeline
    import headrace.protocol
    import headrace.storage
    return [Path(p) for m in (headrace.broker, headrace.pipeline, headrace.protocol,
                              headrace.storage) for p in m.__path__]


def compare_variants(refs: list[str], snapshots: Path, rounds: int, measure, heading: str,
                     others: tuple[str, ...] = ()) -> None:
    """Side by side: ``measure(pythonpath)`` for Headrace as committed at each of ``refs``
    (snapshots under ``snapshots``) and for the working tree (pythonpath None), and
    ``measure(kind)`` for each broker kind of ``others`` ("kafka-default"...), ``rounds``
    times, every other round in the reverse order so that none is always first. ``measure``
    returns {"mib_s", "cpu_s_per_gib", "gib"} (and optionally "user_s_per_gib",
    "client_s_per_gib": the client processes' CPU, "switches_per_mib"). Prints every run,
    then ``heading`` and each variant's best throughput and lowest CPU per GiB."""
    variants: list[tuple[str, Path | str | None]] = [
        (f"{ref} ({git_describe(ref)})", headrace_snapshot(ref, snapshots / f"snapshot{i}"))
        for i, ref in enumerate(refs)]
    variants.append(("working tree", None))
    variants += [(kind, kind) for kind in others]
    results: dict[str, list[dict]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        for name, path in variants if r % 2 == 0 else variants[::-1]:
            res = measure(path)
            results[name].append(res)
            switches = (f", {res['switches_per_mib']:.1f} context switches per MiB"
                        if "switches_per_mib" in res else "")
            user = f", user {res['user_s_per_gib']:.3f}" if "user_s_per_gib" in res else ""
            clients = (f", clients {res['client_s_per_gib']:.3f} CPU-s/GiB"
                       if "client_s_per_gib" in res else "")
            print(f"round {r + 1} {name:>24}: {res['mib_s']:8.1f} MiB/s "
                  f"{res['cpu_s_per_gib']:6.3f} CPU-s/GiB ({res['gib']:.1f} GiB{switches}{user}"
                  f"{clients})", flush=True)
    print(f"\n{heading}, best of {rounds}:")
    for name, runs in results.items():
        best = max(x["mib_s"] for x in runs)
        cpu = min(x["cpu_s_per_gib"] for x in runs)
        # user CPU: the broker's own code, without the kernel's (the copy into the page cache)
        users = sorted(x["user_s_per_gib"] for x in runs if "user_s_per_gib" in x)
        user = f"  (user: median {users[len(users) // 2]:.3f})" if users else ""
        print(f"  {name:>24}: {best:8.1f} MiB/s  {cpu:6.3f} CPU-s/GiB{user}")


def git_describe(ref: str) -> str:
    repo = Path(__file__).resolve().parent.parent
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", ref],
                          capture_output=True, text=True).stdout.strip()


def headrace_at(ref: str) -> str:
    """Which Headrace a run measures, for its results: ``ref``'s short hash; for "worktree"
    HEAD's, and whether the broker's code in the working tree differs from it."""
    if ref != "worktree":
        return git_describe(ref)
    repo = Path(__file__).resolve().parent.parent
    changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "broker",
                              "protocol", "pipeline", "storage"],
                             capture_output=True, text=True).stdout.strip()
    return git_describe("HEAD") + (" with uncommitted changes" if changed else "")


class HeadraceBroker(Broker):
    """A ``BrokerProcess`` pinned to the broker CPUs, its log in ``log_file``."""

    name = "headrace"

    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None,
                 cpus: set[int] | None = None, log_file: Path | None = None,
                 port: int = 0, pythonpath: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.log_file = log_file or self.data_dir.with_suffix(".log")
        # port 0: the broker picks one; pythonpath: a snapshot from headrace_snapshot(), else
        # the installed tree
        self.process = BrokerProcess(
            self.data_dir, overrides, port=port, log_file=self.log_file,
            cpus=cpus if cpus is not None else BROKER_CPUS, pythonpath=pythonpath)

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def spawned_at(self) -> float | None:
        return self.process.spawned_at

    def start(self, timeout: float = 60.0) -> "HeadraceBroker":
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.process.start(timeout)
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self.process.stop(timeout)

    def settings(self) -> dict:
        return {"command": self.process.command(Path("READY")), "overrides": self.process.overrides,
                "defaults": headrace_settings(self.process.pythonpath)}


class HeadraceWorkers(HeadraceBroker):
    """``headrace serve --workers N``: N brokers of one cluster (a parent process and a child
    per worker), registered in a ZooKeeper chroot of their own, unpinned unless ``cpus``."""

    def __init__(self, data_dir: Path, workers: int, zk_connect: str,
                 overrides: dict[str, object] | None = None, log_file: Path | None = None,
                 pythonpath: Path | None = None, cpus: set[int] | None = None) -> None:
        chroot = f"/bench-{data_dir.name}"
        ensure_znode(zk_connect, chroot)
        super().__init__(data_dir, {**(overrides or {}), "zookeeper.connect": zk_connect + chroot},
                         cpus=cpus, log_file=log_file, pythonpath=pythonpath)
        self.process.args = ["--workers", str(workers)]
        self.workers = workers
        self.name = f"headrace-w{workers}"

    @property
    def pids(self) -> list[int]:
        from bench.cpu import children_of
        return [self.pid, *children_of(self.pid)] if self.pid else []

    def start(self, timeout: float = 120.0) -> "HeadraceWorkers":
        super().start(timeout)
        if len(self.pids) != self.workers + 1:
            raise RuntimeError(f"expected {self.workers} workers under pid {self.pid}, "
                               f"found {self.pids[1:]}")
        return self


def ensure_znode(zk_connect: str, path: str) -> None:
    from kazoo.client import KazooClient
    kz = KazooClient(zk_connect)
    kz.start(timeout=30)
    try:
        kz.ensure_path(path)
    finally:
        kz.stop()
        kz.close()


_HEADRACE_SETTINGS: dict[str, str] = {}


def headrace_settings(pythonpath: Path | None) -> str:
    """``headrace settings`` (every setting and its default) of the Headrace under test."""
    key = str(pythonpath)
    if key not in _HEADRACE_SETTINGS:
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = str(pythonpath)
        res = subprocess.run([sys.executable, "-m", "headrace", "settings"], env=env,
                             capture_output=True, text=True, timeout=60)
        _HEADRACE_SETTINGS[key] = res.stdout if res.returncode == 0 else res.stderr[-2000:]
    return _HEADRACE_SETTINGS[key]


class KafkaBroker(Broker):
    name = "kafka"

    def __init__(self, data_dir: Path, properties: dict[str, object] | None = None,
                 cpus: set[int] | None = None, version: str = KAFKA_VERSION,
                 jvm_flags: list[str] | None = None, name: str = "kafka",
                 ssl: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.name = name
        self.jvm_flags = jvm_flags
        self.ssl = ssl  # an SSL listener too, at ``ssl_port`` (its keystore in ``properties``)
        self.properties = dict(properties or {})
        self.cpus = cpus if cpus is not None else BROKER_CPUS
        self.version = version
        self.kafka: ApacheKafka | None = None

    def _make(self) -> ApacheKafka:
        if self.kafka is None:
            base = free_port_block(4 if self.ssl else 3)
            self.kafka = ApacheKafka(self.data_dir, port=base, controller_port=base + 1,
                                     internal_port=base + 2, version=self.version,
                                     properties=self.properties, cpus=self.cpus,
                                     jvm_flags=self.jvm_flags,
                                     ssl_port=base + 3 if self.ssl else None)
            self.port, self.ssl_port = base, base + 3
        return self.kafka

    def prepare(self) -> None:
        k = self._make()
        k.write_properties()
        k.format_storage(classpath(self.version))

    def start(self, timeout: float = 180.0) -> "KafkaBroker":
        k = self._make()
        k.start(timeout=timeout)
        self.spawned_at = k.spawned_at
        self.pid = k.proc.pid if k.proc else 0
        return self

    def stop(self) -> None:
        if self.kafka is not None:
            self.kafka.stop()
            self.kafka = None

    def settings(self) -> dict:
        """The JVM flags, server.properties, and every setting's effective value as the broker
        logs it at start-up ("KafkaConfig values:")."""
        k = self._make()
        effective: dict[str, str] = {}
        log = k.data_dir / "logs" / "server.log"
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()
            starts = [i for i, ln in enumerate(lines) if "KafkaConfig values:" in ln]
            for ln in lines[starts[-1] + 1:] if starts else []:
                if ln.startswith("[") or " = " not in ln:
                    break
                key, _, value = ln.strip().partition(" = ")
                effective[key] = value
        return {"jvm_flags": k.jvm_flags,
                "server.properties": k.properties_file.read_text()
                if k.properties_file.exists() else None,
                "effective": effective}


class TansuBroker(Broker):
    """Tansu (``bench.tansu``): one ``tansu broker`` process on a free port of 127.0.0.1,
    pinned to the broker CPUs, its SQLite database in ``data_dir`` (its working directory),
    its output in ``log_file``. ``prepare`` installs it on first use (cargo, many minutes) and
    chooses the port; ``start`` waits until Metadata answers."""

    name = "tansu"

    def __init__(self, data_dir: Path, cpus: set[int] | None = None,
                 log_file: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.log_file = log_file or self.data_dir.with_suffix(".log")
        self.cpus = cpus if cpus is not None else BROKER_CPUS
        self.exe: Path | None = None
        self.proc: subprocess.Popen | None = None

    def prepare(self) -> None:
        self.exe = tansu.binary()
        if not self.port:
            self.port = free_port_block(1)

    def start(self, timeout: float = 60.0) -> "TansuBroker":
        if self.exe is None or not self.port:
            self.prepare()
        assert self.exe is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        # RUST_LOG unset: Tansu's tracing filter then logs errors only, as a user runs it
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
        with open(self.log_file, "ab") as log:
            self.spawned_at = time.monotonic()
            self.proc = subprocess.Popen(tansu.command(self.exe, self.port), cwd=self.data_dir,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         preexec_fn=pinned(self.cpus))
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Tansu exited with {self.proc.returncode}:\n{self._tail()}")
            try:
                wire.wait_ready(HOST, self.port, timeout=0.5)
                return self
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self.stop()
                    raise TimeoutError(f"Tansu not ready after {timeout}s:\n{self._tail()}")

    def _tail(self, lines: int = 30) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None:
            terminate(self.proc, timeout)
            self.proc = None

    def settings(self) -> dict:
        """Its version, command line and storage (Tansu has no other settings file)."""
        return {"version": tansu.version_of(self.exe) if self.exe else None,
                "command": tansu.command(self.exe or Path("tansu"), self.port),
                "features": list(tansu.FEATURES), "storage": tansu.STORAGE}


HEADRACE_PATH: Path | None = None  # set by the harness when it runs a snapshot
# Settings where bench/kafka/server.properties.template departs from Kafka's defaults, given
# to Headrace too so that both brokers run alike (a new group rebalances at once).
HEADRACE_PARITY = {"group.initial.rebalance.delay.ms": 0}


ZOOKEEPER: str | None = None  # connect string, set by the harness when --workers runs
# Kafka's operations documentation (kafka.apache.org/documentation/#java): a 6 GiB heap and
# these G1 settings for a production broker; with them, socket.receive.buffer.bytes=-1 (the
# operating system's buffer, autotuned) instead of Kafka's fixed 100 KiB.
KAFKA_TUNED_JVM_FLAGS = [
    "-Xmx6g", "-Xms6g", "-XX:MetaspaceSize=96m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:G1HeapRegionSize=16M",
    "-XX:MinMetaspaceFreeRatio=50", "-XX:MaxMetaspaceFreeRatio=80",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]
KAFKA_TUNED_PROPERTIES = {"socket.receive.buffer.bytes": -1}
KINDS = ("kafka-default", "kafka-tuned", "headrace", "headrace-single", "headrace-w2", "tansu")
SYSTEMS = ("kafka", "headrace", "tansu")


def system_of(kind: str) -> str:
    """"kafka", "headrace" or "tansu": the system a broker variant belongs to."""
    if kind.startswith("kafka"):
        return "kafka"
    return "tansu" if kind.startswith("tansu") else "headrace"


TANSU_NOT_DURABLE = ("Tansu 0.6 has no setting that flushes every produce (its SQLite storage "
                     "commits to a WAL with synchronous=NORMAL, fsynced at checkpoints only): "
                     "no counterpart of log.flush.interval.messages=1")


def skip_reason(kind: str, sc) -> str | None:
    """Why broker ``kind`` does not run scenario ``sc`` (a ``bench.scenarios.Scenario``), or
    None: the harness records the reason in the scenario's results instead of a run."""
    if system_of(kind) == "tansu" and sc.durable:
        return TANSU_NOT_DURABLE
    return None


def make_broker(kind: str, data_dir: Path, durable: bool = False, fixed_port: bool = False,
                log_dir: Path | None = None) -> Broker:
    """A broker of ``kind``, optionally in durable (fsync per produce) mode:
    ``log.flush.interval.messages=1`` for both. ``fixed_port``: the port is known before the
    process starts (Kafka's always is). Kinds: "kafka" or "kafka-default" (Kafka's
    start-script JVM settings),
    "kafka-tuned" (the operations documentation's), "headrace" (one process; as
    "headrace-single" beside "headrace-wN" in one layout), "headrace-wN" (``--workers N``,
    needs ``ZOOKEEPER``) and "tansu" (``TansuBroker``; not durable: see ``skip_reason``)."""
    if kind == "tansu":
        if durable:
            raise ValueError(TANSU_NOT_DURABLE)
        return TansuBroker(data_dir, log_file=(log_dir / f"{data_dir.name}.broker.log")
                           if log_dir else None)
    extra = {"log.flush.interval.messages": 1} if durable else {}
    if kind in ("kafka", "kafka-default"):
        return KafkaBroker(data_dir, properties=extra, name=kind)
    if kind == "kafka-tuned":
        return KafkaBroker(data_dir, properties={**KAFKA_TUNED_PROPERTIES, **extra},
                           jvm_flags=KAFKA_TUNED_JVM_FLAGS, name=kind)
    if kind.startswith("headrace-w"):
        if ZOOKEEPER is None:
            raise RuntimeError(f"{kind} needs ZooKeeper (brokers.ZOOKEEPER)")
        log = (log_dir / f"{data_dir.name}.broker.log") if log_dir else None
        return HeadraceWorkers(data_dir, int(kind[len("headrace-w"):]), ZOOKEEPER,
                               {**HEADRACE_PARITY, **extra}, log_file=log,
                               pythonpath=HEADRACE_PATH, cpus=BROKER_CPUS)
    if kind in ("headrace", "headrace-single"):
        extra = {**HEADRACE_PARITY, **extra}
        log = (log_dir / f"{data_dir.name}.broker.log") if log_dir else None
        return HeadraceBroker(data_dir, overrides=extra, log_file=log,
                              port=free_port_block(1) if fixed_port else 0,
                              pythonpath=HEADRACE_PATH)
    raise ValueError(kind)


# --------------------------------------------------------------------------------------------
# Tools


LAST_TOOL: dict[str, float] = {}  # client_cpu: the last tool's share of a core (JVM start included)


def java_tool(main: str | Path, args: list[str], log_file: Path, timeout: float = 900,
              cpus: set[int] | None = None, version: str = KAFKA_VERSION,
              on_line=None) -> str:
    """Run a Kafka tool main class (or a single-file Java program, given as a path) pinned to
    ``cpus``; its output goes to ``log_file`` and ``on_line`` sees each stdout line as it
    comes. Returns stdout. Raises on a non-zero exit or a timeout."""
    cpus = cpus if cpus is not None else CLIENT_CPUS
    cmd = ["java", *TOOL_JVM_FLAGS, *log_flags(version, tool=True), "-cp", classpath(version),
           str(main), *args]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(log_file, "a") as log:
        log.write("$ " + " ".join(cmd[-len(args) - 1:]) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                stdin=subprocess.DEVNULL,
                                preexec_fn=pinned(cpus))
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.append(line)
                log.write(line)
                if on_line:
                    on_line(line.rstrip("\n"))
            rc = proc.wait()
        except BaseException:  # interrupted: do not leave the tool running
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    LAST_TOOL["client_cpu"] = cpu / max(time.monotonic() - t0, 1e-9)
    text = "".join(out)
    if rc != 0:
        raise RuntimeError(f"{main} exited with {rc}; see {log_file}\n{text[-2000:]}")
    return text


def metered_tool(broker: Broker, main: str | Path, args: list[str], log_file: Path,
                 on_line=None) -> tuple[str, dict]:
    """``java_tool`` with the CPU metered over its run. Returns its stdout and the CPU figures:
    broker_cpu (the broker's share of a core), the CPUs' busy shares (``CpuMeter.report``) and
    client_cpu (the tool's share of a core)."""
    meter = CpuMeter(broker.pids).start()
    out = java_tool(main, args, log_file, on_line=on_line)
    cpu = {"broker_cpu": meter.stop(), **meter.report, "client_cpu": LAST_TOOL.get("client_cpu")}
    return out, cpu


def wait_metadata(broker: Broker, timeout: float = 60.0) -> None:
    wire.wait_ready(HOST, broker.port, timeout)
