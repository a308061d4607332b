"""Run real Kafka clients against Headrace and write the compatibility matrix.

    python -m compat                      # every client (installs what it needs first)
    python -m compat --client java39 --client kcat
    python -m compat --list               # clients and their scenarios
    python -m compat --no-readme          # leave README.md alone

Each client is installed the way its users install it (Maven Central jars, PyPI, npm, the Go
module proxy, Debian), into caches in known places: ``~/.m2`` (Maven), ``~/.cache/pip``,
``~/.cache/headrace/`` (Go modules and build cache, the Kafka class path), and
``compat/kafkajs/node_modules``. Every client gets a fresh Headrace broker on a free port of
127.0.0.1; each scenario runs as its own process with a timeout, so one hung client cannot
stop the others. The results go to ``compat/results/matrix.json`` and ``matrix.md`` and to the
README section between ``<!-- compat-matrix:start -->`` and ``<!-- compat-matrix:end -->``.

A partial run (``--client``) replaces only the rows of the clients it ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
RESULTS = COMPAT / "results"
README = ROOT / "README.md"
CACHE = Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))

sys.path.insert(0, str(ROOT))
from compat import kit  # noqa: E402
from compat.broker import complaints_since, tail  # noqa: E402
from headrace.broker.process import BrokerProcess  # noqa: E402


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


# --------------------------------------------------------------------------------------------
# Clients


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
JAVA_VERSIONS = {"java39": ("3.9.2", None), "java4": ("4.0.2", "kafka40")}


def _java_setup(name: str) -> Callable[[], list[str]]:
    version, profile = JAVA_VERSIONS[name]

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


def _tools_setup(version: str) -> Callable[[], list[str]]:
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
# consumer protocol (group.protocol=consumer)
JAVA_SCENARIOS = STD + ("group-consumer-protocol",)
TOOL_SCENARIOS = ("kafka-topics", "kafka-console-producer", "kafka-console-consumer",
                  "kafka-consumer-groups", "kafka-consumer-groups-kip848", "kafka-configs",
                  "kafka-producer-perf-test", "kafka-consumer-perf-test", "kafka-transactions")
SPARK_SCENARIOS = ("batch-read", "streaming-windows", "streaming-restart", "starting-offsets",
                   "starting-offsets-by-timestamp", "subscribe-pattern")

CLIENTS: dict[str, Client] = {c.name: c for c in [
    Client("java39", "Java kafka-clients", JAVA_SCENARIOS, _java_setup("java39"),
           version=JAVA_VERSIONS["java39"][0]),
    Client("java4", "Java kafka-clients", JAVA_SCENARIOS, _java_setup("java4"),
           version=JAVA_VERSIONS["java4"][0]),
    Client("confluent-kafka", "librdkafka via confluent-kafka (PyPI)", STD,
           _python_client("confluent-kafka", {"confluent_kafka": "confluent-kafka"})),
    Client("kcat", "librdkafka via kcat (Debian)", STD, _kcat_setup),
    Client("kafka-python", "kafka-python (PyPI)", STD,
           _python_client("kafka-python", {"kafka": "kafka-python"})),
    Client("aiokafka", "aiokafka (PyPI)", STD,
           _python_client("aiokafka", {"aiokafka": "aiokafka"})),
    Client("kafkajs", "kafkajs (npm)", STD, _kafkajs_setup),
    Client("franz-go", "franz-go (Go)", STD, _franz_setup),
    Client("kafka-tools-3.9", "Kafka's tools (main classes from Maven Central)", TOOL_SCENARIOS,
           _tools_setup("3.9.2"), table="tools", timeout=120, version="3.9.2"),
    Client("kafka-tools-4.0", "Kafka's tools (main classes from Maven Central)", TOOL_SCENARIOS,
           _tools_setup("4.0.2"), table="tools", timeout=120, version="4.0.2"),
    Client("spark", "PySpark with spark-sql-kafka-0-10", SPARK_SCENARIOS, _spark_setup,
           table="spark", timeout=420),
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
}


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


# --------------------------------------------------------------------------------------------
# Running


@dataclass
class Outcome:
    status: str            # "pass", "fail", "n/a"
    reason: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "seconds": round(self.seconds, 1)}


RESULT_RE = re.compile(r"^RESULT (pass|fail|n/a)\s?(.*)$")


def run_scenario(cmd: list[str], bootstrap: str, scenario: str, prefix: str, timeout: float,
                 env: dict | None, log_file: Path) -> Outcome:
    t0 = time.monotonic()
    with open(log_file, "w") as out:
        proc = subprocess.Popen([*cmd, bootstrap, scenario, prefix], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=ROOT, start_new_session=True)
        try:
            code = proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            code = proc.wait()
            timed_out = True
    seconds = time.monotonic() - t0
    text = log_file.read_text(errors="replace")
    for line in reversed(text.splitlines()):
        m = RESULT_RE.match(line.strip())
        if m:
            return Outcome(m.group(1), m.group(2).strip(), seconds)
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-3:]
    if timed_out:
        return Outcome("fail", f"timed out after {timeout:.0f}s; last output: "
                       + " | ".join(tail)[-400:], seconds)
    return Outcome("fail", f"exited with {code} without a result: " + " | ".join(tail)[-400:],
                   seconds)


def run_client(client: Client, only: list[str] | None, logs: Path) -> dict:
    log(f"== {client.name}: {client.title}")
    t0 = time.monotonic()
    entry: dict = {"title": client.title, "table": client.table, "scenarios": {}}
    try:
        cmd = client.setup()
    except Unavailable as exc:
        log(f"{client.name} unavailable: {exc}")
        entry.update(unavailable=str(exc)[:600], version=client.version)
        entry["scenarios"] = {s: Outcome("n/a", f"client unavailable: {exc}"[:300]).as_json()
                              for s in client.scenarios}
        return entry
    entry["version"] = client.version or VERSIONS.get(client.name, lambda: "")()
    env = client.env() if client.env else None
    data_dir = Path(tempfile.mkdtemp(prefix=f"headrace-compat-{client.name}-"))
    broker = BrokerProcess(data_dir)
    stamp = dt.datetime.now().strftime("%H%M%S")
    try:
        for scenario in client.scenarios:
            if only and scenario not in only:
                continue
            if broker.proc is not None and not broker.alive:
                log(f"  broker died; restarting it. Last output: {tail(broker, 5)}")
                broker.stop()
                (logs / f"{client.name}__broker-died.log").write_text("\n".join(broker.lines))
                broker = BrokerProcess(data_dir)
            if broker.proc is None:
                broker.start()
            prefix = f"c{stamp}-{client.name}-{scenario}".replace(".", "")
            print(f"[compat]   {client.name} {scenario} ... ", end="", flush=True)
            mark = broker.seen
            outcome = run_scenario(cmd, broker.bootstrap, scenario, prefix, client.timeout,
                                   env, logs / f"{client.name}__{scenario}.log")
            complaints = complaints_since(broker, mark)
            if outcome.status == "fail" and complaints:
                outcome.reason += " [broker log: " + " / ".join(complaints) + "]"
            if not broker.alive:
                outcome = Outcome("fail", f"broker process died: {tail(broker, 3)}; "
                                  + outcome.reason, outcome.seconds)
            mark = "FAIL: " + outcome.reason if outcome.status == "fail" else outcome.status
            print(f"{mark[:300]} ({outcome.seconds:.1f}s)", flush=True)
            entry["scenarios"][scenario] = outcome.as_json()
    finally:
        broker.stop()
        (logs / f"{client.name}__broker.log").write_text("\n".join(broker.lines) + "\n")
        shutil.rmtree(data_dir, ignore_errors=True)
    entry["seconds"] = round(time.monotonic() - t0, 1)
    return entry


# --------------------------------------------------------------------------------------------
# Matrix


TABLES = {
    "clients": ("Clients", JAVA_SCENARIOS),
    "tools": ("Kafka's command-line tools (run through their main classes)", TOOL_SCENARIOS),
    "spark": ("Spark (PySpark, Spark's Kafka source and sink)", SPARK_SCENARIOS),
}

CLIENT_ORDER = list(CLIENTS)


def _cell(result: dict | None) -> str:
    if not result:
        return "-"
    if result["status"] == "pass":
        return "pass"
    if result["status"] == "n/a":
        return "n/a"
    return "**FAIL**"


def render_markdown(matrix: dict) -> str:
    lines = [
        "```sh",
        "python -m compat                      # every client below; installs them; ~6 min once cached",
        "python -m compat --client kafkajs     # one client",
        "python compat/spark/pipeline.py       # the Spark pipeline example on its own broker",
        "```",
        "",
        f"Last run: {matrix.get('generated', '?')} against Headrace "
        f"{matrix.get('headrace', '?')}, {matrix.get('minutes', '?')} min "
        f"(details: `compat/results/matrix.md`). `pytest tests/compat` runs the same suite "
        f"as tests."]
    failures: list[str] = []
    clients = matrix.get("clients", {})
    for table, (title, scenarios) in TABLES.items():
        rows = [n for n in CLIENT_ORDER if clients.get(n, {}).get("table") == table]
        if not rows:
            continue
        lines += ["", f"**{title}**", ""]
        lines.append("| client | version | " + " | ".join(scenarios) + " |")
        lines.append("|---|---|" + "---|" * len(scenarios))
        for name in rows:
            entry = clients[name]
            cells = [_cell(entry["scenarios"].get(s)) for s in scenarios]
            lines.append(f"| {name} | {entry.get('version', '')} | " + " | ".join(cells) + " |")
            for s in scenarios:
                r = entry["scenarios"].get(s)
                if r and r["status"] == "fail":
                    failures.append(f"- {name} / {s}: {_md_escape(r['reason'])}")
    if failures:
        lines += ["", "Failing scenarios and why:", ""] + failures
    na = []
    for name in CLIENT_ORDER:
        entry = clients.get(name)
        if not entry:
            continue
        reasons = sorted({r["reason"] for r in entry["scenarios"].values()
                          if r["status"] == "n/a" and r["reason"]})
        if reasons:
            na.append(f"- {name}: " + "; ".join(_md_escape(x) for x in reasons))
    if na:
        lines += ["", "n/a means the client has no way to do it:", ""] + na
    lines += ["", "- means the scenario is not run for that client."]
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:500]


def render_details(matrix: dict) -> str:
    """The longer matrix.md: the tables plus every scenario's time and reason."""
    out = ["# Headrace compatibility matrix", "", render_markdown(matrix), "## Every scenario", ""]
    out.append("| client | scenario | result | seconds | reason |")
    out.append("|---|---|---|---|---|")
    for name in CLIENT_ORDER:
        entry = matrix.get("clients", {}).get(name)
        if not entry:
            continue
        for s, r in entry["scenarios"].items():
            out.append(f"| {name} | {s} | {r['status']} | {r['seconds']} | "
                       f"{_md_escape(r['reason'])} |")
    return "\n".join(out) + "\n"


