"""Kafka 4.4's KafkaShareConsumer against one broker: a share group with several consumers on
one partition, explicit ACCEPT / RELEASE / REJECT, and a consumer killed while it holds
records (tests/broker/java/ShareCheck.java does the consuming)."""

from __future__ import annotations

import importlib.util
import subprocess
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Producer

from test_cluster import cluster  # noqa: F401
from test_features import KAFKA_4_4, java
from test_group_configs import alter
from test_group_protocol import create_topic

from kafkawire import WireClient

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("java") / "ShareCheck.java"
COUNT = 1000


def share_check(*args: str, timeout: float = 120) -> list[str]:
    spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
    apache_kafka = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(apache_kafka)
    cmd = ["java", *apache_kafka.log_flags(KAFKA_4_4, tool=True), "-cp",
           apache_kafka.classpath(KAFKA_4_4), str(CHECK), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(done.stderr[-4000:])
    return done.stdout.splitlines()


@java
def test_share_consumers_accept_release_reject_and_a_killed_one(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    with WireClient(broker.port) as c:
        create_topic(c, "jobs", 1)
    assert alter(broker.port, "workers", share_auto_offset_reset="earliest") == (0, None)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(COUNT):
        producer.produce("jobs", str(n).encode())
        if n % 10 == 9:  # batches of ten: a share fetch hands out whole batches
            assert producer.flush(30) == 0

    held = share_check("hold", bootstrap, "jobs", "workers")
    assert held and held[-1].startswith("holding "), held
    holding = int(held[-1].split()[1])

    lines = share_check("consume", bootstrap, "jobs", "workers", "3", "5", "2")
    assert lines[-1] == "done", lines[-20:]
    deliveries = defaultdict(list)  # n -> [(delivery count, type)]
    consumers = set()
    settled = defaultdict(list)
    for line in lines[:-1]:
        if line.startswith("settled "):
            _, offset, outcome = line.split()
            settled[int(offset)].append(outcome)
            continue
        _, who, n, count, kind = line.split()
        deliveries[int(n)].append((int(count), kind))
        consumers.add(who)
    assert sorted(settled) == list(range(COUNT))  # every acknowledgement was answered...
    assert all(outcomes == ["ok"] * len(outcomes) for outcomes in settled.values())  # ...well
    assert sorted(deliveries) == list(range(COUNT))  # none lost
    for n, got in deliveries.items():
        kinds = [k for _, k in got]
        if n % 10 == 7:
            assert kinds == ["REJECT"], (n, got)  # never again
        elif n % 10 == 3:
            assert kinds.count("ACCEPT") == 1 and kinds[-1] == "ACCEPT", (n, got)
            assert got[-1][0] >= 2, (n, got)  # delivered again after the release
        else:
            assert kinds == ["ACCEPT"], (n, got)  # accepted once
    # what the killed consumer held came back: delivered a second time
    again = sum(1 for n, got in deliveries.items() if n % 10 != 3 and got[0][0] >= 2)
    assert again >= holding - holding // 10 - 1, (again, holding)
    assert len(consumers) >= 2  # the three consumers shared the partition


@java
def test_kafka_console_share_consumer(broker):
    """kafka-console-share-consumer 4.4 reads a share group's records, and with --reject
    rejects them: a second reader of the group then finds none."""
    from confluent_kafka import Producer as Plain

    from test_moves import _kafka_tool

    bootstrap = f"127.0.0.1:{broker.port}"
    with WireClient(broker.port) as c:
        create_topic(c, "lines", 1)
    assert alter(broker.port, "console", share_auto_offset_reset="earliest") == (0, None)
    producer = Plain({"bootstrap.servers": bootstrap})
    for n in range(20):
        producer.produce("lines", f"line-{n}".encode())
    assert producer.flush(30) == 0
    tool = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
    args = ["--bootstrap-server", bootstrap, "--topic", "lines", "--group", "console"]
    shown = _kafka_tool(tool, [*args, "--max-messages", "20", "--timeout-ms", "20000", "--reject"],
                        version=KAFKA_4_4)
    assert sorted(shown.stdout.split()) == sorted(f"line-{n}" for n in range(20))
    again = _kafka_tool(tool, [*args, "--timeout-ms", "3000"], version=KAFKA_4_4)
    assert again.stdout.split() == []


def settle_log(lines: list[str]):
    """Read ShareCheck's output in order: (deliveries n -> [(count, kind)], confirmed n -> the
    kind the broker confirmed last, violations: deliveries after a confirmed ACCEPT/REJECT)."""
    deliveries = defaultdict(list)
    sent: dict[int, str] = {}  # n -> the kind last sent for it
    confirmed: dict[int, str] = {}
    violations = []
    for line in lines:
        if line.startswith("got "):
            _, _, n, count, kind = line.split()
            n = int(n)
            if confirmed.get(n) in ("ACCEPT", "REJECT"):
                violations.append(line)
            deliveries[n].append((int(count), kind))
            sent[n] = kind
        elif line.startswith("settled "):
            _, offset, outcome = line.split()
            if outcome == "ok" and int(offset) in sent:
                confirmed[int(offset)] = sent[int(offset)]
    return deliveries, confirmed, violations


@java
def test_share_consumers_through_a_leader_kill_and_a_restart(cluster):
    """Three brokers, RF=3: Kafka 4.4 share consumers work through a kill -9 of the partition's
    leader and its restart. No record whose acceptance (or rejection) the broker confirmed is
    delivered again, and every record is in the end accepted, or rejected if it was meant to
    be."""
    import threading
    import time

    from test_cluster import bootstrap as servers
    from test_cluster import create, leaders, wait_for

    brokers = cluster(3)
    bootstrap = servers(brokers)
    create(brokers, "jobs", 1, replication_factor=3)
    wait_for(lambda: all(leaders(b, "jobs").get(0, -1) > 0 for b in brokers), 20, "a leader")
    assert alter(brokers[0].port, "workers", share_auto_offset_reset="earliest") == (0, None)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for n in range(COUNT):
        producer.produce("jobs", str(n).encode())
        if n % 10 == 9:
            assert producer.flush(30) == 0

    out: list[str] = []
    run = threading.Thread(target=lambda: out.extend(
        share_check("consume", bootstrap, "jobs", "workers", "3", "10", "20", timeout=300)))
    run.start()
    time.sleep(4)
    leader = leaders(brokers[0], "jobs")[0]
    victim = brokers[leader - 1]
    victim.kill()  # kill -9 the partition's leader, mid-way
    time.sleep(8)
    victim.restart()
    run.join(300)
    assert out and out[-1] == "done", out[-20:]
    deliveries, confirmed, violations = settle_log(out)
    again = sum(len(d) for d in deliveries.values()) - COUNT - COUNT // 10
    failed = sum(1 for line in out if line.endswith(" failed"))
    print(f"deliveries beyond the planned ones: {again}; acknowledgements refused: {failed}")
    assert not violations, violations[:10]
    assert sorted(deliveries) == list(range(COUNT))  # none lost
    for n in range(COUNT):
        assert confirmed.get(n) == ("REJECT" if n % 10 == 7 else "ACCEPT"), (n, deliveries[n])
