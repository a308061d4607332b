"""Results table (markdown + JSON), plots (PNG), the docs page and profile summaries.

    python -m bench.report bench/results/results.json           # re-render table and plots
    python -m bench.report bench/results/results.json --readme  # ... and the docs pages

``--readme`` writes the Benchmarks section of ``docs/benchmarks.md``, the list of re-runs in
``docs/benchmarks-history.md`` and the headline figures in README.md, each between its markers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zlib
from collections import defaultdict
from pathlib import Path

from bench import brokers
from bench.machine import memory_text
from bench.scenarios import LABELS, SCENARIOS, UNITS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGE = ROOT / "docs" / "benchmarks.md"  # the Benchmarks section (it was in README.md)
HISTORY = "benchmarks-history.md"  # beside the page: the re-runs of single scenarios
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
HISTORY_START, HISTORY_END = "<!-- bench-history:start -->", "<!-- bench-history:end -->"
HEADLINE_START, HEADLINE_END = "<!-- bench-headline:start -->", "<!-- bench-headline:end -->"
PLOTS = ("throughput.png", "saturation.png", "latency.png", "ratios.png")


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(entry: dict, metric: str, over: str = "kafka") -> float | None:
    """Headrace's median ``metric`` over that of the system ``over`` ("kafka", "tansu")."""
    med = entry.get("median", {})
    k = med.get(over, {}).get(metric)
    h = med.get("headrace", {}).get(metric)
    if k is None or h is None or k == 0:
        return None
    return h / k


def systems(scenarios: dict) -> list[str]:
    """The systems the tables show: Kafka and Headrace always, Tansu when it was run."""
    def ran(entry: dict) -> bool:
        return any(k.startswith("tansu") for part in ("kinds", "samples", "median", "skipped")
                   for k in entry.get(part, {}))
    return ["kafka", "headrace"] + (["tansu"] if any(map(ran, scenarios.values())) else [])


def verdicts(results: dict) -> list[dict]:
    """One row per scenario bar: metric, medians, ratio, bar text, met (True/False/None)."""
    out = []
    for sid, entry in results["scenarios"].items():
        sc = SCENARIOS[sid]
        for bar in sc.bars:
            r = ratio(entry, bar.metric)
            note = entry.get("error") or "; ".join(
                s["reason"].splitlines()[0] for ss in entry.get("samples", {}).values()
                for s in ss[:1] if s.get("status"))
            out.append({"scenario": sid, "metric": bar.metric, "bar": bar.text(),
                        "ratio": r, "met": bar.met(r), "note": note or None})
    return out


def _cell(entry: dict, system: str, metric: str) -> str:
    """Median, with (min-max) over the runs when there were several."""
    v = entry.get("median", {}).get(system, {}).get(metric)
    rng = entry.get("range", {}).get(system, {}).get(metric)
    if v is None:
        if system in entry.get("skipped", {}):
            return "skipped"
        failed = not entry.get("median", {}).get(system) and system in entry.get("median", {})
        return "failed" if failed else "-"
    if rng and rng[0] != rng[1]:
        return f"{_fmt(v)} ({_fmt(rng[0])}-{_fmt(rng[1])})"
    return _fmt(v)


def _compared(entry: dict) -> str:
    """The variants compared, when a system has more than one: " (kafka-default, headrace-w2)"."""
    names = [k for k in (entry.get("best_kafka"), entry.get("headrace_kind"))
             if k and k not in ("kafka", "headrace")]
    return f" ({', '.join(names)})" if names else ""


