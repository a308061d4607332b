"""Topics as Iceberg tables, what they cost the produce path: one broker, the same topic with
``iceberg.mode`` disabled and key_value, interleaved in one run.

    python -m bench.iceberg                          # 3 rounds of each; results in bench/results/
    python -m bench.iceberg --rounds 1 --seconds 5   # a check that it works
    python -m bench.iceberg --avro                   # value_schema_id_prefix too (Avro values)

How this works
--------------
With windows of 10 s or more the rounds have the machine's memory kept as a dedicated
host's (``bench/machine.py``, ``memory_kept``), as in ``bench.run``. One ``headrace serve``
process (unpinned, as users run it) with ``iceberg.enabled=true`` and
``iceberg.commit.interval.ms`` (``--interval-ms``, 5 s by default) serves every round; each
round makes a topic of its own (``--partitions``, the same settings but ``iceberg.mode``) and
deletes it afterwards. The load is the harness's wire producer (``bench/wireproduce.py``:
pipelined Produce requests of one prebuilt batch of ``--batch-records`` records of
``--record-size`` bytes, 5 in flight per connection, acks=all), which costs the client little
CPU, so the broker and not the client saturates. Two phases, the rounds of each interleaved
(disabled, key_value, key_value, disabled, ...):

1. saturation: ``--clients`` wire producers as fast as the broker answers, a window of
   ``--seconds`` after a warm-up: throughput (MiB/s, records/s) and the broker's CPU-seconds per
   MiB over the window;
2. paced: the same producers at half of the median saturation throughput *without* the table
   (the same offered load for both): produce latency p50/p99 (a request's send to its
   response; every request carries the same batch, so these are the records' percentiles). A
   round that took less than 95% of the rate offered is marked: its producers were held back
   (5 requests in flight), so its latencies leave out the wait.

Throughout every round, ``headrace_iceberg_lag_seconds`` of its topic is scraped from the
broker's /metrics every 0.25 s (in the rounds without the table too, so that both pay for the
scrapes) (how long the oldest acknowledged record that is not a row
yet has waited), and after the window until the table holds every acknowledged record
(``headrace_iceberg_rows_total``): the next round starts only then, so no round pays for the
one before. Each round checks its work: the topic's end offsets equal the records the
producers saw acknowledged.

With ``--avro`` every record's value is an Avro record in Confluent's wire format (its schema
registered in the broker's schema registry), for every mode, and a third mode,
value_schema_id_prefix (the value decoded into columns), takes its turn in the rounds.

The verdicts are issue 35's: at half rate, p99 with the table within 10% of p99 without, and
the lag below the commit interval + 5 s throughout; at saturation, throughput within 25%
(lag reported). Medians over the rounds; the load average (``uptime``'s 1-minute figure)
before each round, since the machine may be shared. Results go to
``bench/results/iceberg.json``, ``iceberg.md`` and ``iceberg.png`` (the lag over time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from bench import brokers, wire
from bench.context import RESULTS, Progress, loadavg
from bench.cpu import Meter, descendants, processes
from bench.machine import memory_kept, memory_text
from bench.wireproduce import drive

MiB = 1 << 20
MODES = ("disabled", "key_value")
SAMPLE_S = 0.25
CATCH_UP_TIMEOUT_S = 300.0


class Metrics:
    """The broker's /metrics, read for one topic's Iceberg series."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def read(self, topic: str) -> dict[str, float]:
        text = urllib.request.urlopen(self.url, timeout=5).read().decode()
        found: dict[str, float] = {}
        label = f'{{topic="{topic}"}}'
        for line in text.splitlines():
            if line.startswith("headrace_iceberg_") and label in line:
                name, value = line.rsplit(" ", 1)
                found[name.split("{")[0]] = float(value)
        return found


class LagWatch:
    """Samples a topic's ``headrace_iceberg_lag_seconds`` every ``SAMPLE_S`` on a thread:
    (seconds since the window opened, lag)."""

    def __init__(self, metrics: Metrics, topic: str, window_at: float) -> None:
        self.metrics, self.topic, self.window_at = metrics, topic, window_at
        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_S):
            try:
                lag = self.metrics.read(self.topic).get("headrace_iceberg_lag_seconds", 0.0)
            except OSError:
                continue
            self.samples.append((round(time.monotonic() - self.window_at, 3), lag))

    def stop(self) -> list[tuple[float, float]]:
        self._done.set()
        self._thread.join()
        return self.samples


def workers_cpu(pid: int) -> dict[int, float]:
    """CPU-seconds of each process below the broker's (the translator's worker processes and
    their fork server; none when the translator runs in the broker's process)."""
    snap = processes()
    return {p: snap[p][1] for p in descendants(pid, snap)}


