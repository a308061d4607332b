"""Apache Kafka and Headrace side by side at saturation, the broker and not the client saturated.

    python -m bench.run --readme                 # the full measurement (hours; see notes.md)
    python -m bench.run --size tiny --runs 1     # seconds per scenario: a check that it works
    python -m bench.run --scenarios S1,S3 --brokers headrace --layouts unpinned
    python -m bench.run --brokers kafka,headrace,tansu --scenarios S4   # Tansu beside them
    python -m bench.run --profile                # py-spy flame graphs of Headrace under S1, S3, S4
    python -m bench.run --driver perf            # Kafka's ProducerPerformance/ConsumerPerformance

How this works
--------------
Two machine layouts, one after the other: *unpinned* (the headline: brokers and clients share
every CPU, as users run them) and *pinned* (the broker on CPU 0, the clients on the others;
Headrace as one process). In each, Kafka runs in two variants (``kafka``: its start scripts'
JVM settings; ``kafka-tuned``: the operations documentation's heap and G1 flags and
``socket.receive.buffer.bytes=-1``) and the better one is compared; so does Headrace in the
unpinned layout (``headrace-wN``: ``--workers N`` with a ZooKeeper; ``headrace-single``: one
process, ``headrace serve``'s default).

The load comes from client processes (``bench/saturate.py``): by default the wire clients
(``bench/wireproduce.py``, ``bench/wirefetch.py``), which need little CPU, so that on a small
machine the broker saturates before the clients do; ``--driver perf``: Kafka's
ProducerPerformance and ConsumerPerformance, whose JVMs on two cores take the CPU the broker
would use. For each throughput scenario (S1-S5) and broker variant:

1. the curve: one broker process, a discarded warm-up run, then 1, 2, 4, 8 client processes
   (``--clients``) until the throughput grows by less than ``--growth``; the client count of
   the highest throughput is the broker's saturation point;
2. ``--runs`` measured runs at that client count, each on a fresh broker process with its own
   warm-up, interleaved between the variants (S5: in the curve's process, on its data); the
   median is the broker's maximum, min and max beside it; a failed run fails the cell;
3. produce scenarios, headline layout: the rate sweep at 25/50/75% of the broker's own
   maximum (``--sweep-clients`` wire clients for every broker: the same offered traffic), and
   Headrace also at 50% of Kafka's (the durable latency bar compares p99 there
   with Kafka's at 50% of its own maximum, from whichever Kafka variant has it lower); the
   points share one broker, whose log keeps them all, so a point that would write more than
   70% of the disk's free space gets a shorter window (its note says so) or is skipped.

Everything runs with the machine's memory kept as a dedicated host's (``bench/machine.py``,
``memory_kept``: on a virtual machine, free page reporting off and the memory touched once),
so that no run's page cache costs more because of what ran before it.

A third system, Tansu (``--brokers ...,tansu``; ``bench/tansu.py``: a Kafka-compatible broker
in Rust, built from crates.io with cargo on first use and cached), runs as one more variant of
its own through the same steps, its SQLite storage on the same disk; it has no durable mode,
so it skips S2, and the skip and its reason are recorded in the scenario's ``skipped``
(``brokers.skip_reason``). Its figures are a system of their own in the results
(``median["tansu"]``), beside Kafka's and Headrace's, with a Headrace/Tansu ratio in the tables.

S6 (end-to-end latency at a fixed rate) and S7 (cold start) run as before, S6 with a warm-up
run per broker process. Raw tool output, broker logs and this run's own results.json (written
before anything is merged or rendered) go to ``bench/results/raw/<stamp>/``; the summary goes
to ``bench/results/`` (results.json, results.md, PNG plots), and ``--readme`` rewrites the
Benchmarks section of ``docs/benchmarks.md``, the re-runs in ``docs/benchmarks-history.md``
and the README's headline figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import brokers, report, saturate, tansu, wire
from bench.apache_kafka import HOST
from bench.coldstart import run_coldstart
from bench.consume import ConsumeSetup, run_consume, setup_consume
from bench.context import RESULTS, Context, loadavg
from bench.latency import run_e2e
from bench.machine import (append_limit, filesystem, fsync_latency, iperf_loopback, machine,
                           memory_kept)
from bench.produce import run_produce
from bench.scenarios import SECONDS, SIZES, MiB, Scenario, select, with_e2e_rate

RECORD_OVERHEAD = 16  # a stored record's bytes besides its value (header, share of its batch)

LAYOUTS = ("unpinned", "pinned")
ALL_CPUS: set[int] = set()


def run_once(sc: Scenario, kind: str, ctx: Context, rep: int, st: ConsumeSetup | None,
             attempts: int = 1) -> dict:
    """One run (S6, S7; all of them under --profile); a run that fails (a broker that does
    not start, a tool that exits non-zero, work not done) is recorded as failed, and fails
    its cell."""
    for attempt in range(attempts):
        try:
            if sc.kind == "produce":
                return run_produce(sc, kind, ctx, rep)
            if sc.kind == "consume":
                return run_consume(sc, kind, ctx, rep, st)
            if sc.kind == "e2e":
                return run_e2e(sc, kind, ctx, rep)
            return run_coldstart(sc, kind, ctx, rep)
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else repr(e)
            ctx.progress(f"{sc.id} {kind} attempt {attempt + 1} failed: {reason}")
            if attempt + 1 == attempts:
                return {"loadavg": loadavg(), "status": "failed", "reason": str(e)[-1500:]}
            time.sleep(3)
    raise AssertionError("unreachable")


def run_scenario(sc: Scenario, ctx: Context, results: dict) -> None:
    """The old flow (one fresh broker per run, one client): ``--profile`` only."""
    entry = results["scenarios"].setdefault(sc.id, {"title": sc.title, "samples": {}})
    samples: dict[str, list] = entry["samples"]
    kinds = runnable(sc, ctx.kinds, entry)
    st = setup_consume(sc, ctx) if sc.kind == "consume" else None
    try:
        for rep in range(ctx.runs):
            order = kinds if rep % 2 == 0 else list(reversed(kinds))
            for kind in order:
                ctx.progress(f"{sc.id} run {rep + 1}/{ctx.runs} {kind}: {sc.title}")
                s = run_once(sc, kind, ctx, rep, st)
                samples.setdefault(kind, []).append(s)
                shown = {m: round(s[m], 2) for m in sc.metrics if m in s}
                ctx.progress(f"{sc.id} run {rep + 1}/{ctx.runs} {kind}: "
                             f"{shown or s.get('status')}")
    finally:
        if st:
            for d in st.dirs.values():
                shutil.rmtree(d, ignore_errors=True)
            entry["setup"] = {"produced": st.produced, "skipped": st.skip}

# --------------------------------------------------------------------------------------------
# Layouts and saturation


def set_layout(layout: str) -> None:
    """Pinned: broker on the first CPU, clients (and this harness) on the rest; unpinned:
    everything on every CPU."""
    cpus = sorted(ALL_CPUS)
    if layout == "pinned" and len(cpus) >= 2:
        brokers.BROKER_CPUS, brokers.CLIENT_CPUS = {cpus[0]}, set(cpus[1:])
    else:
        brokers.BROKER_CPUS = brokers.CLIENT_CPUS = set(cpus)
    brokers.pin_self(brokers.CLIENT_CPUS)


def kinds_for(layout: str, ctx: Context) -> list[str]:
    out: list[str] = []
    if "kafka" in ctx.kinds:
        out += ctx.kafka_variants
    if "headrace" in ctx.kinds:
        w = ctx.headrace_workers
        if layout == "unpinned" and w > 1:  # both ways users run it; the better is compared
            out += [f"headrace-w{w}", "headrace-single"]
        else:
            out.append("headrace")
    if "tansu" in ctx.kinds:
        out.append("tansu")
    return out


def runnable(sc: Scenario, kinds: list[str], entry: dict) -> list[str]:
    """``kinds`` without those that cannot run ``sc``; their reasons go to
    ``entry["skipped"]``."""
    for kind in kinds:
        why = brokers.skip_reason(kind, sc)
        if why:
            entry.setdefault("skipped", {})[kind] = why
    return [k for k in kinds if k not in entry.get("skipped", {})]


class Session:
    """One broker process of ``kind`` for ``sc``: started, warmed up, measured, stopped."""

    START_ATTEMPTS = 3

    def __init__(self, sc: Scenario, kind: str, ctx: Context, tag: str) -> None:
        self.sc, self.kind, self.ctx, self.tag = sc, kind, ctx, tag
        self.runs = 0

    def __enter__(self) -> Session:
        """Start the broker. Kafka's ports are chosen free before its JVM binds them, and on
        a shared machine another process may take one meanwhile: such a start (and only
        that) is tried again, on fresh ports and a fresh data directory, and counted in the
        results' ``start_retries``."""
        for attempt in range(self.START_ATTEMPTS):
            self.broker = brokers.make_broker(
                self.kind, self.ctx.next_dir(f"{self.sc.id}-{self.kind}-{self.tag}"),
                durable=self.sc.durable, log_dir=self.ctx.logs)
            self.broker.prepare()
            try:
                self.broker.start()
                break
            except Exception as e:
                try:
                    self.broker.stop()
                finally:
                    self.broker.cleanup()
                if "Address already in use" not in str(e) or attempt + 1 == self.START_ATTEMPTS:
                    raise
                self.ctx.start_retries.append(f"{self.sc.id} {self.kind}: port taken")
                self.ctx.progress(f"{self.sc.id} {self.kind}: a port was taken before the "
                                  "broker bound it; starting again on other ports")
        if self.kind not in self.ctx.settings:
            self.ctx.settings[self.kind] = self.broker.settings()
        return self

    def __exit__(self, *exc) -> None:
        self.broker.stop()
        self.broker.cleanup()

    def produce(self, clients: int, records: int, rate: float | None = None,
                seconds: float | None = None) -> dict:
        """A produce run: ProducerPerformance doing ``records`` records, or (``--driver
        wire``) the wire client for a window of ``seconds`` (default: the size's)."""
        self.runs += 1
        name = f"{self.sc.id}-{self.kind}-{self.tag}-{self.runs}"
        sample = {"loadavg": loadavg()}
        if self.ctx.driver == "wire":
            sample.update(saturate.wire_produce_run(
                self.sc, self.broker, f"bench-{self.runs}", clients,
                seconds or SECONDS[self.ctx.size], self.ctx.logs / name, rate=rate))
        else:
            sample.update(saturate.produce_run(self.sc, self.broker, f"bench-{self.runs}",
                                               clients, records, self.ctx.logs / name,
                                               rate=rate))
        return sample

    def consume(self, clients: int, records: int, topic: str, passes: int = 1) -> dict:
        """A consume run: ``clients`` processes each reading ``records`` records of ``topic``
        (``--driver wire``: all of it, ``passes`` times)."""
        self.runs += 1
        name = f"{self.sc.id}-{self.kind}-{self.tag}-{self.runs}"
        sample = {"loadavg": loadavg()}
        if self.ctx.driver == "wire":
            sample.update(saturate.wire_consume_run(self.sc, self.broker, topic, clients,
                                                    self.ctx.logs / name, passes))
        else:
            sample.update(saturate.consume_run(self.sc, self.broker, topic, clients, records,
                                               self.ctx.logs / name, group=name))
        return sample

    def make_room(self, short: Callable[[], str | None], wait_s: float = 120.0) -> None:
        """Delete the topics of this session's earlier produce runs (a curve point's data is
        not read again) and wait until the broker has removed their files (Kafka: after its
        ``log.segment.delete.delay.ms``, 60 s), until ``short()`` says None or for ``wait_s``."""
        try:
            with wire.WireClient(HOST, self.broker.port) as client:
                client.delete_topics([f"bench-{i}" for i in range(1, self.runs + 1)])
        except (OSError, wire.WireError) as e:  # (a broker without DeleteTopics: as before)
            self.ctx.progress(f"{self.sc.id} {self.kind}: deleting topics failed: {e}")
            return
        deadline = time.monotonic() + wait_s
        while short() and time.monotonic() < deadline:
            time.sleep(1)

    def warmup(self) -> dict:
        """The discarded warm-up run: one client, the scenario's base record count."""
        if self.sc.kind == "consume":
            return self.consume(1, self.sc.records[self.ctx.size], "bench-1")
        return self.produce(1, self.sc.records[self.ctx.size],
                            seconds=SECONDS[self.ctx.size] / 3)