def table(results: dict, scenarios: dict | None = None) -> str:
    """One block per scenario: each metric for the better Kafka variant and Headrace (median,
    min-max over the runs), the ratio, the bar from the issue and whether it is met; with
    Tansu run, its column and a Headrace/Tansu ratio beside them (no bar: the bars are the
    issue's, against Kafka)."""
    scen = results["scenarios"] if scenarios is None else scenarios
    limit = results.get("loopback", {}).get("limit")
    threshold = results.get("machine", {}).get("dirty_threshold_bytes")
    shown = systems(scen)
    tansu = "tansu" in shown
    names = {"kafka": "Kafka (better variant)", "headrace": "Headrace", "tansu": "Tansu"}
    lines = [
        "| scenario | metric | " + " | ".join(names[x] for x in shown) + " | Headrace/Kafka | "
        + ("Headrace/Tansu | " if tansu else "") + "bar | met |",
        "|---|---|" + "---:|" * len(shown) + "---:|" + ("---:|" if tansu else "") + "---|---|",
    ]
    width = 2 + len(shown) + 1 + tansu + 2

    def row(name: str, label: str, cells: list[str]) -> str:
        """A line of the table: ``cells`` after the label, the rest left empty."""
        return "| " + " | ".join([name, label, *cells] + [""] * (width - 2 - len(cells))) + " |"

    def per_system(values: list, fmt) -> list[str]:
        return ["-" if v is None or v == 0 else fmt(v) for v in values]

    for sid, entry in scen.items():
        sc = SCENARIOS.get(sid)
        if sc is None:
            continue
        med = entry.get("median", {})
        bars = {b.metric: b for b in sc.bars}
        first = True
        for m in sc.metrics:
            if all(med.get(x, {}).get(m) is None for x in shown) and m not in bars:
                continue
            r = ratio(entry, m)
            b = bars.get(m)
            met = "" if b is None else {True: "yes", False: "**no**", None: "n/a"}[b.met(r)]
            label = f"{LABELS.get(m, m)} ({UNITS.get(m, '')})"
            name = f"{sid}: {entry.get('title', sc.title)}" if first else ""
            ratios = [r] + ([ratio(entry, m, over="tansu")] if tansu else [])
            lines.append(row(name, label, [_cell(entry, x, m) for x in shown]
                             + ["-" if q is None else f"{q:.2f}x" for q in ratios]
                             + [b.text() if b else "", met]))
            first = False
        if first:
            lines.append(row(f"{sid}: {entry.get('title', sc.title)}", "(no results)", []))
        sat = [med.get(x, {}).get("saturation_clients") for x in shown]
        if any(sat):
            lines.append(row("", f"client processes at the maximum{_compared(entry)}",
                             ["-" if v is None else f"{v:g}" for v in sat]))
        compared = (entry.get("best_kafka"), entry.get("headrace_kind"), *brokers.SYSTEMS)
        others = [k for k in entry.get("kinds", entry.get("samples", {})) if k not in compared]
        for kind in others:
            metric = sc.primary if sc.kind in ("produce", "consume") else (
                sc.bars[0].metric if sc.bars else "")
            v = med.get(kind, {}).get(metric)
            lines.append(row("", f"{kind} (not compared): {LABELS.get(metric, metric)}",
                             [_fmt(v) if v is not None else "failed"]))
        if sc.dirty and threshold:
            wrote = [med.get(x, {}).get("bytes") for x in shown]
            lines.append(row("", f"written per run vs dirty threshold {threshold / 2**30:.1f} "
                             "GiB", per_system(wrote, lambda w: f"{w / 2**30:.1f} GiB "
                                               f"({'above' if w > threshold else 'below'})")))
        if entry.get("error"):
            lines.append(row("", f"failed: {entry['error'].splitlines()[0][:120]}", []))
        for kind, st in entry.get("status", {}).items():
            if st.startswith("failed"):
                lines.append(row("", f"{kind}: {st[:200]}", []))
        for kind, why in entry.get("skipped", {}).items():
            lines.append(row("", f"{kind}: skipped: {why[:200]}", []))
        retries = [med.get(x, {}).get("retries") for x in shown]
        if any(retries):
            lines.append(row("", "producer retries (median per run)",
                             ["-" if v is None else f"{v:g}" for v in retries]))
        if limit and sc.kind in ("produce", "consume"):
            share = [med.get(x, {}).get("mb_per_sec") for x in shown]
            if any(share):
                lines.append(row("", "share of loopback limit (bytes/s)",
                                 per_system(share, lambda v: f"{v * 2**20 / limit:.0%}")))
    return "\n".join(lines)


def curve_table(scen: dict) -> str:
    """MiB/s (MiB per broker CPU-second) per client-process count, per broker variant."""
    rows = []
    counts = sorted({s["clients"] for e in scen.values() for d in e.get("kinds", {}).values()
                     for s in d.get("curve", []) if s.get("clients")})
    for sid, entry in scen.items():
        for kind, d in entry.get("kinds", {}).items():
            by = {s.get("clients"): s for s in d.get("curve", [])}
            cells = []
            for n in counts:
                s = by.get(n)
                if s is None:
                    cells.append("")
                elif s.get("status"):
                    cells.append(s["status"])
                else:
                    cells.append(f"{_fmt(s['mb_per_sec'])} ({_fmt(s['mib_per_broker_cpu_s'])}, "
                                 f"{s['broker_cores']:.2f} cores)")
            rows.append(f"| {sid} | {kind} | " + " | ".join(cells) + " |")
    if not rows:
        return ""
    return ("| scenario | broker | " + " | ".join(f"{n} client{'s' * (n > 1)}" for n in counts)
            + " |\n|---|---|" + "---:|" * len(counts) + "\n" + "\n".join(rows))