def one_round(broker, metrics: Metrics, args, mode: str, tag: str, rate: float, logs: Path,
              clients: int, value_file: Path | None) -> dict:
    """One topic, one window of the wire producer (``rate`` 0: as fast as it goes)."""
    topic = f"{tag}-{mode}"
    broker.process.create_topic(topic, args.partitions, iceberg_mode=mode)
    wire.ensure_topic("127.0.0.1", broker.port, topic, args.partitions)
    load = loadavg()
    window_at = time.monotonic() + args.warmup
    watch = LagWatch(metrics, topic, window_at)  # (both modes: the scrapes cost the same)
    workers_before = workers_cpu(broker.pid)
    try:
        res = drive(broker.bootstrap, topic, clients, Meter({"broker": [broker.pid]}), logs, tag,
                    record_size=args.record_size, batch_records=args.batch_records, inflight=5,
                    warmup=args.warmup, seconds=args.seconds, rate=rate, value_file=value_file)
        window_end = time.monotonic() - window_at
        stored = sum(wire.end_offsets("127.0.0.1", broker.port, topic).values())
        if stored != res["records_acked"]:
            raise RuntimeError(f"{topic}: {res['records_acked']} acknowledged, {stored} stored")
        caught_up = None
        if mode != "disabled":
            deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
            while metrics.read(topic).get("headrace_iceberg_rows_total", 0) < stored:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: the table did not catch up")
                time.sleep(0.1)
            caught_up = time.monotonic() - window_at - window_end
    finally:
        lags = watch.stop()
    workers_after = workers_cpu(broker.pid)
    workers_s = sum(c - workers_before.get(p, 0.0) for p, c in workers_after.items())
    delete_topic(broker.bootstrap, topic)
    in_window = [lag for t, lag in lags if t <= window_end]
    return {
        "mode": mode, "topic": topic, "load_1m": load[0], "load": load,
        "mib_per_sec": res["mib_per_sec"], "records_per_sec": res["records_per_sec"],
        "broker_cpu_s": res["broker_cpu_s"],
        "broker_cpu_s_per_mib": res["broker_cpu_s"] / (res["bytes"] / MiB),
        # the broker's child processes (the translator's workers), from the round's start to
        # its catching up, per MiB of every record the round stored (warm-up included)
        "workers_cpu_s": workers_s,
        "workers_cpu_s_per_mib": workers_s / max(stored * args.record_size / MiB, 1e-9),
        "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "p999_ms": res["p999_ms"],
        "records_acked": res["records_acked"],
        "short": bool(rate) and res["mib_per_sec"] * MiB < 0.95 * rate,
        "lag_max_s": max((lag for _, lag in lags), default=None) if caught_up is not None else None,
        "lag_max_in_window_s": max(in_window, default=None) if caught_up is not None else None,
        "catch_up_s": caught_up,  # from the window's end until every row is visible
        "lag_samples": lags if caught_up is not None else [],
    }


AVRO_SCHEMA = {
    "type": "record", "name": "Event", "namespace": "bench",
    "fields": [{"name": "id", "type": "long"}, {"name": "kind", "type": "string"},
               {"name": "payload", "type": "bytes"}],
}


def avro_value(registry_port: int, size: int, path: Path) -> Path:
    """An Avro value of about ``size`` bytes in Confluent's wire format, its schema registered
    (subject ``bench-value``), written to ``path``."""
    import io
    import struct

    from fastavro import parse_schema, schemaless_writer

    body = json.dumps({"schema": json.dumps(AVRO_SCHEMA)}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{registry_port}/subjects/bench-value/versions", data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    schema_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["id"]
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(AVRO_SCHEMA),
                      {"id": 123456789, "kind": "click", "payload": b"p" * max(0, size - 30)})
    path.write_bytes(struct.pack(">bI", 0, schema_id) + out.getvalue())
    return path


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept until the answer comes)
    admin.delete_topics([topic])[topic].result(30)


