"""The side-by-side scenarios, their sizes and the bar Headrace has to meet in each.

A scenario is data: what the client does, how big the run is at each size, and how the two
medians compare. ``bench/run.py`` executes them; ``bench/report.py`` judges them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = ("tiny", "small", "full")


@dataclass(frozen=True, slots=True)
class Bar:
    """Headrace's median ``metric`` over Kafka's must be >= ``ratio`` (``higher``) or
    <= ``ratio`` (lower is better)."""

    metric: str
    ratio: float
    higher: bool = True

    def text(self) -> str:
        return f"{'>=' if self.higher else '<='} {self.ratio:g}x Kafka"

    def met(self, ratio: float | None) -> bool | None:
        if ratio is None:
            return None
        return ratio >= self.ratio if self.higher else ratio <= self.ratio


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    title: str
    kind: str  # "produce", "consume", "e2e", "coldstart"
    partitions: int = 1
    record_size: int = 0
    records: dict[str, int] = field(default_factory=dict)  # per size
    producer_props: dict[str, object] = field(default_factory=dict)
    durable: bool = False
    rate_bytes: int = 0  # e2e, and produce when set: bytes per second offered (else unlimited)
    seconds: dict[str, float] = field(default_factory=dict)  # e2e: duration per size
    bars: tuple[Bar, ...] = ()
    metrics: tuple[str, ...] = ()  # reported, in this order
    dirty: bool = False  # at full size, each run writes more than the dirty page threshold

    @property
    def primary(self) -> str:
        """The metric a broker's maximum is taken on (and the better Kafka variant chosen)."""
        return "records_per_sec" if self.record_size and self.record_size < 1024 \
            and self.kind == "produce" else "mb_per_sec"


S1_PROPS = {"acks": "all", "batch.size": MiB, "linger.ms": 1}
PRODUCE_METRICS = ("mb_per_sec", "records_per_sec", "mib_per_broker_cpu_s", "broker_cores",
                   "p50_ms", "p99_ms")
CONSUME_METRICS = ("mb_per_sec", "records_per_sec", "mib_per_broker_cpu_s", "broker_cores",
                   "rebalance_ms")
EFFICIENCY = Bar("mib_per_broker_cpu_s", 1.0)
# Measured runs of the saturation scenarios last about this long (records are sized from the
# rate measured before), and each broker process first takes a discarded warm-up run.
SECONDS = {"tiny": 3.0, "small": 10.0, "full": 30.0}

SCENARIOS: dict[str, Scenario] = {s.id: s for s in [
    # S1 at full size also writes more than the machine's dirty page threshold per run, so
    # that writeback and segment rolls happen inside the measured window (``dirty=True``).
    Scenario("S1", "1 partition, 64 KiB records, batch.size=1 MiB, linger.ms=1, acks=all",
             "produce", 1, 64 * KiB, {"tiny": 64, "small": 2048, "full": 16384}, S1_PROPS,
             bars=(Bar("mb_per_sec", 1.0), EFFICIENCY), metrics=PRODUCE_METRICS, dirty=True),
    Scenario("S2", "S1 with durable acks (log.flush.interval.messages=1 on both)",
             "produce", 1, 64 * KiB, {"tiny": 64, "small": 1024, "full": 8192}, S1_PROPS,
             durable=True,
             bars=(Bar("mb_per_sec", 2.0), Bar("p99_at_kafka_half_ms", 0.2, higher=False),
                   EFFICIENCY),
             metrics=PRODUCE_METRICS + ("p99_at_kafka_half_ms",)),
    Scenario("S3", "8 partitions, 1 KiB records, acks=all", "produce", 8, KiB,
             {"tiny": 20_000, "small": 300_000, "full": 1_000_000}, {"acks": "all"},
             bars=(Bar("mb_per_sec", 1.0), EFFICIENCY), metrics=PRODUCE_METRICS),
    Scenario("S4", "1 partition, 100-byte records, acks=all", "produce", 1, 100,
             {"tiny": 50_000, "small": 1_000_000, "full": 3_000_000}, {"acks": "all"},
             bars=(Bar("records_per_sec", 1.0), EFFICIENCY), metrics=PRODUCE_METRICS),
    # every consumer reads the whole topic in a group of its own: N consumers, N times the
    # topic fetched
    Scenario("S5", "consumers reading what an S1 producer wrote", "consume", 1,
             64 * KiB, {"tiny": 256, "small": 4096, "full": 131072}, S1_PROPS,
             bars=(Bar("mb_per_sec", 1.0), EFFICIENCY), metrics=CONSUME_METRICS),
    Scenario("S6", "fixed rate 10 MB/s, 1 KiB records, end-to-end latency (assign())", "e2e",
             1, KiB, rate_bytes=10 * 1000 * 1000,
             seconds={"tiny": 3, "small": 10, "full": 30},
             bars=(Bar("p99_ms", 1.0, higher=False),),
             metrics=("p50_ms", "p99_ms", "p999_ms", "achieved_mb_per_sec")),
    Scenario("S7", "cold start: process spawn to first acknowledged produce", "coldstart",
             bars=(Bar("cold_start_ms", 0.1, higher=False),),
             metrics=("cold_start_ms", "listening_ms")),
]}

LOWER_IS_BETTER = {"p50_ms", "p99_ms", "p999_ms", "p99_at_kafka_half_ms", "avg_ms", "max_ms", "cold_start_ms",
                   "listening_ms", "rebalance_ms"}

UNITS = {
    "mb_per_sec": "MiB/s", "records_per_sec": "rec/s", "mib_per_broker_cpu_s": "MiB/CPU-s",
    "broker_cores": "cores", "p99_at_kafka_half_ms": "ms", "p50_ms": "ms", "p99_ms": "ms",
    "p999_ms": "ms", "fetch_mb_per_sec": "MiB/s", "rebalance_ms": "ms",
    "achieved_mb_per_sec": "MB/s", "cold_start_ms": "ms", "listening_ms": "ms",
}

LABELS = {
    "mb_per_sec": "throughput", "records_per_sec": "records/s", "p50_ms": "latency p50",
    "p99_ms": "latency p99", "p999_ms": "latency p99.9", "fetch_mb_per_sec": "fetch throughput",
    "rebalance_ms": "group join time", "achieved_mb_per_sec": "achieved rate",
    "cold_start_ms": "spawn to first ack", "listening_ms": "spawn to port ready",
    "broker_cpu": "broker CPU used", "mib_per_broker_cpu_s": "MiB per broker CPU-second",
    "broker_cores": "broker CPU used", "p99_at_kafka_half_ms": "p99 at 50% of Kafka's maximum",
}


def with_e2e_rate(sc: Scenario, mb_per_sec: float) -> Scenario:
    """S6 at another offered rate (MB = 10^6 bytes)."""
    title = re.sub(r"fixed rate [\d.]+ MB/s", f"fixed rate {mb_per_sec:g} MB/s", sc.title)
    return replace(sc, rate_bytes=int(mb_per_sec * 1e6), title=title)


def select(ids: str | None) -> list[Scenario]:
    if not ids:
        return list(SCENARIOS.values())
    out = []
    for i in ids.split(","):
        i = i.strip().upper()
        if i not in SCENARIOS:
            raise SystemExit(f"unknown scenario {i}; known: {', '.join(SCENARIOS)}")
        out.append(SCENARIOS[i])
    return out