def sweep_table(scen: dict) -> str:
    rows = []
    for sid, entry in scen.items():
        for kind, d in entry.get("kinds", {}).items():
            for s in d.get("sweep", []):
                if s.get("status"):
                    rows.append(f"| {sid} | {kind} | {s.get('load')} | {s['status']}: "
                                f"{s['reason'].splitlines()[0][:100]} | | | | |")
                    continue
                load = s["load"] + (f" ({s['note']})" if s.get("note") else "")
                rows.append(f"| {sid} | {kind} | {load} | "
                            f"{_fmt(s.get('offered_records_per_sec'))} | "
                            f"{_fmt(s['mb_per_sec'])} | {_fmt(s['p50_ms'])} | "
                            f"{_fmt(s['p99_ms'])} | {_fmt(s['p999_ms'])} |")
    if not rows:
        return ""
    return ("| scenario | broker | load | offered rec/s | MiB/s | p50 ms | p99 ms | p99.9 ms |\n"
            "|---|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows))


def machine_text(results: dict) -> str:
    m = results.get("machine", {})
    fs = m.get("data_filesystem", {})
    f0, f1 = m.get("fsync_start", {}), m.get("fsync_end", {})
    thr = m.get("dirty_threshold_bytes")
    java = (m.get("java_full") or m.get("java") or "java ?").splitlines()
    parts = [f"{m.get('cpu_model', '?')}, {m.get('cpus')} CPUs, {m.get('mem_gib', '?')} GiB "
             f"(MemAvailable {(m.get('mem_available_bytes') or 0) / 2**30:.1f} GiB), "
             f"kernel {m.get('kernel', '?')}, {'; '.join(java[:1] + java[-1:])}."]
    if fs:
        parts.append(f"Data directory on {fs.get('fstype')} ({fs.get('source')}, mounted "
                     f"{fs.get('options')}).")
    if f0.get("p50_ms") is not None:
        parts.append(f"fdatasync of a 4 KiB append there: p50 {f0['p50_ms']:.2f} ms, p99 "
                     f"{f0['p99_ms']:.2f} ms at the start"
                     + (f", p50 {f1['p50_ms']:.2f} ms, p99 {f1['p99_ms']:.2f} ms at the end"
                        if f1.get("p50_ms") is not None else "") + ".")
    if thr:
        parts.append(f"Dirty page threshold {thr / 2**30:.1f} GiB (vm.dirty_ratio "
                     f"{m.get('vm.dirty_ratio')}% of MemAvailable, vm.dirty_bytes "
                     f"{m.get('vm.dirty_bytes')}; background "
                     f"{m.get('vm.dirty_background_ratio')}%).")
    if m.get("memory_kept"):
        text = memory_text(m["memory_kept"], "")
        parts.append(text[0].upper() + text[1:] + ".")
    return " ".join(parts)


def _load_range(results: dict) -> str:
    entries = list(results["scenarios"].values()) + [
        e for b in results.get("layouts", {}).values() for e in b.get("scenarios", {}).values()]
    runs = [x for e in entries for ss in e.get("samples", {}).values() for x in ss] + [
        x for e in entries for d in e.get("kinds", {}).values()
        for key in ("curve", "samples", "sweep") for x in d.get(key, [])]
    loads = sorted(x["loadavg"][0] for x in runs if x.get("loadavg"))
    if not loads:
        return "-"
    return f"{loads[0]:.2f} to {loads[-1]:.2f}, median {loads[len(loads) // 2]:.2f}"


def _headrace_at(results: dict) -> str:
    m = results.get("machine", {})
    at = results.get("headrace_at", "worktree")
    if at != "worktree":
        return f"commit {at}"
    return (f"{m.get('git_commit', '?')}"
            + (" plus uncommitted changes" if m.get("git_dirty") else ""))


CPU_COLUMNS = (("broker_cpu", "broker process"), ("client_cpu", "client tool"),
               ("other_on_broker_cpu", "rest of the broker's CPU busy"),
               ("foreign_cpu", "other use of both CPUs"))


def _foreign(sample: dict) -> float | None:
    keys = ("broker_cpu_busy", "client_cpu_busy", "broker_cpu", "client_cpu")
    if any(sample.get(k) is None for k in keys):
        return None
    return max(0.0, sample["broker_cpu_busy"] + sample["client_cpu_busy"]
               - sample["broker_cpu"] - sample["client_cpu"])


def cpu_table(results: dict) -> str:
    """Median share of one core per run: what the broker used, what the client used, and
    what else ran on the broker's CPU (a shared machine shows up here)."""
    rows = []
    shown = systems(results["scenarios"])
    for sid, entry in results["scenarios"].items():
        med = entry.get("median", {})
        cells = []
        for key, _ in CPU_COLUMNS:
            if key == "foreign_cpu":
                vals = []
                for kind in shown:
                    fs = sorted(f for f in map(_foreign, entry.get("samples", {}).get(kind, []))
                                if f is not None)
                    vals.append(fs[len(fs) // 2] if fs else None)
            else:
                vals = [med.get(k, {}).get(key) for k in shown]
            cells.append(" / ".join("-" if v is None else f"{v:.2f}" for v in vals))
        if any(set(c.split(" / ")) != {"-"} for c in cells):
            rows.append(f"| {sid} | " + " | ".join(cells) + " |")
    if not rows:
        return ""
    head = ("| scenario | " + " | ".join(label for _, label in CPU_COLUMNS) + " |\n"
            + "|---|" + "---:|" * len(CPU_COLUMNS) + "\n")
    return ("CPU used during the runs (median share of one core, "
            + " / ".join(x.capitalize() for x in shown) + "). *broker "
            "process*: the broker's own user+system time; *client tool*: the perf tool's, JVM "
            "start included; *rest of the broker's CPU busy*: time the broker's CPU spent on "
            "anything else; *other use of both CPUs*: busy time of the two CPUs beyond the broker "
            "and the client, in cores (other processes on a shared machine, kernel writeback "
            "and network softirqs):\n\n" + head + "\n".join(rows) + "\n")


def reruns_text(results: dict) -> list[str]:
    """One line per re-run of some scenarios merged into ``results`` (``bench.run --merge``)."""
    return [f"Re-run of {', '.join(r['scenarios'])} with `{r['command']}` at {r['stamp']} "
            f"(Headrace at {r.get('headrace_at')}, load average at start "
            f"{r['loadavg_start']}{memory_text(r.get('memory_kept'), '; ')})."
            for r in results.get("reruns", [])]


def tansu_text(results: dict) -> str:
    """What the Tansu column is (version, storage and what that storage keeps), or nothing
    when Tansu was not run."""
    t = results.get("tansu")
    if not t and "tansu" not in systems(results["scenarios"]):
        return ""
    t = t or {}
    return (f"Tansu {t.get('version', '?')} (Rust, crates.io, `cargo install --features "
            f"{','.join(t.get('features', ['?']))}`; `python -m bench.run --brokers "
            f"...,tansu`), one process as Kafka and Headrace, same disk. Storage: "
            f"{t.get('storage', '?')}: like Kafka's and Headrace's defaults an acknowledged "
            "record is in the page cache, not yet on the disk; it has no durable mode, so it "
            "skips S2. Headrace/Tansu: Headrace's median over Tansu's (no bar: the bars are "
            "against Kafka).")


def markdown(results: dict, history: str | None = None) -> str:
    """The whole results text. With ``history`` (a link) one line stands for the re-run lines,
    which the docs keep on a page of their own."""
    m = results.get("machine", {})
    lb = results.get("loopback", {})
    la = results.get("loadavg_start")
    foreign = [f for entry in results["scenarios"].values()
               for samples in entry.get("samples", {}).values()
               for f in map(_foreign, samples) if f is not None]
    others = [s.get("other_processes_cores") for entry in results["scenarios"].values()
              for d in entry.get("kinds", {}).values() for s in d.get("samples", [])
              if s.get("other_processes_cores") is not None]
    busy = (max(foreign) > 0.2 if foreign else False) or (max(others) > 0.3 if others else False) \
        or bool(la and la[0] > 0.7)
    layouts = results.get("layouts", {})
    head_layout = results.get("headline_layout", "pinned")
    hl = layouts.get(head_layout, {})
    head = [
        f"Command: `{results['command']}` ({results['size']} size: measured runs of about "
        f"{results.get('seconds', '?')} s, each broker process warmed up by a discarded run; "
        f"{results['runs']} measured runs per broker variant at its saturation point, "
        f"interleaved; medians with (min-max)). Apache Kafka {m.get('kafka_version')} (KRaft, "
        f"one node) vs Headrace at {_headrace_at(results)}. Headline layout: "
        f"**{head_layout}** (broker CPUs {hl.get('broker_cpus')}, client CPUs "
        f"{hl.get('client_cpus')}; variants {', '.join(hl.get('kinds', []))}). Client "
        f"processes {results.get('clients')} until throughput grows by less than "
        f"{results.get('growth', 0):.0%}.",
        "",
        machine_text(results),
        "",
        *([tansu_text(results), ""] if tansu_text(results) else []),
        f"Load average at start: {la}" + (" (**busy machine: numbers are noisy**)" if busy else "")
        + f"; at end: {results.get('loadavg_end')}; 1-minute load at the start of each run: "
        + _load_range(results) + f". Run took {results.get('elapsed_s', 0) / 60:.1f} min.",
    ]
    reruns = results.get("reruns", [])
    if history is None:
        for line in reruns_text(results):
            head += ["", line]
    elif reruns:
        last = reruns[-1]
        n = f"{len(reruns)} re-run" + ("s" if len(reruns) != 1 else "")
        head += ["", f"Since then {n} measured some scenarios again, each "
                 f"replacing those scenarios' results below; the last at {last['stamp']} "
                 f"(Headrace at {last.get('headrace_at')}). Each with its command: "
                 f"[Benchmarks: re-runs]({history})."]
    if lb:
        head.append("")
        head.append("Loopback limit (iperf3, pinned CPUs): "
                    + ", ".join(f"{k} writes {v / 1e9:.2f} GB/s" for k, v in lb.items()
                                if k != "limit") + ".")
    ap = results.get("append", {})
    if ap:
        head.append("")
        head.append(f"Page-cache append limit (1 MiB pwrites to a new file from Python, broker "
                    f"CPU, same directory): {ap['bytes_per_sec'] / 2**20:.0f} MiB/s"
                    + (f" ({ap['cpu_ms_per_mib']:.2f} ms CPU per MiB; the first 512 MiB "
                       f"{ap['first'] / 2**20:.0f} MiB/s)" if "first" in ap else "")
                    + "; every byte a broker stores in the page cache costs this copy "
                    "(Headrace's durable appends of 256 KiB or more skip it).")
    out = "\n".join(head) + "\n\n" + table(results) + "\n"
    curve = curve_table(results["scenarios"])
    if curve:
        out += ("\nSaturation curves, headline layout: MiB/s (MiB per broker CPU-second, broker "
                "cores) by client processes (consume: each reads the whole topic):\n\n"
                + curve + "\n")
    sweep = sweep_table(results["scenarios"])
    if sweep:
        out += ("\nLatency at equal load (" + (
            "each Produce request's, send to response, every request counted"
            if results.get("driver") == "wire" else
            "ProducerPerformance's own percentiles; several clients: median p50, highest p99 "
            "and p99.9") + "):\n\n" + sweep + "\n")
    for name, block in layouts.items():
        if block.get("scenarios"):
            out += (f"\nLayout **{name}** (broker CPUs {block.get('broker_cpus')}, client CPUs "
                    f"{block.get('client_cpus')}; variants {', '.join(block.get('kinds', []))})"
                    f":\n\n" + table(results, block["scenarios"]) + "\n")
            c = curve_table(block["scenarios"])
            if c:
                out += "\n" + c + "\n"
    cpu = cpu_table(results)
    return out + (f"\n{cpu}" if cpu else "")


def write(results: dict, out_dir: Path, plots: bool = True) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    title = " vs ".join(["Apache Kafka", "Headrace"]
                        + (["Tansu"] if "tansu" in systems(results["scenarios"]) else []))
    (out_dir / "results.md").write_text(f"# {title}\n\n" + markdown(results))
    if plots:
        try:
            write_plots(results, out_dir)
        except ImportError:
            print("matplotlib is not installed: no plots (pip install -e '.[bench]')",
                  file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Plots


def write_plots(results: dict, out_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"kafka": "#555555", "headrace": "#1f77b4", "tansu": "#d98c1f"}
    scen = results["scenarios"]
    shown = systems(scen)

    def samples(sid: str, kind: str, metric: str) -> list[float]:
        return [s[metric] for s in scen.get(sid, {}).get("samples", {}).get(kind, [])
                if metric in s]

    # throughput: S1-S5, MiB/s (S4 in records/s on its own axis would hide; keep MiB/s)
    tp = [(sid, "mb_per_sec")
          for sid in ("S1", "S2", "S3", "S4", "S5") if sid in scen]
    if tp:
        fig, ax = plt.subplots(figsize=(8, 4))
        step = 0.76 / len(shown)
        for i, (sid, metric) in enumerate(tp):
            for j, kind in enumerate(shown):
                vals = samples(sid, kind, metric)
                med = scen[sid].get("median", {}).get(kind, {}).get(metric)
                x = i + (j - (len(shown) - 1) / 2) * step
                if med is not None:
                    ax.bar(x, med, step * 0.95, color=colors[kind], label=kind if i == 0 else None)
                    ax.text(x, med, f"{med:.0f}", ha="center", va="bottom", fontsize=8)
                ax.plot([x] * len(vals), vals, "k.", markersize=4)
        ax.set_xticks(range(len(tp)), [s for s, _ in tp])
        ax.set_ylabel("MiB/s (median, dots: runs)")
        wire_driver = results.get("driver") == "wire"
        ax.set_title("Throughput (" + ("wire clients" if wire_driver else
                                       "ProducerPerformance; S5: ConsumerPerformance") + ")")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png", dpi=110)
        plt.close(fig)

    # latency: S2 and S6 percentiles, log scale
    lat = [(sid, m) for sid, ms in (("S2", ("p99_at_kafka_half_ms",)),
                                    ("S6", ("p50_ms", "p99_ms", "p999_ms")))
           if sid in scen for m in ms]
    if lat:
        fig, ax = plt.subplots(figsize=(8, 4))
        for i, (sid, metric) in enumerate(lat):
            for j, kind in enumerate(("kafka", "headrace")):
                med = scen[sid].get("median", {}).get(kind, {}).get(metric)
                x = i + (j - 0.5) * 0.38
                if med:
                    ax.bar(x, med, 0.36, color=colors[kind], label=kind if i == 0 else None)
                    ax.text(x, med, _fmt(med), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(lat)), [f"{s}\n{LABELS[m].replace('latency ', '')}"
                                        for s, m in lat])
        ax.set_yscale("log")
        ax.set_ylabel("ms (median of runs)")
        rate = re.search(r"fixed rate ([\d.]+ MB/s)", scen.get("S6", {}).get("title", ""))
        ax.set_title("Latency: S2 durable ack p99 at 50% of Kafka's maximum, S6 end to end"
                     + (f" at {rate.group(1)}" if rate else ""))
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "latency.png", dpi=110)
        plt.close(fig)

    # saturation curves: throughput by client processes, per scenario and broker variant
    blocks = [(results.get("headline_layout", ""), scen)] + [
        (name, b["scenarios"]) for name, b in results.get("layouts", {}).items()
        if b.get("scenarios")]
    sids = [sid for sid in ("S1", "S2", "S3", "S4", "S5")
            if any(sid in sc and sc[sid].get("kinds") for _, sc in blocks)]
    if sids:
        fig, axes = plt.subplots(1, len(sids), figsize=(4 * len(sids), 3.8), squeeze=False)
        for ax, sid in zip(axes[0], sids):
            metric = SCENARIOS[sid].primary
            for (layout, sc), style in zip(blocks, ("-", "--", ":")):
                for kind, d in sc.get(sid, {}).get("kinds", {}).items():
                    pts = sorted((s["clients"], s[metric]) for s in d.get("curve", [])
                                 if not s.get("status"))
                    if pts:
                        col = colors[brokers.system_of(kind)]
                        marker = "s" if kind in ("kafka-tuned", "headrace-single") else "o"
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=col,
                                marker=marker, label=f"{kind} ({layout})")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("client processes")
            ax.set_ylabel(f"{LABELS.get(metric, metric)} ({UNITS.get(metric, '')})")
            ax.set_title(sid, fontsize=9)
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=6)
        fig.suptitle("Saturation: throughput by client processes (solid: headline layout)",
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(out_dir / "saturation.png", dpi=110)
        plt.close(fig)

    # ratios against the bars
    rows = [v for v in verdicts(results) if v["ratio"] is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(9, 5))
        for i, v in enumerate(rows):
            bar = next(b for b in SCENARIOS[v["scenario"]].bars if b.metric == v["metric"])
            ax.bar(i, v["ratio"], 0.6, color="#2ca02c" if v["met"] else "#d62728")
            ax.plot([i - 0.35, i + 0.35], [bar.ratio] * 2, "k--")
            ax.text(i, v["ratio"], f"{v['ratio']:.2f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(rows)), [f"{v['scenario']} {LABELS[v['metric']]}"
                                         for v in rows], fontsize=8, rotation=30, ha="right",
                      rotation_mode="anchor")
        ax.set_yscale("log")
        ax.set_ylabel("Headrace / Kafka (dashed: bar)")
        ax.set_title("Headrace vs Kafka against each bar (green: met)")
        fig.tight_layout()
        fig.savefig(out_dir / "ratios.png", dpi=110)
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# The docs pages and the README's headline figures