def median(rounds: list[dict], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


def summary(results: dict) -> dict:
    """Medians per phase and mode, and the issue's verdicts."""
    out: dict = {}
    for phase in ("saturation", "paced"):
        out[phase] = {
            mode: {key: median([r for r in results[phase] if r["mode"] == mode], key)
                   for key in ("mib_per_sec", "records_per_sec", "broker_cpu_s_per_mib",
                               "p50_ms", "p99_ms", "lag_max_s", "catch_up_s", "load_1m")}
            for mode in results["modes"]
        }
    sat, paced = out["saturation"], out["paced"]
    lag_bound = results["interval_ms"] / 1000 + 5
    lag_worst = max((r["lag_max_s"] or 0.0 for r in results["paced"] if r["mode"] == "key_value"),
                    default=0.0)
    out["verdicts"] = {
        "paced_p99_ratio": paced["key_value"]["p99_ms"] / paced["disabled"]["p99_ms"],
        "paced_p99_within_10pct": paced["key_value"]["p99_ms"] <= 1.1 * paced["disabled"]["p99_ms"],
        "paced_lag_worst_s": lag_worst,
        "paced_lag_bound_s": lag_bound,
        "paced_lag_below_bound": lag_worst < lag_bound,
        "saturation_ratio": sat["key_value"]["mib_per_sec"] / sat["disabled"]["mib_per_sec"],
        "saturation_within_25pct": (sat["key_value"]["mib_per_sec"]
                                    >= 0.75 * sat["disabled"]["mib_per_sec"]),
    }
    for mode in results["modes"][2:]:  # (--avro: the same ratios for value_schema_id_prefix)
        out["verdicts"][mode] = {
            "paced_p99_ratio": paced[mode]["p99_ms"] / paced["disabled"]["p99_ms"],
            "saturation_ratio": sat[mode]["mib_per_sec"] / sat["disabled"]["mib_per_sec"],
            "paced_lag_worst_s": max((r["lag_max_s"] or 0.0 for r in results["paced"]
                                      if r["mode"] == mode), default=0.0),
        }
    return out


def markdown(results: dict) -> str:
    s, v = results["summary"], results["summary"]["verdicts"]

    def f(x: float | None, digits: int = 2) -> str:
        return "-" if x is None else f"{x:,.{digits}f}"

    lines = [
        "# Topics as Iceberg tables: the produce path with and without the table",
        "",
        f"`python -m bench.iceberg {' '.join(results['argv'])}`, {results['started']} UTC; "
        f"one broker, {results['partitions']} partitions, records of {results['record_size']} B "
        f"in requests of {results['batch_records']}, acks=all, "
        f"iceberg.commit.interval.ms={results['interval_ms']}; medians of {results['rounds']} "
        f"interleaved rounds, {results['seconds']:.0f} s windows; 1-minute load average before "
        f"each round (2 CPUs, shared) beside each figure"
        f"{memory_text(results.get('memory_kept'), '; ')}.",
        "",
        "| phase | iceberg.mode | MiB/s | records/s | broker CPU-s/MiB | p50 ms | p99 ms "
        "| lag max s | caught up s | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in ("saturation", "paced"):
        for mode in results["modes"]:
            m = s[phase][mode]
            lines.append(
                f"| {phase} | {mode} | {f(m['mib_per_sec'], 1)} | {f(m['records_per_sec'], 0)} "
                f"| {f(m['broker_cpu_s_per_mib'], 4)} | {f(m['p50_ms'])} | {f(m['p99_ms'])} "
                f"| {f(m['lag_max_s'])} | {f(m['catch_up_s'])} | {f(m['load_1m'])} |")
    lines += [
        "",
        f"- half rate ({f(results['paced_mib_per_sec'], 1)} MiB/s, half of the median "
        f"saturation without the table): p99 with/without {f(v['paced_p99_ratio'], 3)} "
        f"({'within' if v['paced_p99_within_10pct'] else 'NOT within'} 10%); the largest lag "
        f"seen {f(v['paced_lag_worst_s'])} s, "
        f"{'below' if v['paced_lag_below_bound'] else 'NOT below'} the commit interval + 5 s "
        f"({f(v['paced_lag_bound_s'], 1)} s)",
        f"- saturation: with/without {f(v['saturation_ratio'], 3)} "
        f"({'within' if v['saturation_within_25pct'] else 'NOT within'} 25%)",
        *(f"- {mode}: half-rate p99 with/without {f(v[mode]['paced_p99_ratio'], 3)}, the "
          f"largest lag seen {f(v[mode]['paced_lag_worst_s'])} s; saturation with/without "
          f"{f(v[mode]['saturation_ratio'], 3)}" for mode in results["modes"][2:]),
        "",
        "Every round:",
        "",
        "(CPU-s/MiB: the broker's process in the window; workers: the processes below it, the"
        " translator's workers, from the round's start until the table caught up, per MiB the"
        " round stored)",
        "",
        "| phase | round | iceberg.mode | MiB/s | CPU-s/MiB | workers CPU-s/MiB | p50 ms "
        "| p99 ms | lag max s | caught up s | load (1, 5, 15 min) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for phase in ("saturation", "paced"):
        for i, r in enumerate(results[phase]):
            lines.append(
                f"| {phase} | {i // len(results['modes']) + 1} | {r['mode']} | {f(r['mib_per_sec'], 1)} "
                f"| {f(r['broker_cpu_s_per_mib'], 4)} "
                f"| {f(r.get('workers_cpu_s_per_mib'), 4)} | {f(r['p50_ms'])} "
                f"| {f(r['p99_ms'])} | {f(r['lag_max_s'])} | {f(r['catch_up_s'])} "
                f"| {', '.join(str(x) for x in r['load'])}"
                + (" (short of the rate) |" if r.get("short") else " |"))
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    bound = results["interval_ms"] / 1000 + 5
    for ax, phase in zip(axes, ("paced", "saturation")):
        for mode in results["modes"][1:]:
            for i, r in enumerate(x for x in results[phase] if x["mode"] == mode):
                if r["lag_samples"]:
                    t, lag = zip(*r["lag_samples"])
                    ax.plot(t, lag, label=f"{mode} round {i + 1}")
        ax.axhline(bound, color="#aa3333", linestyle="--", label="commit interval + 5 s")
        ax.axvline(results["seconds"], color="#888888", linestyle=":", label="window ends")
        ax.set_title(f"{phase}: headrace_iceberg_lag_seconds")
        ax.set_xlabel("seconds since the window opened")
        ax.set_ylabel("lag (s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each mode, per phase")
    ap.add_argument("--seconds", type=float, default=15.0, help="each round's window")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--interval-ms", type=int, default=5000, help="iceberg.commit.interval.ms")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--batch-records", type=int, default=16)
    ap.add_argument("--clients", type=int, default=2, help="wire producers at saturation")
    ap.add_argument("--avro", action="store_true",
                    help="Avro values, and value_schema_id_prefix as a third mode")
    ap.add_argument("--paced-mib-per-sec", type=float, default=0.0,
                    help="the paced phase alone, at this rate (no saturation phase)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "headrace-iceberg")
    args = ap.parse_args(argv)
    progress = Progress()
    shutil.rmtree(args.data, ignore_errors=True)
    metrics_port, registry_port = brokers.free_port_block(1), brokers.free_port_block(1)
    settings = {**brokers.HEADRACE_PARITY, "iceberg.enabled": "true",
                "iceberg.commit.interval.ms": args.interval_ms, "metrics.port": metrics_port}
    modes = [*MODES, "value_schema_id_prefix"] if args.avro else list(MODES)
    if args.avro:
        settings["schema.registry.listeners"] = f"http://127.0.0.1:{registry_port}"
    broker = brokers.HeadraceBroker(args.data / "broker", settings,
                                    cpus=set(range(os.cpu_count() or 1)))
    results: dict = {
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "rounds": args.rounds, "seconds": args.seconds, "interval_ms": args.interval_ms,
        "partitions": args.partitions, "record_size": args.record_size,
        "batch_records": args.batch_records, "clients": args.clients,
        "saturation": [], "paced": [], "modes": modes,
    }
    logs = args.data / "clients"
    broker.start()
    metrics = Metrics(metrics_port)
    value_file = None
    if args.avro:
        args.data.mkdir(parents=True, exist_ok=True)
        value_file = avro_value(registry_port, args.record_size, args.data / "value.avro")
    kept = ExitStack()  # (memory kept for windows that write enough for it to show)
    results["memory_kept"] = kept.enter_context(memory_kept(progress, args.seconds >= 10))
    try:
        phases = ("paced",) if args.paced_mib_per_sec else ("saturation", "paced")
        results["paced_mib_per_sec"] = args.paced_mib_per_sec
        for phase in phases:
            rate, clients = 0.0, args.clients
            if phase == "paced" and not args.paced_mib_per_sec:
                sat = [r["mib_per_sec"] for r in results["saturation"] if r["mode"] == "disabled"]
                results["paced_mib_per_sec"] = statistics.median(sat) / 2
            if phase == "paced":
                rate = results["paced_mib_per_sec"] * MiB
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    res = one_round(broker, metrics, args, mode, f"{phase[:3]}{r}", rate, logs,
                                    clients, value_file)
                    results[phase].append(res)
                    progress(f"{phase} round {r + 1} {mode:>9}: {res['mib_per_sec']:7.1f} MiB/s"
                             f"  {res['broker_cpu_s_per_mib']:.4f} CPU-s/MiB  p50 "
                             f"{res['p50_ms']:.2f}  p99 {res['p99_ms']:.2f} ms  lag max "
                             f"{res['lag_max_s'] or 0:.2f} s  caught up "
                             f"{res['catch_up_s'] or 0:.2f} s  load {res['load']}")
    finally:
        kept.close()
        broker.stop()
        shutil.rmtree(args.data, ignore_errors=True)
    if not results["saturation"]:  # (--paced-mib-per-sec: a quick look, not the benchmark)
        print(json.dumps({m: [(r["p50_ms"], r["p99_ms"], r["mib_per_sec"], r["load"])
                              for r in results["paced"] if r["mode"] == m] for m in modes}))
        return 0
    results["summary"] = summary(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "iceberg.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (args.out / "iceberg.md").write_text(text)
    try:
        plot(results, args.out / "iceberg.png")
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')", file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