README_START = "<!-- compat-matrix:start -->"
README_END = "<!-- compat-matrix:end -->"


def update_readme(section: str, path: Path = README) -> bool:
    text = path.read_text()
    if README_START not in text or README_END not in text:
        log(f"README has no {README_START} ... {README_END} markers; left alone")
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(f"{head}{README_START}\n{section}{README_END}{tail}")
    return True


def headrace_version() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"commit {rev}" if rev else "(no git)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compat", description=__doc__.split("\n")[0])
    ap.add_argument("--client", action="append", choices=list(CLIENTS),
                    help="run only this client (repeatable)")
    ap.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    ap.add_argument("--list", action="store_true", help="list clients and scenarios")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite README.md")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = ap.parse_args(argv)

    if args.list:
        for c in CLIENTS.values():
            print(f"{c.name:18} {c.title}: {' '.join(c.scenarios)}")
        return 0
    names = args.client or list(CLIENTS)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    json_path = args.out / "matrix.json"
    matrix = json.loads(json_path.read_text()) if json_path.exists() else {"clients": {}}
    t0 = time.monotonic()
    for name in names:
        entry = run_client(CLIENTS[name], args.scenario, logs)
        old = matrix["clients"].get(name)
        if args.scenario and old:  # keep the scenarios this run did not touch
            old["scenarios"].update(entry["scenarios"])
            entry["scenarios"] = {s: old["scenarios"][s] for s in CLIENTS[name].scenarios
                                  if s in old["scenarios"]}
        matrix["clients"][name] = entry
        # written after every client, so an interrupted run still leaves results
        matrix["generated"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        matrix["headrace"] = headrace_version()
        json_path.write_text(json.dumps(matrix, indent=1) + "\n")
    matrix["clients"] = {n: matrix["clients"][n] for n in CLIENT_ORDER if n in matrix["clients"]}
    if not args.client:
        matrix["minutes"] = round((time.monotonic() - t0) / 60, 1)
    json_path.write_text(json.dumps(matrix, indent=1) + "\n")
    (args.out / "matrix.md").write_text(render_details(matrix))
    section = render_markdown(matrix)
    print()
    print(section)
    if not args.no_readme and args.out == RESULTS:
        update_readme(section)
    elapsed = time.monotonic() - t0
    log(f"finished in {elapsed / 60:.1f} min; matrix in {json_path}")
    ran = [matrix["clients"][n] for n in names]
    failed = sum(r["status"] == "fail" for e in ran for r in e["scenarios"].values())
    log(f"{failed} failing scenario(s) in this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