def _link(target: Path, page: Path) -> str:
    """``target`` as a relative link from ``page`` (which may be in another folder)."""
    return Path(os.path.relpath(target.resolve(), page.resolve().parent)).as_posix()


def _repo_path(path: Path) -> str:
    """``path`` as the repository names it (``bench/results``), for text rather than links."""
    full = path.resolve()
    return full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else str(path)


def readme_section(results: dict, out_dir: Path, page: Path = PAGE) -> str:
    """The Benchmarks section of ``page``: links relative to it, the re-runs on ``HISTORY``."""
    rel = _repo_path(out_dir)
    link = _link(out_dir, page)
    plots = "\n".join(f"![{p[:-4]}]({link}/{p})" for p in PLOTS if (out_dir / p).exists())
    driver = ("a pipelined Produce client (`bench/wireproduce.py`: one prebuilt batch as large "
              "as the scenario's `batch.size`, 5 requests in flight per connection, acks=all) "
              "and a Fetch client that reads only batch headers (`bench/wirefetch.py`); both "
              "need little CPU, so the broker and not the client saturates"
              if results.get("driver") == "wire" else
              "Kafka's own `ProducerPerformance` and `ConsumerPerformance`")
    profiles = sorted(out_dir.glob("profile-*.svg"))
    prof = ""
    if (out_dir / "notes.md").exists():
        prof += (f"\n\nWhat the numbers mean, which bars are met and what stands in the way: "
                 f"[{rel}/notes.md]({link}/notes.md).")
    if profiles:
        prof += ("\n\nFlame graphs (Headrace: py-spy; Kafka: JFR; "
                 "`python -m bench.run --profile`): "
                + ", ".join(f"[{p.stem[8:]}]({link}/{p.name})" for p in profiles)
                + f"; top functions in [{rel}/profiles.md]({link}/profiles.md).")
    peer = (" With Tansu (a Kafka-compatible broker in Rust, `--brokers ...,tansu`) as a third "
            "system, built from crates.io on first use: its column and Headrace/Tansu ratios are "
            "in the tables." if "tansu" in systems(results["scenarios"]) else "")
    return f"""# Benchmarks

Apache Kafka and Headrace on the same machine, one after the other, each driven to saturation
(1, 2, 4, 8 client processes until the broker's throughput stops growing) by {driver}, with
the broker's CPU read from `/proc` beside
every throughput (MiB per broker CPU-second). Headline layout: nothing pinned; second table:
the broker pinned to one CPU. Each system runs in two variants there and the better one is
compared: Kafka with its start scripts' JVM settings and with its operations documentation's,
Headrace with `--workers 2` and as one process (`headrace serve`; scenarios measured before
this variant existed ran `--workers 2` only: each scenario names the variants it compared). Every
run is checked (records stored as acknowledged and consumed as requested, no client errors;
a failed run fails its cell), each broker process takes a discarded warm-up run, and the
latency sweep runs each broker at 25/50/75% of its own maximum (S6: end-to-end latency at a fixed rate,
`bench/java/EndToEndRate.java`).{peer} One command runs everything and writes
`{rel}/results.md`, `results.json` and the plots (how long: `{rel}/notes.md`):

```sh
pip install -e '.[bench]' && python -m bench.run --readme   # Java 17 and Maven needed
python -m bench.run --size tiny --runs 1                     # a quick check
```

Latest results:

{markdown(results, history=HISTORY)}
{plots}{prof}
"""


