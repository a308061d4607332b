"""What TLS costs a producer, on Headrace and on Apache Kafka: the produce scenarios over
PLAINTEXT and over SSL.

    python -m bench.tls [--scenarios S1,S3] [--size small] [--rounds 2] [--brokers kafka,headrace]

For each round, scenario and broker, a fresh broker with a PLAINTEXT and an SSL listener (a CA
and the broker's certificate made for the run with ``cryptography``, as the tests make them;
both brokers read the same PEM files: Kafka's ``ssl.keystore.type=PEM``) is driven by Kafka's
ProducerPerformance, as ``bench.run`` drives it, once through each listener (the order
alternates between rounds, and so does the order of the brokers); the broker is pinned to the
broker CPU and the tool to the client CPU. Printed: MiB/s and the broker's share of a core per
run, and per scenario and broker the median SSL/PLAINTEXT ratio, and Headrace/Kafka over SSL.
Needs Java 17 and Maven (Kafka's jars come from Maven Central, as for ``bench.run``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

from bench import brokers, wire
from bench.apache_kafka import HOST, parse_producer_performance
from bench.produce import PRODUCER, producer_args
from bench.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def make_pki(directory: Path):
    spec = importlib.util.spec_from_file_location("tlsfiles", ROOT / "tests" / "tlsfiles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tlsfiles"] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module.make_pki(directory)


def start(kind: str, pki, data: Path, log_file: Path) -> brokers.Broker:
    """A broker of ``kind`` with a PLAINTEXT and an SSL listener, started."""
    if kind == "kafka":
        keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": pki.broker}
        return brokers.KafkaBroker(data, keystore, ssl=True).start()
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": pki.broker,
    }
    return brokers.HeadraceBroker(data, settings, log_file=log_file).start()


def ssl_port(broker: brokers.Broker) -> int:
    if isinstance(broker, brokers.KafkaBroker):
        return broker.ssl_port
    return broker.process.listener_ports["SSL"]


def run_once(sc, kind: str, listener: str, pki, work: Path, size: str, rep: int) -> dict:
    broker = start(kind, pki, work / f"{kind}-{sc.id}-{listener}-{rep}", work / f"{sc.id}.log")
    try:
        port = broker.port if listener == "PLAINTEXT" else ssl_port(broker)
        topic = f"bench-{sc.id.lower()}"
        wire.ensure_topic(HOST, broker.port, topic, sc.partitions)  # over PLAINTEXT
        args = producer_args(sc, topic, f"{HOST}:{port}", sc.records[size])
        if listener == "SSL":
            args += [
                "security.protocol=SSL",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={pki.ca}",
            ]
        log = work / f"{kind}-{sc.id}-{listener}.log"
        out, cpu = brokers.metered_tool(broker, PRODUCER, args, log)
    finally:
        broker.stop()
        broker.cleanup()
    parsed = parse_producer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ProducerPerformance summary for {sc.id} over {listener}")
    return {"mib_s": parsed["records_per_sec"] * sc.record_size / MiB, "cpu": cpu["broker_cpu"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default="S1,S3")
    ap.add_argument("--size", default="small", choices=["tiny", "small", "full"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--brokers", default="kafka,headrace")
    args = ap.parse_args(argv)
    brokers.pin_self(brokers.CLIENT_CPUS)
    chosen = [SCENARIOS[name] for name in args.scenarios.split(",")]
    kinds = args.brokers.split(",")
    with tempfile.TemporaryDirectory(prefix="headrace-bench-tls-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        for sc in chosen:
            runs: dict[tuple[str, str], list[dict]] = {}
            for rep in range(args.rounds):
                listeners = ["PLAINTEXT", "SSL"] if rep % 2 == 0 else ["SSL", "PLAINTEXT"]
                for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                    for listener in listeners:
                        r = run_once(sc, kind, listener, pki, work, args.size, rep)
                        runs.setdefault((kind, listener), []).append(r)
                        print(f"{sc.id} {kind:8} {listener:9} round {rep}: {r['mib_s']:7.1f}"
                              f" MiB/s, broker CPU {r['cpu']:.2f}", flush=True)
            median = {k: statistics.median(r["mib_s"] for r in v) for k, v in runs.items()}
            print(f"{sc.id}: {sc.title} (medians of {args.rounds})", flush=True)
            for kind in kinds:
                plain, tls = median[kind, "PLAINTEXT"], median[kind, "SSL"]
                print(f"  {kind:8} PLAINTEXT {plain:.1f} MiB/s, SSL {tls:.1f} MiB/s,"
                      f" SSL/PLAINTEXT {tls / plain:.2f}x", flush=True)
            if {"kafka", "headrace"} <= set(kinds):
                ratio = median["headrace", "SSL"] / median["kafka", "SSL"]
                print(f"  over SSL, Headrace/Kafka {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