def _failed(reason: BaseException | str, **kw) -> dict:
    text = str(reason) or repr(reason)
    return {"loadavg": loadavg(), "status": "failed", "reason": text[-1500:], **kw}


def _show(sc: Scenario, s: dict) -> str:
    if s.get("status"):
        return f"FAILED: {s['reason'].splitlines()[0][:200]}"
    return (f"{s['clients']} clients: {s['mb_per_sec']:.1f} MiB/s, "
            f"{s['records_per_sec']:,.0f} rec/s in {s['wall_s']:.1f}s, broker "
            f"{s['broker_cores']:.2f} cores ({s['mib_per_broker_cpu_s'] or 0:.0f} MiB/CPU-s)"
            + (f", p99 {s['p99_ms']:.0f} ms" if "p99_ms" in s else "")
            + (f", retries {s['retries']:.0f}" if s.get("retries") else ""))


def records_for(sc: Scenario, ctx: Context, records_per_sec: float, factor: float = 1.0,
                at_rate: bool = False) -> int:
    """Records for a run of ``SECONDS[size]`` at ``records_per_sec`` (at least the scenario's
    base count; S1 at full size: more than the dirty page threshold). ``at_rate``: a run at
    a fixed rate (the sweep), exactly that long."""
    n = int(records_per_sec * SECONDS[ctx.size] * factor)
    if at_rate:
        return max(n, 10)
    n = max(n, sc.records[ctx.size])
    if sc.dirty and ctx.size == "full" and ctx.dirty_threshold:
        n = max(n, int(ctx.dirty_threshold * 1.25 / sc.record_size) + 1)
    return n