def history_section(results: dict) -> str:
    """The re-runs merged into ``results``, oldest first (``HISTORY``'s part between markers)."""
    lines = reruns_text(results)
    return "\n\n".join(lines) + "\n" if lines else "No re-runs since the whole run.\n"


def headline_section(results: dict, page: Path, readme: Path) -> str:
    """A few lines for the README: per scenario the figure of its first bar, Kafka beside
    Headrace, and a link to ``page``."""
    m = results.get("machine", {})
    rows = ["| scenario | Apache Kafka | Headrace | Headrace/Kafka |", "|---|---:|---:|---:|"]
    for sid, entry in results["scenarios"].items():
        sc = SCENARIOS.get(sid)
        if sc is None or not sc.bars:
            continue
        metric = sc.bars[0].metric
        r = ratio(entry, metric)
        rows.append(f"| {sid}: {entry.get('title', sc.title)}: {LABELS.get(metric, metric)} "
                    f"({UNITS.get(metric, '')}) | {_cell(entry, 'kafka', metric).split(' (')[0]} "
                    f"| {_cell(entry, 'headrace', metric).split(' (')[0]} | "
                    f"{'-' if r is None else f'{r:.2f}x'} |")
    # the transactions benchmark's figures, from its own run (python -m bench.transactions)
    txn = page.parent.parent / "bench" / "results" / "transactions.json"
    note = ""
    if txn.exists():
        from bench.transactions import headline_rows
        txn_results = json.loads(txn.read_text())
        txn_rows = headline_rows(txn_results)
        rows += txn_rows
        if txn_rows:
            load = (txn_results.get("loadavg_start") or ["?"])[0]
            note = (f" T1 is not a saturation: one transactional producer committing back to "
                    f"back (`python -m bench.transactions`, medians of {txn_results['rounds']} "
                    f"rounds, Kafka's better JVM variant; load average {load} at its start).")
    # the RF=3 cluster comparison's, from its own run (python -m bench.cluster --parts replicated)
    rf3 = page.parent.parent / "bench" / "results" / "cluster-rf3.json"
    if rf3.exists():
        from bench.cluster import headline_rows as rf3_rows
        rf3_results = json.loads(rf3.read_text())
        rows += rf3_rows(rf3_results)
        note += (f" R1: 3 brokers each (`python -m bench.cluster --parts replicated`, medians of "
                 f"{rf3_results['runs']} runs, each broker's default flush settings).")
    link = _link(page, readme)
    peer = tansu_line(results)
    return (f"Apache Kafka {m.get('kafka_version')} (KRaft, one node) and Headrace, one after "
            f"the other on one machine ({m.get('cpu_model', '?')}, {m.get('cpus')} CPUs), each "
            f"driven to saturation; one figure per scenario, medians of "
            f"{results['runs']} runs ([{link}]({link}): the method, the machine, every figure, "
            f"the plots).{note}\n\n" + "\n".join(rows) + "\n"
            + (f"\n{peer}\n" if peer else ""))


