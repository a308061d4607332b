"""The cold-start scenario (S7): process spawn to the first acknowledged produce."""

from __future__ import annotations

import threading
import time

from bench import brokers, wire
from bench.apache_kafka import HOST
from bench.context import Context, loadavg
from bench.scenarios import Scenario


def run_coldstart(sc: Scenario, kind: str, ctx: Context, rep: int) -> dict:
    """Spawn to first acknowledged produce, timed by a poller thread that is already
    retrying (connect, Metadata v1 which auto-creates the topic, Produce v3 acks=all)
    when the process is spawned. Formatting Kafka's storage happens before (not timed).
    Tansu creates no topic on Metadata: the poller sends it a CreateTopics first, one round
    trip more than the others get."""
    broker = brokers.make_broker(kind, ctx.next_dir(f"{sc.id}-{kind}"), fixed_port=True,
                                 log_dir=ctx.logs)
    sample: dict = {"loadavg": loadavg()}
    broker.prepare()  # ports are chosen here, before the spawn
    result: dict = {}

    def poll() -> None:
        try:
            result["ack"] = wire.first_ack(HOST, broker.port, "bench-s7", time.monotonic() + 180,
                                           create=brokers.system_of(kind) == "tansu")
        except Exception as e:  # reported below
            result["error"] = repr(e)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        broker.start()
        ready = time.monotonic()
        t.join(180)
    finally:
        broker.stop()
        broker.cleanup()
    if "ack" not in result:
        raise RuntimeError(f"{sc.id}/{kind}: no acknowledged produce: {result.get('error')}")
    sample["cold_start_ms"] = (result["ack"] - broker.spawned_at) * 1000
    sample["listening_ms"] = (ready - broker.spawned_at) * 1000
    ctx.progress(f"  {kind} spawn to first ack {sample['cold_start_ms']:.0f} ms")
    return sample
