"""What TLS costs a Headrace producer: the produce scenarios over PLAINTEXT and over SSL.

    python -m bench.tls [--scenarios S1,S3] [--size small] [--rounds 2]

For each round and scenario, a fresh broker with a PLAINTEXT and an SSL listener (a CA and
the broker's certificate made for the run with ``cryptography``, as the tests make them) is
driven by Kafka's ProducerPerformance, as ``bench.run`` drives it, once through each
listener (the order alternates between rounds); the broker is pinned to the broker CPU and
the tool to the client CPU. Printed: MiB/s and the broker's share of a core per run, and per
scenario the median SSL/PLAINTEXT throughput ratio. Needs Java 17 and Maven (the tool's jars
come from Maven Central, as for ``bench.run``).
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


def run_once(sc, listener: str, pki, work: Path, size: str, rep: int) -> dict:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": pki.broker,
    }
    data = work / f"{sc.id}-{listener}-{rep}"
    broker = brokers.HeadraceBroker(data, settings, log_file=work / f"{sc.id}.log")
    broker.start()
    try:
        port = broker.process.listener_ports[listener]
        topic = f"bench-{sc.id.lower()}"
        wire.ensure_topic(HOST, broker.port, topic, sc.partitions)  # over PLAINTEXT
        args = producer_args(sc, topic, f"{HOST}:{port}", sc.records[size])
        if listener == "SSL":
            args += [
                "security.protocol=SSL",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={pki.ca}",
            ]
        out, cpu = brokers.metered_tool(broker, PRODUCER, args, work / f"{sc.id}-{listener}.log")
    finally:
        broker.stop()
    parsed = parse_producer_performance(out)
    if parsed is None:
        raise RuntimeError(f"no ProducerPerformance summary for {sc.id} over {listener}")
    return {"mib_s": parsed["records_per_sec"] * sc.record_size / MiB, "cpu": cpu["broker_cpu"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default="S1,S3")
    ap.add_argument("--size", default="small", choices=["tiny", "small", "full"])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    brokers.pin_self(brokers.CLIENT_CPUS)
    chosen = [SCENARIOS[name] for name in args.scenarios.split(",")]
    with tempfile.TemporaryDirectory(prefix="headrace-bench-tls-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        for sc in chosen:
            runs: dict[str, list[dict]] = {"PLAINTEXT": [], "SSL": []}
            for rep in range(args.rounds):
                order = ["PLAINTEXT", "SSL"] if rep % 2 == 0 else ["SSL", "PLAINTEXT"]
                for listener in order:
                    r = run_once(sc, listener, pki, work, args.size, rep)
                    runs[listener].append(r)
                    print(f"{sc.id} {listener:9} round {rep}: {r['mib_s']:7.1f} MiB/s,"
                          f" broker CPU {r['cpu']:.2f}", flush=True)
            plain = statistics.median(r["mib_s"] for r in runs["PLAINTEXT"])
            tls = statistics.median(r["mib_s"] for r in runs["SSL"])
            print(f"{sc.id}: {sc.title}\n  PLAINTEXT {plain:.1f} MiB/s, SSL {tls:.1f} MiB/s,"
                  f" SSL/PLAINTEXT {tls / plain:.2f}x (medians of {args.rounds})", flush=True)


if __name__ == "__main__":
    main()
