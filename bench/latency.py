"""The end-to-end latency scenario (S6): ``bench/java/EndToEndRate.java`` produces at a fixed
rate and consumes the same records, then prints one ``E2E key=value ...`` line.

Each broker process first takes a discarded warm-up run (a third of the measured length, on
a topic of its own). A run proves its work: records sent > 0, every one received, no client
error; else it raises (and fails its cell)."""

from __future__ import annotations

from bench import brokers, wire
from bench.apache_kafka import HOST
from bench.context import HERE, Context, echo, loadavg
from bench.scenarios import Scenario

JAVA_E2E = HERE / "java" / "EndToEndRate.java"


def run_e2e(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), log_dir=ctx.logs)
    rate = sc.rate_bytes // sc.record_size
    seconds = sc.seconds[ctx.size]
    warmup = min(5.0, seconds / 3)
    sample = {"loadavg": loadavg(), "offered_records_per_sec": rate}
    broker.prepare()
    broker.start()
    try:
        wire.ensure_topic(HOST, broker.port, "bench-s6-warmup", 1)
        brokers.java_tool(JAVA_E2E, [broker.bootstrap, "bench-s6-warmup", str(rate),
                                     str(sc.record_size), str(max(1.0, seconds / 3)), "0"],
                          ctx.logs / f"{sc.id}-{kind}-{rep}-warmup.log")
        wire.ensure_topic(HOST, broker.port, "bench-s6", 1)
        out, cpu = brokers.metered_tool(
            broker, JAVA_E2E, [broker.bootstrap, "bench-s6", str(rate), str(sc.record_size),
                               str(seconds), str(warmup)],
            ctx.logs / f"{sc.id}-{kind}-{rep}.log", on_line=echo(ctx, kind))
        sample.update(cpu)
    finally:
        broker.stop()
        broker.cleanup()
    parsed = parse_e2e(out)
    if parsed is None:
        raise RuntimeError(f"no E2E line in the output of {sc.id}/{kind}")
    sample.update(parsed)
    problems = [p for p, bad in (
        ("no records sent", parsed.get("sent", 0) <= 0),
        (f"{parsed.get('received', 0):.0f} of {parsed.get('sent', 0):.0f} records received",
         parsed.get("received", 0) < parsed.get("sent", 0)),
        ("no record counted after the warm-up", parsed.get("counted", 0) <= 0),
        (f"{parsed.get('errors', 0):.0f} client errors", parsed.get("errors", 0) != 0)) if bad]
    if problems:
        raise RuntimeError(f"{sc.id}/{kind}: " + "; ".join(problems))
    sample["achieved_mb_per_sec"] = sample["achieved_rps"] * sc.record_size / 1e6
    return sample


def parse_e2e(out: str) -> dict[str, float] | None:
    """The last ``E2E key=value ...`` line of EndToEndRate's output."""
    lines = [ln for ln in out.splitlines() if ln.startswith("E2E ")]
    if not lines:
        return None
    return {k: float(v) for k, v in (kv.split("=", 1) for kv in lines[-1].split()[1:])}
