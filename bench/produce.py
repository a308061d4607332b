"""Produce scenarios (S1-S4): Kafka's ProducerPerformance against a fresh broker; its final
summary line is parsed by ``apache_kafka.parse_producer_performance``."""

from __future__ import annotations

from bench import brokers, wire
from bench.apache_kafka import HOST, parse_producer_performance
from bench.context import Context, echo, loadavg
from bench.profiler import FlightRecording, Profiler, jfr_to_collapsed
from bench.scenarios import Scenario

PRODUCER = "org.apache.kafka.tools.ProducerPerformance"


def producer_args(sc: Scenario, topic: str, bootstrap: str, records: int) -> list[str]:
    props = [f"bootstrap.servers={bootstrap}"] + [f"{k}={v}" for k, v in sc.producer_props.items()]
    rate = str(sc.rate_bytes // sc.record_size) if sc.rate_bytes and sc.kind == "produce" else "-1"
    return ["--topic", topic, "--num-records", str(records), "--record-size",
            str(sc.record_size), "--throughput", rate, "--producer-props", *props]


def run_produce(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), durable=sc.durable,
                                 log_dir=ctx.logs)
    records = sc.records[ctx.size]
    topic = f"bench-{sc.id.lower()}"
    sample = {"loadavg": loadavg()}
    jfr = None
    broker.prepare()
    broker.start()
    prof = None
    try:
        wire.ensure_topic(HOST, broker.port, topic, sc.partitions)
        if ctx.profile_dir is not None and kind == "headrace":
            prof = Profiler(broker.pid, ctx.profile_dir / f"{sc.id}.collapsed",
                            idle=ctx.profile_idle)
        elif ctx.profile_dir is not None and isinstance(broker, brokers.KafkaBroker):
            jfr = ctx.profile_dir / f"{sc.id}-{kind}.jfr"
            prof = FlightRecording(broker.pid, jfr)
        out, cpu = brokers.metered_tool(
            broker, PRODUCER, producer_args(sc, topic, broker.bootstrap, records),
            ctx.logs / f"{sc.id}-{kind}-{rep}.log", on_line=echo(ctx, kind))
        sample.update(cpu)
    finally:
        if prof:
            prof.finish()
        broker.stop()
        broker.cleanup()
    if jfr is not None:
        n = jfr_to_collapsed(jfr, jfr.with_suffix(".collapsed"))
        ctx.progress(f"  {kind}: {n} JFR execution samples")
    parsed = parse_producer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ProducerPerformance summary in the output of {sc.id}/{kind}")
    sample.update(parsed)
    sample["bytes_per_sec"] = parsed["records_per_sec"] * sc.record_size
    return sample
