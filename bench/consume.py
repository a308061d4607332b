"""The consume scenario (S5): data written once per broker with the S1 producer, then read by
Kafka's ConsumerPerformance on a fresh process of the same broker, run after run."""

from __future__ import annotations

from pathlib import Path

from bench import brokers, wire
from bench.apache_kafka import HOST, parse_producer_performance
from bench.context import Context, echo, loadavg
from bench.produce import PRODUCER, producer_args
from bench.scenarios import GiB, Scenario


def parse_consumer_performance(out: str) -> dict | None:
    """ConsumerPerformance's CSV result row (after its ``start.time, ...`` header)."""
    header = None
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if cells and cells[0] == "start.time":
            header = cells
        elif header and len(cells) == len(header):
            row = dict(zip(header, cells))
            try:
                return {
                    "mb_consumed": float(row["data.consumed.in.MB"]),
                    "mb_per_sec": float(row["MB.sec"]),
                    "records": float(row["data.consumed.in.nMsg"]),
                    "records_per_sec": float(row["nMsg.sec"]),
                    "rebalance_ms": float(row["rebalance.time.ms"]),
                    "fetch_ms": float(row["fetch.time.ms"]),
                    "fetch_mb_per_sec": float(row["fetch.MB.sec"]),
                    "fetch_records_per_sec": float(row["fetch.nMsg.sec"]),
                }
            except (KeyError, ValueError):
                return None
    return None


class ConsumeSetup:
    """S5's data: written once per broker with S1's producer, kept across the runs."""

    def __init__(self) -> None:
        self.dirs: dict[str, Path] = {}
        self.skip: dict[str, str] = {}
        self.produced: dict[str, dict] = {}


def setup_consume(sc: Scenario, ctx: Context) -> ConsumeSetup:
    st = ConsumeSetup()
    records = sc.records[ctx.size]
    for kind in ctx.kinds:
        d = ctx.next_dir(f"{sc.id}-{kind}-data")
        broker = brokers.make_broker(kind, d, log_dir=ctx.logs)
        broker.prepare()
        broker.start()
        try:
            missing = wire.group_apis_missing(HOST, broker.port)
            if missing:
                st.skip[kind] = ("not yet runnable: ConsumerPerformance uses subscribe(), and "
                                 f"{kind} does not list {', '.join(missing)}")
                ctx.progress(f"{sc.id} {kind}: {st.skip[kind]}")
                continue
            wire.ensure_topic(HOST, broker.port, "bench-s5", 1)
            size_gib = records * sc.record_size / GiB
            ctx.progress(f"{sc.id} {kind}: writing {size_gib:.2f} GiB with the S1 producer")
            out = brokers.java_tool(PRODUCER,
                                    producer_args(sc, "bench-s5", broker.bootstrap, records),
                                    ctx.logs / f"{sc.id}-{kind}-setup.log",
                                    on_line=echo(ctx, kind))
            st.produced[kind] = parse_producer_performance(out) or {}
            st.dirs[kind] = d
        finally:
            broker.stop()
            if kind in st.skip:
                broker.cleanup()
    return st


def run_consume(sc: Scenario, kind: str, ctx: Context, rep: int, st: ConsumeSetup) -> dict:
    if kind in st.skip:
        return {"loadavg": loadavg(), "status": "not runnable", "reason": st.skip[kind]}
    broker = brokers.make_broker(kind, st.dirs[kind], log_dir=ctx.logs)
    sample = {"loadavg": loadavg()}
    broker.start()
    try:
        out, cpu = brokers.metered_tool(
            broker, "org.apache.kafka.tools.ConsumerPerformance",
            ["--bootstrap-server", broker.bootstrap, "--topic", "bench-s5",
             "--messages", str(sc.records[ctx.size]), "--group", f"bench-s5-{rep}-{kind}",
             "--timeout", "60000"],
            ctx.logs / f"{sc.id}-{kind}-{rep}.log", on_line=echo(ctx, kind))
        sample.update(cpu)
    finally:
        broker.stop()
    parsed = parse_consumer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ConsumerPerformance result in the output of {sc.id}/{kind}")
    sample.update(parsed)
    sample["bytes_per_sec"] = parsed["fetch_mb_per_sec"] * (1 << 20)
    return sample