def tansu_line(results: dict) -> str:
    """One line for the README's headline: Tansu's figure of each scenario's first bar and
    Headrace's ratio to it, or nothing when Tansu was not run."""
    parts = []
    for sid, entry in results["scenarios"].items():
        sc = SCENARIOS.get(sid)
        if sc is None or not sc.bars or "tansu" not in systems({sid: entry}):
            continue
        metric = sc.bars[0].metric
        cell = _cell(entry, "tansu", metric).split(" (")[0]
        r = ratio(entry, metric, over="tansu")
        parts.append(f"{sid} {cell}" + ("" if cell in ("-", "skipped", "failed")
                                        else f" {UNITS.get(metric, '')}")
                     + ("" if r is None else f" (Headrace/Tansu {r:.2f}x)"))
    if not parts:
        return ""
    version = results.get("tansu", {}).get("version", "")
    return (f"Tansu {version}, a Kafka-compatible broker in Rust, in the same runs (SQLite "
            f"storage; no durable mode, so no S2): " + "; ".join(parts) + ".").replace("  ", " ")


def _between(text: str, start: str, end: str, block: str, append: bool = True) -> str:
    """``text`` with ``block`` between ``start`` and ``end`` (appended with the markers when
    they are absent and ``append``); nothing outside the markers changes."""
    whole = f"{start}\n{block}{end}"
    if start in text and end in text:
        return re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: whole, text,
                      flags=re.S)
    if not append:
        raise ValueError(f"no {start} ... {end} markers")
    return text.rstrip("\n") + "\n\n" + whole + "\n"