def passes_for(ctx: Context, records: int, clients: int, records_per_sec: float,
               factor: float = 1.0) -> int:
    """Wire consume runs: how many times each of ``clients`` reads the topic of ``records``
    records for the run to last ``SECONDS[size]`` at ``records_per_sec`` (in all)."""
    if ctx.driver != "wire" or not records_per_sec:
        return 1
    return max(1, math.ceil(records_per_sec * SECONDS[ctx.size] * factor
                            / (records * clients)))


def seconds_for(sc: Scenario, ctx: Context, mib_per_sec: float) -> float | None:
    """A full-size produce run's window at about ``mib_per_sec``: the size's, shortened to
    what fits in 70% of the data disk's free space, but never below the small size's window
    (S1: below writing 1.25x the dirty page threshold); ``disk_short`` says when even that
    does not fit. None: the default."""
    if not (sc.kind == "produce" and ctx.size == "full" and mib_per_sec):
        return None
    rate = mib_per_sec * MiB
    fits = shutil.disk_usage(ctx.data).free * 0.7 / rate - saturate.WIRE_WARMUP_S
    least = SECONDS["small"]
    if sc.dirty and ctx.dirty_threshold:
        least = max(least, ctx.dirty_threshold * 1.25 / rate)
    return max(least, min(SECONDS[ctx.size], fits))


def disk_short(sc: Scenario, ctx: Context, mib_per_sec: float) -> str | None:
    """Why a produce run at ``mib_per_sec`` would not fit on the data disk (with a third to
    spare), or None."""
    if sc.kind != "produce" or not mib_per_sec:
        return None
    seconds = seconds_for(sc, ctx, mib_per_sec) or SECONDS[ctx.size]
    need = mib_per_sec * MiB * (seconds + saturate.WIRE_WARMUP_S) * 4 / 3
    free = shutil.disk_usage(ctx.data).free
    if need <= free:
        return None
    return f"{need / 2**30:.1f} GiB needed, {free / 2**30:.1f} GiB free on the data disk"


