"""Kafka Streams 4.4 with ``group.protocol=streams`` (KIP-1071) over a kill -9 and restart of
its lone broker: word count (tests/broker/java/WordCount.java, a repartition topic and a
counting store with its changelog, both created by the broker), two exactly-once instances.
The word count with instances joining and leaving, at least once, exactly once and with the
classic protocol, is the compatibility suite's (``streams-*`` scenarios of java44)."""

from __future__ import annotations

import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer

from kafkawire import WireClient
from streams_classpath import classpath
from test_features import java
from test_group_protocol import FAST, create_topic

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "java" / "WordCount.java"
LOG4J2 = HERE / "java" / "streams-log4j2.properties"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
SETTINGS = {**FAST, "group.streams.initial.rebalance.delay.ms": "1000",
            "group.streams.min.heartbeat.interval.ms": "500", "group.streams.heartbeat.interval.ms": "1000",
            "transaction.state.log.num.partitions": "3"}


class Instance:
    """One Kafka Streams instance (a JVM running WordCount.java); its output lines kept."""

    def __init__(self, tmp: Path, name: str, bootstrap: str, app: str, guarantee: str, protocol: str):
        self.name = name
        self.run_file = tmp / f"{name}.run"
        self.run_file.touch()
        self.lines: list[str] = []
        self.log = open(tmp / f"{name}.log", "w")
        self.proc = subprocess.Popen(
            ["java", f"-Dlog4j2.configurationFile={LOG4J2}", "-cp", classpath(), str(PROGRAM), bootstrap, app,
             "words", "counts", guarantee, protocol, str(tmp / f"{name}-state"), str(self.run_file)],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def tasks(self) -> set[str]:
        last = [x for x in self.lines if x.startswith("tasks")]
        return set(last[-1].split()[1].split(",")) if last and len(last[-1].split()) > 1 else set()

    def running(self) -> bool:
        states = [x.split()[1] for x in self.lines if x.startswith("state ")]
        return bool(states) and states[-1] == "RUNNING"

    def stop(self):
        self.run_file.unlink(missing_ok=True)
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()


def wait_for(what, check, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def produce(bootstrap: str, start: int, count: int, expected: Counter):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(start, start + count):
        words = [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(1 + n % 5)]
        expected.update(words)
        p.produce("words", key=str(n).encode(), value=" ".join(words).encode())
    assert p.flush(30) == 0


class Counts:
    """The latest count of each word in the output topic (read_committed)."""

    def __init__(self, bootstrap: str):
        self.latest: dict[str, int] = {}
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                           "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                           "enable.auto.commit": False})
        self.c.subscribe(["counts"])

    def read(self):
        for m in self.c.consume(500, 0.5):
            if m.error() is None:
                self.latest[m.key().decode()] = struct.unpack(">q", m.value())[0]
        return self.latest

    def close(self):
        self.c.close()


ALL_TASKS = {f"{s}_{p}" for s in (0, 1) for p in range(4)}


@java
def test_word_count_keeps_its_tasks_over_a_broker_restart(broker_factory, tmp_path):
    """The lone broker is killed (-9) and started again under two exactly-once instances: the
    streams group comes back from ``__consumer_offsets``, so each member keeps its id, epoch
    and tasks (no rebalance: the instances never leave RUNNING), and the counts come out
    exact."""
    from headrace.protocol import ApiKey, messages

    b = broker_factory(SETTINGS)
    bootstrap = f"127.0.0.1:{b.port}"
    app = "wc-restart"
    with WireClient(b.port) as c:
        create_topic(c, "words", 4)
        create_topic(c, "counts", 2)
    expected: Counter = Counter()
    produce(bootstrap, 0, 200, expected)
    counts = Counts(bootstrap)
    first = Instance(tmp_path, "first", bootstrap, app, "exactly_once_v2", "streams")
    second = Instance(tmp_path, "second", bootstrap, app, "exactly_once_v2", "streams")

    def members():
        with WireClient(b.port) as c:
            g = c.request(ApiKey.STREAMS_GROUP_DESCRIBE, 0, messages.StreamsGroupDescribeRequest(
                group_ids=[app], include_authorized_operations=False)).groups[0]
        return g.group_epoch, sorted((m.member_id, m.member_epoch) for m in g.members)

    try:
        wait_for("the tasks spread over both",
                 lambda: first.tasks() | second.tasks() == ALL_TASKS and not first.tasks() & second.tasks()
                 and first.running() and second.running())
        wait_for("the counts", lambda: counts.read() == expected)
        tasks, before = (first.tasks(), second.tasks()), members()

        def states():
            return [[x for x in i.lines if x.startswith("state ")] for i in (first, second)]

        states_before = states()
        b.kill()
        b.start()
        produce(bootstrap, 200, 200, expected)
        wait_for("the counts after the restart", lambda: counts.read() == expected)
        assert (first.tasks(), second.tasks()) == tasks
        assert members() == before
        assert states() == states_before  # still RUNNING: no rebalance
        assert not [x for x in first.lines + second.lines if x.startswith("error")]
    finally:
        counts.close()
        for i in (first, second):
            if i.proc.poll() is None:
                i.stop()