def with_section(text: str, section: str) -> str:
    """``text`` with ``section`` between the bench markers (appended at the end if absent);
    nothing outside the markers changes."""
    return _between(text, START, END, section)


def update_readme(results: dict, out_dir: Path, page: Path = PAGE,
                  headline: Path | None = None) -> None:
    """Rewrite the Benchmarks section of ``page`` (docs/benchmarks.md; it was the README's)
    and the re-runs on ``HISTORY`` beside it from ``results``; with ``headline`` (README.md)
    also the headline figures between its markers there."""
    page.write_text(with_section(page.read_text(), readme_section(results, out_dir, page)))
    history = page.with_name(HISTORY)
    if history.exists():
        history.write_text(_between(history.read_text(), HISTORY_START, HISTORY_END,
                                    history_section(results)))
    else:
        history.write_text("# Benchmarks: re-runs\n\n" + HISTORY_START + "\n"
                           + history_section(results) + HISTORY_END + "\n")
    if headline is not None:
        headline.write_text(_between(headline.read_text(), HEADLINE_START, HEADLINE_END,
                                     headline_section(results, page, headline), append=False))


# --------------------------------------------------------------------------------------------
# Profiles (py-spy collapsed stacks)


def _frame_key(frame: str) -> str:
    """"func (path/to/file.py:123)" -> "file.py:func" (line numbers dropped)."""
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    func, path = m.groups()
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else path
    return f"{short}:{func}"


# A thread blocked in one of these is waiting, not working (with native frames py-spy cannot
# tell them apart from on-CPU samples).
_IDLE = ("PyThread_acquire_lock_timed", "epoll_pwait", "epoll_wait", "pthread_cond_wait",
         "pthread_cond_timedwait", "sem_wait", "sem_timedwait")
# Frames every event-loop sample has: left out of the inclusive ranking.
_ROOTS = re.compile(r"runpy|__main__|cli\.py:(main|_run)$|uvloop/__init__\.py:run|"
                    r"runners\.py:|^loop\.c:|^core\.c:|^loop-watcher\.c:|^queue\.h:|^object\.h:|^libc\.so\.6:0x|"
                    r"^threading\.py:|thread_run|libpython|^0x")


