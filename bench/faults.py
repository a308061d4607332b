"""Failover under load: repeated ``kill -9`` of a partition leader in a 3-broker cluster, or
rolling restarts of all three brokers.

    python -m bench.faults --rounds 20 [--session-ms 6000] [--partitions 3] [--producers 3]
    python -m bench.faults --mode rolling --rounds 2

Starts ZooKeeper (Maven Central's jars, as the tests do) and three Headrace brokers on
127.0.0.1, creates an RF=3 topic with ``min.insync.replicas=2``, and runs idempotent acks=all
producers (confluent-kafka, tests/fault_load.py) against it. Each round waits until every
partition has its full ISR, kills the leader of partition 0 with SIGKILL, measures the time
from the kill to the first acknowledged write on partition 0 (on its new leader), then starts
the killed broker again. At the end the topic is read back and every acknowledged record
checked. Printed per round: the victim, the failover time, and the acked / lost / duplicated /
reordered counts so far (the check is done once, at the end, over all rounds; the per-round
line gives the acknowledgements of that round).

The failover time is bounded below by ``zookeeper.session.timeout.ms`` (the controller
learns a broker is gone when its session expires): say which one a figure used.

``--mode rolling``: each round restarts the three brokers one after the other, as an operator
would: wait until every partition has its full ISR, stop the broker with SIGTERM (its
controlled shutdown hands its leaderships to other ISR members first), start it again. Printed
per restart: the controlled shutdown's own figure from the broker's log, how long the stop
took, and how long from serving again until every ISR was full; at the end the same acked /
lost / duplicated / reordered check, and per partition the longest time without an
acknowledgement from the first stop to the end (how long producers of that partition were
held up at worst), and the load average at the start and end (a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fault_load import AckedLoad  # noqa: E402

from headrace.broker.process import BrokerProcess  # noqa: E402
from headrace.broker.zookeeper_server import ZooKeeperServer  # noqa: E402


def _metadata(bootstrap: str, topic: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)


def wait_full_isrs(boot: str, topic: str, timeout: float = 120) -> float:
    """Wait until every partition of ``topic`` has a leader and 3 ISR members; the time
    waited."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout:
        md = _metadata(boot, topic).topics[topic].partitions
        if all(len(p.isrs) == 3 and p.leader > 0 for p in md.values()):
            break
        time.sleep(0.2)
    else:
        raise TimeoutError(f"{topic}: ISRs not full after {timeout} s")
    return time.monotonic() - t0


def kill_rounds(args, brokers: list[BrokerProcess], boot: str, topic: str,
                load: AckedLoad) -> list[str]:
    times = []
    for r in range(1, args.rounds + 1):
        wait_full_isrs(boot, topic)
        start_acks = load.acked_count()
        time.sleep(1.0)
        leader = _metadata(boot, topic).topics[topic].partitions[0].leader
        victim = brokers[leader - 1]
        killed = time.monotonic()
        victim.kill()
        first = None
        while first is None and time.monotonic() < killed + 120:
            time.sleep(0.05)
            first = load.first_ack_after(killed + 0.2, 0)
        took = (first - killed) if first is not None else float("nan")
        times.append(took)
        victim.start()
        print(
            f"round {r}: killed node {leader}, first ack on partition 0 after {took:.2f} s,"
            f" {load.acked_count() - start_acks} acked this round",
            flush=True,
        )
    good = [t for t in times if t == t]
    if not good:
        return []
    return [
        f"kill -> first ack on the new leader: median {statistics.median(good):.2f} s,"
        f" min {min(good):.2f} s, max {max(good):.2f} s"
        f" (zookeeper.session.timeout.ms={args.session_ms})"
    ]


