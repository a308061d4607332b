"""The compatibility matrix: the section of docs/clients.md, the longer ``matrix.md``, and the
rewrite of that section."""

from __future__ import annotations

import subprocess
from pathlib import Path

from compat.clients import (CLIENT_SCENARIOS, CLIENTS, CLUSTER_SCENARIOS, ROOT,
                            SECURITY_SCENARIOS, SPARK_SCENARIOS, TOOL_SCENARIOS, log)

PAGE = ROOT / "docs" / "clients.md"  # the page with the matrix (it was in README.md)


TABLES = {
    "clients": ("Clients", CLIENT_SCENARIOS),
    "tools": ("Kafka's command-line tools (run through their main classes)", TOOL_SCENARIOS),
    "spark": ("Spark (PySpark, Spark's Kafka source and sink)", SPARK_SCENARIOS),
    "cluster": ("A cluster of three brokers (ZooKeeper, `headrace serve --workers 3`; the "
                "`-cluster-kill` rows: three `headrace serve` processes with "
                "`zookeeper.session.timeout.ms=6000`, the partition leader killed with SIGKILL "
                "mid-produce, or mid-consume by share consumers and then started again)",
                CLUSTER_SCENARIOS),
    "security": ("Security (one broker with an SSL, a mutual-TLS, a SASL_SSL listener with "
                 "SCRAM-SHA-512 and a SASL_PLAINTEXT one with PLAIN; certificates made for the "
                 "run)", SECURITY_SCENARIOS),
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
    alone_cli = [n if not c.in_tests else f"{n} (but for its {' and '.join(c.in_tests)})"
                 for n, c in CLIENTS.items() if c.in_tests is not True]
    lines = [
        "```sh",
        "python -m compat                      # every client below; installs them; ~8 min once cached",
        "python -m compat --client kafkajs     # one client",
        "python -m compat --client java4-cluster  # a client against a cluster of three brokers",
        "python -m compat --client kcat-security  # a client against TLS and SASL listeners",
        "python compat/spark/pipeline.py       # the Spark pipeline example on its own broker",
        "```",
        "",
        f"Last whole run: {matrix.get('generated', '?')} against Headrace "
        f"{matrix.get('headrace', '?')}, {matrix.get('minutes', '?')} min "
        f"(details: `compat/results/matrix.md`). `pytest tests/compat` runs the same suite "
        f"as tests" + (f", without {', '.join(alone_cli)} (`python -m compat` only)"
                       if alone_cli else "") + "."]
    alone = [f"{n} ({e['run']})" for n, e in matrix.get("clients", {}).items()
             if e.get("run") and not e["run"].startswith(str(matrix.get("generated")))]
    if alone:
        lines += ["", "Rows run on their own since: " + "; ".join(alone) + "."]
    failures: list[str] = []
    clients = matrix.get("clients", {})
    for table, (title, scenarios) in TABLES.items():
        rows = [n for n in CLIENT_ORDER if clients.get(n, {}).get("table") == table]
        if not rows:
            continue
        lines += ["", f"**{title}**", ""]
        # the table's title says it
        heads = [s.removeprefix("cluster-").removeprefix("security-") for s in scenarios]
        lines.append("| client | version | " + " | ".join(heads) + " |")
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


def update_readme(section: str, path: Path = PAGE) -> bool:
    """``section`` between the markers of ``path`` (docs/clients.md); False without them."""
    text = path.read_text()
    if README_START not in text or README_END not in text:
        log(f"{path.name} has no {README_START} ... {README_END} markers; left alone")
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