def read_collapsed(path: Path, keep_idle: bool = False) -> list[tuple[list[str], int]]:
    """Stacks (root first) and sample counts, without the samples of waiting threads unless
    ``keep_idle``."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            frames = stack.split(";")
            if not keep_idle and any(idle in f for f in frames[-4:] for idle in _IDLE):
                continue
            stacks.append((frames, int(count)))
    return stacks


def by_thread(stacks: list[tuple[list[str], int]]) -> list[tuple[str, float]]:
    """Share of the working samples per thread name ("thread (tid): name" root frames)."""
    total = sum(c for _, c in stacks) or 1
    per: dict[str, int] = defaultdict(int)
    for frames, c in stacks:
        root = frames[0]
        name = root.split(": ", 1)[1] if root.startswith("thread ") and ": " in root else "?"
        per[re.sub(r"_\d+$", "_N", name)] += c
    return [(k, 100 * v / total) for k, v in sorted(per.items(), key=lambda kv: -kv[1])]


def top_functions(stacks: list[tuple[list[str], int]], n: int = 15) -> tuple[int, list, list]:
    """(total samples, [(function, self %)], [(function, inclusive %)])."""
    total = sum(c for _, c in stacks) or 1
    own: dict[str, int] = defaultdict(int)
    incl: dict[str, int] = defaultdict(int)
    for frames, c in stacks:
        real = [_frame_key(f) for f in frames if not f.startswith(("process ", "thread "))]
        if real:
            own[real[-1]] += c
        for k in set(real):
            if not _ROOTS.search(k):
                incl[k] += c
    rank = lambda d: [(k, 100 * v / total) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]]
    return total, rank(own), rank(incl)


def flamegraph_svg(stacks: list[tuple[list[str], int]], title: str, width: int = 1200) -> str:
    """A static icicle/flame graph (root at the bottom) with a tooltip per frame."""
    tree: dict = {"n": 0, "c": {}}
    for frames, c in stacks:
        node = tree
        node["n"] += c
        for f in frames:
            node = node["c"].setdefault(f, {"n": 0, "c": {}})
            node["n"] += c
    total = tree["n"] or 1
    rows: list[tuple[int, float, float, str, int]] = []

    def walk(node: dict, depth: int, x: float) -> None:
        for name, child in sorted(node["c"].items()):
            w = child["n"] / total * width
            if w >= 0.3:
                rows.append((depth, x, w, name, child["n"]))
                walk(child, depth + 1, x)
            x += w

    walk(tree, 0, 0.0)
    depth = max((r[0] for r in rows), default=0) + 1
    h = 16
    height = depth * h + 40

    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<text x="4" y="16" font-size="14">{esc(title)} ({total} samples)</text>']
    for d, x, w, name, n in rows:
        y = height - (d + 1) * h - 4
        hue = (zlib.crc32(_frame_key(name).split(":")[0].encode()) % 60) + 10
        label = _frame_key(name)
        chars = int(w / 7)
        text = label if len(label) <= chars else (label[:chars - 2] + ".." if chars > 3 else "")
        out.append(f'<g><title>{esc(name)}: {n} samples ({100 * n / total:.1f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" height="{h - 1}" '
                   f'fill="hsl({hue},80%,60%)"/>'
                   + (f'<text x="{x + 2:.1f}" y="{y + 12}">{esc(text)}</text>' if text else "")
                   + "</g>")
    out.append("</svg>")
    return "\n".join(out)


def write_profiles(profile_dir: Path | None, out_dir: Path, results: dict) -> None:
    """profile-<S>.svg per profiled scenario and profiles.md with the top functions."""
    if profile_dir is None or not profile_dir.exists():
        print("no profiles recorded", file=sys.stderr)
        return
    md = ["# Where the brokers spend their time", "",
          f"`{results['command']}` at {results['machine'].get('git_commit')}, load average at "
          f"start {results['loadavg_start']}. py-spy samples of the broker process (all "
          "threads, native frames included; samples of threads waiting on a lock or in epoll are "
          "left out) while Kafka's ProducerPerformance ran against it, broker on CPU 0, client "
          "on CPU 1. *self*: the function itself was running; *inclusive*: it was on the stack "
          "(frames common to every event-loop sample left out). Kafka: a Java Flight Recording "
          "(`settings=profile`) of the broker JVM over the same run, its Java execution "
          "samples (Java frames only: time in native code and the kernel is not sampled).", ""]
    for f in sorted(profile_dir.glob("*.collapsed")):
        sid, _, kind = f.stem.partition("-")
        who = "Headrace" if not kind else f"Apache Kafka ({kind})"
        stacks = read_collapsed(f, keep_idle=results.get("profile_idle", False))
        if not stacks:
            continue
        (out_dir / f"profile-{f.stem}.svg").write_text(
            flamegraph_svg(stacks, f"{who} under {sid}: {SCENARIOS[sid].title}"))
        total, own, incl = top_functions(stacks)
        med = results["scenarios"].get(sid, {}).get("median", {}).get(kind or "headrace", {})
        md += [f"## {sid}, {who}: {SCENARIOS[sid].title}", "",
               f"{total} samples; this run: {_fmt(med.get('mb_per_sec'))} MiB/s, "
               f"{_fmt(med.get('records_per_sec'))} records/s; the broker used "
               f"{_fmt(med.get('broker_cpu'))} of its core, the client {_fmt(med.get('client_cpu'))} "
               "of its own (so the shares below are shares of that busy time). "
               f"Flame graph: [profile-{f.stem}.svg](profile-{f.stem}.svg). By thread: "
               + ", ".join(f"{t} {p:.0f}%" for t, p in by_thread(stacks)) + ".", "",
               "| self % | function | | inclusive % | function |", "|---:|---|---|---:|---|"]
        for (fo, po), (fi, pi) in zip(own, incl):
            md.append(f"| {po:.1f} | `{fo}` | | {pi:.1f} | `{fi}` |")
        md.append("")
    (out_dir / "profiles.md").write_text("\n".join(md))
    (out_dir / "profiles.json").write_text(json.dumps(results, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="re-render results")
    ap.add_argument("results", type=Path)
    ap.add_argument("--readme", action="store_true",
                    help="rewrite docs/benchmarks.md, docs/benchmarks-history.md and the "
                         "README's headline figures")
    a = ap.parse_args(argv)
    results = json.loads(a.results.read_text())
    write(results, a.results.parent)
    if a.readme:
        update_readme(results, a.results.parent, headline=README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
