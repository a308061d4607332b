"""Share groups side by side: Kafka 4.4's ``ShareConsumerPerformance`` (one share consumer)
against Headrace and Apache Kafka 4.4 on this machine, in one run.

    python -m bench.shareconsume [--records 1000000] [--rounds 3]

Both brokers run at once on 127.0.0.1 (Headrace: ``headrace serve`` on 9292; Kafka: single-node
KRaft from Maven Central on 9192, its share-state topic at replication factor 1: Kafka's
default of 3 leaves a lone broker unable to serve share groups). Each gets a one-partition
topic of ``--records`` 100-byte records from ``ProducerPerformance`` (acks=all); then, round
after round, interleaved, a new share group (``share.auto.offset.reset=earliest``) reads them
all. Reported per round and broker: records/s as the tool prints them, and the broker's
CPU-seconds over the read (user + system, /proc/<pid>/stat). One consumer, one partition: a
first comparison, not a saturated broker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench import apache_kafka as ak

VERSION = "4.4.0"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tool(main_class: str, args: list[str]) -> str:
    return ak.run_tool(f"org.apache.kafka.tools.{main_class}", args, version=VERSION, timeout=900)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="shareconsume-")
    kafka = ak.ApacheKafka(f"{root}/kafka", port=9192, version=VERSION, properties={
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1}).start()
    headrace = subprocess.Popen(
        [sys.executable, "-m", "headrace", "serve", "--host", "127.0.0.1", "--port", "9292",
         "--data-dir", f"{root}/headrace"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    brokers = {
        "headrace": ("127.0.0.1:9292", headrace.pid),
        "kafka": (kafka.bootstrap, kafka.proc.pid),
    }
    try:
        for bootstrap, _ in brokers.values():
            tool("TopicCommand", ["--bootstrap-server", bootstrap, "--create", "--topic", "sq",
                                  "--partitions", "1", "--replication-factor", "1"])
            tool("ProducerPerformance", [
                "--topic", "sq", "--num-records", str(args.records), "--record-size", "100",
                "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}",
                "acks=all", "linger.ms=5"])
        print("round broker records/s broker-cpu-s")
        for r in range(args.rounds):
            for name, (bootstrap, pid) in brokers.items():
                group = f"perf{r}"
                tool("ConfigCommand", ["--bootstrap-server", bootstrap, "--entity-type", "groups",
                                       "--entity-name", group, "--alter",
                                       "--add-config", "share.auto.offset.reset=earliest"])
                before = cpu_seconds(pid)
                out = tool("ShareConsumerPerformance", [
                    "--bootstrap-server", bootstrap, "--topic", "sq", "--group", group,
                    "--num-records", str(args.records), "--timeout", "120000"])
                used = cpu_seconds(pid) - before
                last = [line for line in out.splitlines() if line.strip()][-1].split(", ")
                print(f"{r} {name} {float(last[4]):.0f} {used:.1f}", flush=True)
    finally:
        headrace.terminate()
        kafka.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