def window_cut(sc: Scenario, ctx: Context, mib_per_sec: float) -> str | None:
    """Why a produce run at ``mib_per_sec`` would not get the size's whole window (the disk
    has room for a shorter one, or none), or None."""
    short = disk_short(sc, ctx, mib_per_sec)
    seconds = seconds_for(sc, ctx, mib_per_sec)
    if short or seconds is None or seconds >= SECONDS[ctx.size]:
        return short
    return f"room for a window of {seconds:.0f} s, not {SECONDS[ctx.size]:.0f}"


def sweep_records(sc: Scenario, ctx: Context, rate: float) -> tuple[int, str | None]:
    """Records for a sweep point at ``rate`` records/s and why it is not the size's window:
    the points of one sweep share a broker, whose log keeps what the earlier ones wrote, so a
    point writes at most 70% of the data disk's free space at its start (a shorter window),
    and none (0) when even the small size's window would not fit."""
    n = records_for(sc, ctx, rate, at_rate=True)
    free = shutil.disk_usage(ctx.data).free
    fits = int(free * 0.7 / (sc.record_size + RECORD_OVERHEAD))
    if n <= fits:
        return n, None
    least = int(rate * SECONDS["small"])
    if fits < least:
        return 0, f"{free / 2**30:.1f} GiB free on the data disk"
    return fits, (f"window {fits / rate:.1f} s, not {n / rate:.1f}: "
                  f"{free / 2**30:.1f} GiB free on the data disk")


def best_point(curve: list[dict], metric: str) -> dict | None:
    """The point of highest ``metric``; of points within 3% of it, the fewest clients."""
    ok = [s for s in curve if not s.get("status")]
    if not ok:
        return None
    top = max(s[metric] for s in ok)
    return min((s for s in ok if s[metric] >= 0.97 * top), key=lambda s: s["clients"])


def saturation_scenario(sc: Scenario, ctx: Context, layout: str, entry: dict) -> None:
    kinds = runnable(sc, kinds_for(layout, ctx), entry)
    for kind, why in entry.get("skipped", {}).items():
        ctx.progress(f"{sc.id} [{layout}] {kind}: skipped: {why}")
    per = entry.setdefault("kinds", {})
    metric = sc.primary
    for kind in kinds:
        per.setdefault(kind, {"curve": [], "samples": [], "sweep": [], "warmups": []})
    # 1. the curve (S5: and its runs, in the same process, on the data written once)
    for kind in kinds:
        d = per[kind]
        ctx.progress(f"{sc.id} [{layout}] {kind}: warm-up, then {ctx.clients} clients")
        try:
            with Session(sc, kind, ctx, "curve") as sess:
                if sc.kind == "consume":  # the data, written once: topic bench-1
                    d["setup"] = sess.produce(1, sc.records[ctx.size])
                    stored = d["setup"]["records_stored"]
                d["warmups"].append(_warm(sess, sc))
                rate = d["warmups"][-1].get("records_per_sec") or 0.0
                mib = d["warmups"][-1].get("mb_per_sec") or 0.0
                prev_n, best_so_far = 1, 0.0
                for n in ctx.clients:
                    expect = mib * (n / prev_n) ** 0.5
                    cut = window_cut(sc, ctx, expect)
                    if cut and sc.kind != "consume":  # the earlier points' data goes first
                        ctx.progress(f"{sc.id} [{layout}] {kind} curve: {cut}; deleting the "
                                     "earlier points' topics")
                        sess.make_room(lambda: window_cut(sc, ctx, expect))
                    short = disk_short(sc, ctx, expect)
                    if short:
                        d["curve"].append({"clients": n, "status": "skipped", "reason": short})
                        ctx.progress(f"{sc.id} [{layout}] {kind} curve: {n} clients skipped: "
                                     f"{short}")
                        break
                    try:
                        if sc.kind == "consume":
                            s = sess.consume(n, stored, "bench-1",
                                             passes_for(ctx, stored, n, rate, (n / prev_n) ** 0.5))
                        else:
                            s = sess.produce(n, records_for(sc, ctx, rate,
                                                            (n / prev_n) ** 0.5),
                                             seconds=seconds_for(sc, ctx, expect))
                    except Exception as e:
                        s = _failed(e, clients=n)
                    d["curve"].append(s)
                    ctx.progress(f"{sc.id} [{layout}] {kind} curve: {_show(sc, s)}")
                    if s.get("status"):
                        break
                    rate, mib, prev_n = s["records_per_sec"], s["mb_per_sec"], n
                    if best_so_far and s[metric] < best_so_far * (1 + ctx.growth):
                        break
                    best_so_far = max(best_so_far, s[metric])
                if sc.kind == "consume":
                    bp = best_point(d["curve"], metric)
                    for rep in range(ctx.runs):
                        if bp is None:
                            d["samples"].append(_failed("no successful curve point"))
                            continue
                        try:
                            s = sess.consume(bp["clients"], stored, "bench-1",
                                             passes_for(ctx, stored, bp["clients"],
                                                        bp["records_per_sec"], 1.05))
                        except Exception as e:
                            s = _failed(e, clients=bp["clients"])
                        d["samples"].append(s)
                        ctx.progress(f"{sc.id} [{layout}] {kind} run {rep + 1}/{ctx.runs}: "
                                     f"{_show(sc, s)}")
        except Exception as e:
            d["curve"].append(_failed(e))
            ctx.progress(f"{sc.id} [{layout}] {kind}: FAILED: {str(e).splitlines()[0][:200]}")
    if sc.kind != "consume":
        # 2. runs at the saturation point, each on a fresh process with its own warm-up
        for rep in range(ctx.runs):
            order = kinds if rep % 2 == 0 else list(reversed(kinds))
            for kind in order:
                d = per[kind]
                bp = best_point(d["curve"], metric)
                if bp is None:
                    d["samples"].append(_failed("no successful curve point"))
                    continue
                try:
                    with Session(sc, kind, ctx, f"run{rep}") as sess:
                        d["warmups"].append(_warm(sess, sc))
                        s = sess.produce(bp["clients"],
                                         records_for(sc, ctx, bp["records_per_sec"], 1.05),
                                         seconds=seconds_for(sc, ctx, bp["mb_per_sec"]))
                except Exception as e:
                    s = _failed(e, clients=bp["clients"])
                d["samples"].append(s)
                ctx.progress(f"{sc.id} [{layout}] {kind} run {rep + 1}/{ctx.runs}: "
                             f"{_show(sc, s)}")
    summarise_entry(sc, entry)
    # 3. latency at equal load
    if sc.kind == "produce" and layout == ctx.layouts[0] and sc.id in ctx.sweep:
        kafka_max = entry["median"].get("kafka", {}).get("records_per_sec")
        for kind in kinds:
            d = per[kind]
            own = entry["median"].get(kind, {}).get("records_per_sec")
            bp = best_point(d["curve"], metric)
            if not own or bp is None:
                continue
            loads = [(f"{f:.0%} of own maximum", f * own) for f in ctx.sweep_fractions]
            # equal load means the same offered traffic: the same number of wire clients for
            # every broker (more connections at one rate means more requests colliding at the
            # partition); ProducerPerformance needs the saturation point's count to reach 75%
            n = ctx.sweep_clients if ctx.driver == "wire" else bp["clients"]
            if brokers.system_of(kind) == "headrace" and kafka_max:
                loads.append(("50% of Kafka's maximum", 0.5 * kafka_max))
            try:
                with Session(sc, kind, ctx, "sweep") as sess:
                    d["warmups"].append(_warm(sess, sc))
                    for label, rate in loads:
                        records, why = sweep_records(sc, ctx, rate)
                        if not records:
                            s = {**_failed(why, clients=n), "status": "skipped"}
                        else:
                            try:
                                s = sess.produce(n, records, rate=rate)
                            except Exception as e:
                                s = _failed(e, clients=n)
                            if why:
                                s["note"] = why
                        s["load"] = label
                        d["sweep"].append(s)
                        ctx.progress(f"{sc.id} [{layout}] {kind} at {label} ({rate:,.0f} rec/s):"
                                     f" {_show(sc, s)}")
            except Exception as e:
                d["sweep"].append(_failed(e, load="session"))
        summarise_entry(sc, entry)