def rolling_rounds(args, brokers: list[BrokerProcess], boot: str, topic: str,
                   load: AckedLoad) -> list[str]:
    wait_full_isrs(boot, topic)
    deadline = time.monotonic() + 120
    while load.acked_count() < 300:  # the producers are under way
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {load.acked_count()} records acknowledged in 120 s")
        time.sleep(0.1)
    started = time.monotonic()
    stops, refills = [], []
    for r in range(1, args.rounds + 1):
        start_acks = load.acked_count()
        for n, b in enumerate(brokers, 1):
            wait_full_isrs(boot, topic)
            t0, seen = time.monotonic(), b.seen
            code = b.stop()
            stops.append(time.monotonic() - t0)
            said = [line.split("controlled shutdown ")[1] for line in b.lines[-(b.seen - seen):]
                    if b.seen > seen and "controlled shutdown in" in line]
            b.start()
            refills.append(wait_full_isrs(boot, topic))
            print(
                f"round {r}, node {n}: exit code {code}, stopped in {stops[-1]:.2f} s"
                f" (controlled shutdown {said[-1] if said else 'not logged'}),"
                f" ISRs full {refills[-1]:.2f} s after it served again",
                flush=True,
            )
        print(f"round {r}: {load.acked_count() - start_acks} acked this round", flush=True)
    gaps = load.longest_gaps(started)
    return [
        f"stop (SIGTERM to exit): median {statistics.median(stops):.2f} s, max {max(stops):.2f} s;"
        f" serving again to full ISRs: median {statistics.median(refills):.2f} s,"
        f" max {max(refills):.2f} s",
        "longest time without an acknowledgement, per partition: "
        + ", ".join(f"{p}: {g:.2f} s" for p, g in gaps.items()),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("kill", "rolling"), default="kill",
                    help="kill: kill -9 of partition 0's leader per round; rolling: SIGTERM "
                         "and restart of each broker in turn per round")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--producers", type=int, default=3)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix="headrace-faults-"))
    # ZooKeeper grants sessions of at most 20 ticks: a tick long enough for --session-ms
    zk = ZooKeeperServer(work / "zookeeper", tick_ms=max(500, -(-args.session_ms // 20)))
    zk.start()
    brokers = [
        BrokerProcess(
            work / f"node{n}",
            {
                "zookeeper.connect": zk.connect_string + "/faults",
                "node.id": n,
                "zookeeper.session.timeout.ms": args.session_ms,
                "replica.lag.time.max.ms": 10000,
            },
            # INFO for the controlled shutdown's line
            args=["--workers", "1", "--log-level", "INFO" if args.mode == "rolling" else "WARNING"],
        )
        for n in (1, 2, 3)
    ]
    try:
        for b in brokers:
            b.start()
        boot = ",".join(b.bootstrap for b in brokers)
        topic = "faults"
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics(
            [NewTopic(topic, args.partitions, 3, config={"min.insync.replicas": "2"})]
        )[topic].result(30)
        load = AckedLoad(boot, topic, args.producers, args.partitions).start()
        print(f"{args.mode}: session timeout {args.session_ms} ms; {args.rounds} rounds;"
              f" load average {[round(x, 2) for x in os.getloadavg()]}", flush=True)
        rounds = rolling_rounds if args.mode == "rolling" else kill_rounds
        try:
            summary = rounds(args, brokers, boot, topic, load)
        finally:
            load.stop()
        result = load.check()
        print(
            f"acked {result['acked']} lost {result['lost']} duplicated {result['duplicated']}"
            f" reordered {result['reordered']} failed {result['failed']}"
            f" (read back completely: {bool(result['read_all'])})"
        )
        for copy in result["copies"]:
            print("duplicated:", copy)
        for line in summary:
            print(line)
        print(f"load average at the end {[round(x, 2) for x in os.getloadavg()]}")
        for e in load.errors:
            print("error:", e)
        return 0 if result["lost"] == result["duplicated"] == result["reordered"] == 0 else 1
    finally:
        for b in brokers:
            b.kill()
        zk.stop()


if __name__ == "__main__":
    sys.exit(main())