def _warm(sess: Session, sc: Scenario) -> dict:
    try:
        s = sess.warmup()
    except Exception as e:
        raise saturate.RunFailed(f"warm-up run failed: {e}") from e
    sess.ctx.progress(f"{sc.id} {sess.kind} warm-up (discarded): {_show(sc, s)}")
    return s


def _stats(samples: list[dict]) -> tuple[dict, dict]:
    keys = sorted({k for s in samples for k, v in s.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
    med = {k: statistics.median(s[k] for s in samples if s.get(k) is not None)
           for k in keys if any(s.get(k) is not None for s in samples)}
    rng = {k: [min(s[k] for s in samples if s.get(k) is not None),
               max(s[k] for s in samples if s.get(k) is not None)] for k in med}
    return med, rng


def summarise_entry(sc: Scenario, entry: dict) -> None:
    """Per variant: median, min/max (only when every run succeeded; else the cell fails);
    per system: the better Kafka variant and Headrace; the sweep's latencies."""
    med: dict[str, dict] = {}
    rng: dict[str, dict] = {}
    status: dict[str, str] = {}
    for kind, d in entry.get("kinds", {}).items():
        ss = d["samples"]
        bad = [s for s in ss if s.get("status")]
        if not ss or bad:
            why = bad[0]["reason"].splitlines()[0] if bad else "no runs"
            status[kind] = f"failed ({len(bad)} of {len(ss)} runs): {why}"
            med[kind] = {}
            continue
        status[kind] = f"ok ({len(ss)} runs)"
        med[kind], rng[kind] = _stats(ss)
        bp = best_point(d["curve"], sc.primary)
        med[kind]["saturation_clients"] = bp["clients"] if bp else None
        for s in d.get("sweep", []):
            if s.get("load") == "50% of own maximum" and not s.get("status"):
                med[kind]["p99_at_half_ms"] = s["p99_ms"]
            if s.get("load") == "50% of Kafka's maximum" and not s.get("status"):
                med[kind]["p99_at_kafka_half_ms"] = s["p99_ms"]
    kafkas = [k for k in med if brokers.system_of(k) == "kafka"]
    ok_kafkas = [k for k in kafkas if med[k]]
    if ok_kafkas:
        best = max(ok_kafkas, key=lambda k: med[k].get(sc.primary, 0))
        entry["best_kafka"] = best
        med["kafka"] = dict(med[best])
        # the latency bar: Kafka's p99 at 50% of its own maximum, from the variant with the
        # lower one (the better throughput need not be the better latency)
        halves = [(med[k]["p99_at_half_ms"], k) for k in ok_kafkas if med[k].get("p99_at_half_ms")]
        if halves:
            med["kafka"]["p99_at_kafka_half_ms"], entry["latency_kafka"] = min(halves)
        rng["kafka"] = rng.get(best, {})
    elif kafkas:
        med["kafka"] = {}
    heads = [k for k in med if brokers.system_of(k) == "headrace" and k != "headrace"]
    if heads and "headrace" not in entry.get("kinds", {}):
        # as for Kafka: the variant of the higher primary metric (its latency at 50% of
        # Kafka's maximum too, from the same variant)
        best = max(heads, key=lambda k: med[k].get(sc.primary, 0))
        med["headrace"] = med[best]
        rng["headrace"] = rng.get(best, {})
        entry["headrace_kind"] = best
    entry["median"], entry["range"], entry["status"] = med, rng, status


def run_layout(layout: str, scenarios: list[Scenario], ctx: Context, results: dict,
               failed: list[str]) -> None:
    set_layout(layout)
    block = results["layouts"].setdefault(layout, {
        "broker_cpus": sorted(brokers.BROKER_CPUS), "client_cpus": sorted(brokers.CLIENT_CPUS),
        "kinds": kinds_for(layout, ctx), "scenarios": {}})
    for sc in scenarios:
        entry = block["scenarios"].setdefault(sc.id, {"title": sc.title, "samples": {}})
        try:
            if sc.kind in ("produce", "consume"):
                saturation_scenario(sc, ctx, layout, entry)
            else:
                kinds = kinds_for(layout, ctx)
                if sc.kind == "coldstart":  # one process, the port known before the spawn
                    kinds = list(dict.fromkeys(
                        "headrace" if brokers.system_of(k) == "headrace" else k for k in kinds))
                sub = Context.__new__(Context)
                sub.__dict__.update(ctx.__dict__)
                sub.kinds = kinds
                run_scenario(sc, sub, {"scenarios": block["scenarios"]})
                summarise({"scenarios": {sc.id: entry}})
                _fail_cells(sc, entry)
        except Exception as e:  # keep going: one broken scenario must not lose the others
            ctx.progress(f"{sc.id} [{layout}] FAILED: {e}")
            failed.append(f"{sc.id}/{layout}")
            entry["error"] = str(e)[-2000:]


def _fail_cells(sc: Scenario, entry: dict) -> None:
    """S6, S7: a variant with a failed run has no median (no median over the survivors);
    min/max beside the medians; per system, the better Kafka variant and Headrace."""
    med, rng, status = entry.setdefault("median", {}), {}, {}
    for kind, ss in entry.get("samples", {}).items():
        bad = [s for s in ss if s.get("status")]
        if bad or not ss:
            med[kind] = {}
            status[kind] = (f"failed ({len(bad)} of {len(ss)} runs): "
                            f"{bad[0]['reason'].splitlines()[0] if bad else 'no runs'}")
        else:
            status[kind] = f"ok ({len(ss)} runs)"
            rng[kind] = _stats(ss)[1]
    bar = sc.bars[0]
    kafkas = [k for k in entry.get("samples", {}) if brokers.system_of(k) == "kafka"]
    ok = [k for k in kafkas if med.get(k, {}).get(bar.metric) is not None]
    if ok:
        pick = max if bar.higher else min
        best = pick(ok, key=lambda k: med[k][bar.metric])
        entry["best_kafka"] = best
        med["kafka"], rng["kafka"] = med[best], rng.get(best, {})
    elif kafkas:
        med["kafka"] = {}
    heads = [k for k in entry.get("samples", {}) if brokers.system_of(k) == "headrace"]
    ok_heads = [k for k in heads if med.get(k, {}).get(bar.metric) is not None]
    if ok_heads and "headrace" not in heads:
        best = (max if bar.higher else min)(ok_heads, key=lambda k: med[k][bar.metric])
        med["headrace"], rng["headrace"] = med[best], rng.get(best, {})
        entry["headrace_kind"] = best
    elif heads and "headrace" not in heads:
        med["headrace"] = {}
    entry["range"], entry["status"] = rng, status


def summarise(results: dict) -> None:
    """Medians per scenario, broker and metric (only over runs that produced numbers)."""
    for sid, entry in results["scenarios"].items():
        med: dict[str, dict[str, float]] = {}
        for kind, samples in entry["samples"].items():
            ok = [s for s in samples if "status" not in s]
            keys = sorted({k for s in ok for k, v in s.items() if isinstance(v, (int, float))})
            med[kind] = {k: statistics.median(s[k] for s in ok if k in s) for k in keys}
        entry["median"] = med


def merge(base: dict, new: dict) -> dict:
    """``base`` with ``new``'s scenarios in place of its own; a run of a layout other than
    ``base``'s headline goes to that layout's table. The re-runs are listed."""
    from bench.scenarios import SCENARIOS
    order = {sid: i for i, sid in enumerate(SCENARIOS)}

    def updated(old: dict) -> dict:
        scen = {**old, **new["scenarios"]}
        return dict(sorted(scen.items(), key=lambda kv: order.get(kv[0], 99)))

    merged = dict(base)
    if "tansu" in new:  # the Tansu of the latest run that measured it
        merged["tansu"] = new["tansu"]
    layout = new["headline_layout"]
    if layout == base.get("headline_layout", layout):
        merged["scenarios"] = updated(base.get("scenarios", {}))
        old = base.get("layouts", {}).get(layout, {})
        kinds = list(dict.fromkeys(old.get("kinds", []) + new["layouts"][layout].get("kinds", [])))
        merged["layouts"] = {**base.get("layouts", {}), layout: {**old, "kinds": kinds}}
    else:
        old = base.get("layouts", {}).get(layout, {})
        block = {**new["layouts"][layout], "scenarios": updated(old.get("scenarios", {}))}
        merged["layouts"] = {**base.get("layouts", {}), layout: block}
    merged["reruns"] = base.get("reruns", []) + [{
        "command": new["command"], "stamp": new["stamp"], "scenarios": list(new["scenarios"]),
        "layout": layout, "loadavg_start": new["loadavg_start"],
        "headrace_at": new.get("headrace_at"), "elapsed_s": new.get("elapsed_s"),
        "memory_kept": new.get("machine", {}).get("memory_kept")}]
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=SIZES, default="full",
                    help="full: measured runs of 30 s; small: 10 s; tiny: 3 s (a check)")
    ap.add_argument("--runs", type=int, default=5,
                    help="measured runs per scenario, layout and broker variant (default 5)")
    ap.add_argument("--scenarios", help="comma-separated ids (default: all)")
    ap.add_argument("--brokers", default="kafka,headrace",
                    help="systems to run: kafka, headrace, tansu (Tansu 0.6 from crates.io, "
                         "built with cargo on first use: many minutes)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help="unpinned (the headline: everything shares every CPU), pinned (broker "
                         "on CPU 0, clients on the rest); the first one is the headline")
    ap.add_argument("--driver", choices=("wire", "perf"), default="wire",
                    help="produce load: wire (bench/wireproduce.py, little client CPU, so the "
                         "broker saturates) or perf (Kafka's ProducerPerformance)")
    ap.add_argument("--clients", default=None,
                    help="client process counts of the saturation curve (default 1,2,4,8; "
                         "tiny: 1,2)")
    ap.add_argument("--growth", type=float, default=0.05,
                    help="the curve stops when a step adds less than this share")
    ap.add_argument("--kafka-variants", default="kafka-default,kafka-tuned",
                    help="kafka-default: Kafka's start-script JVM settings; kafka-tuned: the "
                         "operations documentation's (6 GiB heap, G1 flags) and "
                         "socket.receive.buffer.bytes=-1; the better one is compared")
    ap.add_argument("--headrace-workers", type=int, default=2,
                    help="Headrace --workers in the unpinned layout (>1 starts a ZooKeeper)")
    ap.add_argument("--sweep", default="S1,S2,S3,S4",
                    help="produce scenarios with the latency sweep (headline layout)")
    ap.add_argument("--sweep-fractions", default="0.25,0.5,0.75")
    ap.add_argument("--sweep-clients", type=int, default=1,
                    help="wire client processes of every sweep run, for every broker")
    ap.add_argument("--out", default=str(RESULTS), help="where results.{json,md} and plots go")
    ap.add_argument("--raw-dir", help="raw logs (default: bench/results/raw)")
    ap.add_argument("--data-dir", help="parent of the brokers' data directories "
                                       "(default: under the raw directory)")
    ap.add_argument("--e2e-rate", type=float, default=10.0, metavar="MB_PER_SEC",
                    help="S6's offered rate (default 10 MB/s)")
    ap.add_argument("--headrace-ref", default="HEAD",
                    help="git commit of Headrace to measure (default HEAD: committed code, "
                         "copied out of the repository); 'worktree' runs the installed "
                         "working tree, uncommitted changes included; a commit needs "
                         "'headrace serve --ready-file', which the harness waits on)")
    ap.add_argument("--iperf-seconds", type=float, default=3.0)
    ap.add_argument("--no-iperf", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="S1/S3/S4 (or --scenarios) once each, pinned, Headrace under py-spy "
                         "and Kafka with a Java Flight Recording (--brokers chooses); writes "
                         "flame graphs and top-function tables to --out")
    ap.add_argument("--profile-idle", action="store_true",
                    help="with --profile: keep samples of waiting threads (where time goes "
                         "off the CPU: fsync, locks, epoll)")
    ap.add_argument("--merge", action="store_true",
                    help="replace only these scenarios in the existing results.json of --out "
                         "(the rest, and the machine facts, stay from the earlier run)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite docs/benchmarks.md (and its re-runs page) and the README's "
                         "headline figures from these results")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.clients is None:
        args.clients = "1,2" if args.size == "tiny" else "1,2,4,8"
    for layout in args.layouts.split(","):
        if layout not in LAYOUTS:
            ap.error(f"--layouts: unknown layout {layout}")
    for system in args.brokers.split(","):
        if system not in brokers.SYSTEMS + brokers.KINDS:
            ap.error(f"--brokers: unknown system {system} (known: {', '.join(brokers.SYSTEMS)})")

    # SIGINT and SIGTERM stop the run cleanly (brokers stopped, data removed), also when the
    # harness was started in the background, where SIGINT is ignored by default.
    def interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one is enough: let the cleanup run
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.profile:
        args.runs = 1
        args.scenarios = args.scenarios or "S1,S3,S4"
    ctx = Context(args, stamp)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    ALL_CPUS.update(os.sched_getaffinity(0))
    if args.profile:
        ctx.layouts = ["pinned"]
    if not brokers.cpu_count_ok():
        ctx.progress("fewer than 2 CPUs available: broker and client share the CPU")
    set_layout(ctx.layouts[0])

    headrace_at = brokers.headrace_at(args.headrace_ref)
    if args.headrace_ref != "worktree" and "headrace" in ctx.kinds:
        try:
            brokers.HEADRACE_PATH = brokers.headrace_snapshot(args.headrace_ref,
                                                              ctx.raw / "headrace")
        except (RuntimeError, subprocess.CalledProcessError) as e:
            ap.error(f"--headrace-ref {args.headrace_ref}: {e}")
        ctx.progress(f"measuring Headrace as committed at {headrace_at} ({args.headrace_ref})")

    if "tansu" in ctx.kinds:  # installed now (once: cargo, many minutes), not in a run
        exe = tansu.binary(progress=ctx.progress)
        ctx.progress(f"measuring {tansu.version_of(exe)} ({exe}); storage: {tansu.STORAGE}")

    command = "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:])
    info = machine()
    ctx.dirty_threshold = info.get("dirty_threshold_bytes")
    info["data_filesystem"] = filesystem(ctx.data)
    info["fsync_start"] = fsync_latency(ctx.data)
    results: dict = {
        "command": command.strip(), "stamp": stamp, "size": ctx.size, "runs": ctx.runs,
        "brokers": ctx.kinds, "loadavg_start": loadavg(), "machine": info,
        "headrace_at": headrace_at, "profile_idle": args.profile_idle,
        "seconds": SECONDS[ctx.size], "clients": ctx.clients, "growth": ctx.growth,
        "driver": ctx.driver, "wire_inflight": saturate.WIRE_INFLIGHT,
        "layouts_run": ctx.layouts, "headline_layout": ctx.layouts[0],
        "sweep_fractions": ctx.sweep_fractions,
        "scenarios": {}, "layouts": {},
    }
    if "tansu" in ctx.kinds:
        results["tansu"] = {"version": tansu.TANSU_VERSION, "binary": str(exe),
                            "features": list(tansu.FEATURES), "storage": tansu.STORAGE}
    ctx.progress(f"load average at start: {results['loadavg_start']} "
                 f"(1-minute above ~0.7 means a busy machine and noisy numbers); fsync "
                 f"p50 {info['fsync_start'].get('p50_ms', 0):.2f} ms in {ctx.data}")
    with memory_kept(ctx.progress, ctx.size == "full") as kept:
        results["machine"]["memory_kept"] = kept
        if not args.no_iperf and not args.profile:
            set_layout("pinned")
            results["loopback"] = iperf_loopback(ctx, args.iperf_seconds)
            results["append"] = append_limit(ctx, (512 if ctx.size == "tiny" else 6144) << 20)

        scenarios = [with_e2e_rate(sc, args.e2e_rate) if sc.kind == "e2e" else sc
                     for sc in select(args.scenarios)]
        failed: list[str] = []
        zk = None
        try:
            if args.profile:
                set_layout("pinned")
                ctx.profile_dir = ctx.raw / "profiles"
                for sc in scenarios:
                    run_scenario(sc, ctx, results)
            else:
                if ("headrace" in ctx.kinds and ctx.headrace_workers > 1
                        and "unpinned" in ctx.layouts):
                    from headrace.broker.tools.zookeeper_server import ZooKeeperServer
                    zk = ZooKeeperServer(ctx.raw / "zookeeper").start()
                    brokers.ZOOKEEPER = zk.connect_string
                    results["zookeeper"] = "one ZooKeeper for the run (Headrace --workers)"
                for layout in ctx.layouts:
                    run_layout(layout, scenarios, ctx, results, failed)
                head = results["layouts"][ctx.layouts[0]]
                results["scenarios"] = head.pop("scenarios")
        finally:
            if zk is not None:
                zk.stop()
    results["settings"] = ctx.settings
    results["start_retries"] = ctx.start_retries
    results["machine"]["fsync_end"] = fsync_latency(ctx.data)
    results["loadavg_end"] = loadavg()
    results["elapsed_s"] = round(time.monotonic() - ctx.progress.t0, 1)
    if args.profile:
        summarise(results)
    shutil.rmtree(ctx.data, ignore_errors=True)

    elapsed = results["elapsed_s"]
    # this run's figures first, where nothing can lose them (the merge and the files follow)
    ctx.raw.mkdir(parents=True, exist_ok=True)
    (ctx.raw / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if args.merge and (out_dir / "results.json").exists() and not args.profile:
        results = merge(json.loads((out_dir / "results.json").read_text()), results)

    if args.profile:
        report.write_profiles(ctx.profile_dir, out_dir, results)
    else:
        report.write(results, out_dir, plots=not args.no_plots)
        if args.readme:
            report.update_readme(results, out_dir, headline=report.README)
    ctx.progress(f"done in {elapsed:.0f}s; results in {out_dir}"
                 + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
