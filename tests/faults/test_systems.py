"""bench/faults/systems.py: Headrace and Apache Kafka 3.9 (ZooKeeper mode), each as ZooKeeper
+ 3 brokers on 127.0.0.1, through the same interface.

Per system: start (timed), an RF=3 topic, 100 records produced with acks=all and read back,
SIGSTOP and SIGCONT of a broker, SIGKILL and restart of a broker until it is back in every
ISR, a clean stop and start of a broker, all brokers killed and started again (every record
still there), and ``stop()`` leaving no process. Needs Java and Maven (ZooKeeper; Kafka's jars from
Maven Central), skipped without. The Kafka test runs with ``HEADRACE_FAULTS_KAFKA=1`` (a
minute; ``python -m bench.faults`` starts Kafka through the same code at every run).

Times are printed (``pytest -s``) and recorded as test properties (``--junitxml``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from bench.faults import systems

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.timeout(240)

needs_java = pytest.mark.skipif(
    systems.tools_missing() is not None,
    reason=f"ZooKeeper and Kafka run from Maven Central's jars: {systems.tools_missing()}",
)
kafka_enabled = pytest.mark.skipif(
    os.environ.get("HEADRACE_FAULTS_KAFKA") != "1",
    reason="Apache Kafka's side of the harness: HEADRACE_FAULTS_KAFKA=1 pytest tests/faults",
)

TOPIC = "systems-check"
RECORDS = 100


# ---------------------------------------------------------------------------------------------
# no processes


def test_placement_and_ports():
    p = systems.Placement.loopback()
    assert [n.ip for n in (p.zookeeper, *p.brokers)] == ["127.0.0.1"] * 4
    assert p.broker(2) is p.brokers[1]
    port = p.zookeeper.port(systems.ZOOKEEPER_PORT)  # on loopback: a free port, not 2181's
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", port))
    remote = systems.Placement.of(
        ("10.0.0.1", ["ip", "netns", "exec", "zk"]),
        [(f"10.0.0.{i + 1}", ["ip", "netns", "exec", f"b{i}"]) for i in (1, 2, 3)],
    )
    assert remote.zookeeper.argv_prefix == ("ip", "netns", "exec", "zk")
    assert remote.broker(3).ip == "10.0.0.4"
    assert remote.zookeeper.port(systems.ZOOKEEPER_PORT) == 2181  # fixed off loopback
    assert remote.broker(1).port(systems.BROKER_PORT) == 9092
    with pytest.raises(ValueError):
        systems.Node("not-an-ip")
    with pytest.raises(ValueError):
        systems.Placement(brokers=(systems.Node(),))  # type: ignore[arg-type]


def test_settings_shared_and_zookeeper_tick(tmp_path):
    hr = systems.HeadraceCluster(tmp_path / "h", session_timeout_ms=4000)
    ak = systems.KafkaCluster(tmp_path / "k", session_timeout_ms=4000)
    for c in (hr, ak):
        assert c.settings == {**systems.SHARED_SETTINGS, "zookeeper.session.timeout.ms": 4000}
        assert c.not_applied == []
        # a 4 s session is granted: 2 <= 4000 / tick <= max
        zk = c.zookeeper
        assert zk.tick_ms <= 2000 and 2 * zk.tick_ms <= 4000 <= zk.settings["maxSessionTimeout"]
    # a name Headrace does not have is left out of its settings, not of Kafka's
    odd = {"leader.imbalance.check.interval.seconds": 30}
    assert (
        "leader.imbalance.check.interval.seconds"
        in systems.HeadraceCluster(tmp_path / "h2", settings=odd).not_applied
    )
    assert systems.KafkaCluster(tmp_path / "k2", settings=odd).not_applied == []
    long = systems.KafkaCluster(tmp_path / "k3", session_timeout_ms=18000).zookeeper
    assert long.settings["maxSessionTimeout"] >= 18000


def test_netns_thread_makes_its_sockets_in_the_namespace():
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        here = systems.NetnsThread(None)  # no thread: runs in place
        assert here.call(lambda: 7) == 7
        try:  # entering our own namespace by path: the setns path without a second namespace
            same = systems.NetnsThread(f"/proc/{os.getpid()}/ns/net")
        except PermissionError as e:
            pytest.skip(f"setns needs CAP_SYS_ADMIN: {e}")
        try:
            with same.connect(server.getsockname(), 2.0):
                conn, _ = server.accept()
                conn.close()
        finally:
            same.close()


# ---------------------------------------------------------------------------------------------
# the systems


def _isrs(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: (m.leader, sorted(m.isrs)) for p, m in md.topics[topic].partitions.items()}


def _wait_full_isrs(bootstrap: str, topic: str, timeout: float) -> float:
    t0 = time.monotonic()
    last: object = None
    while time.monotonic() < t0 + timeout:
        try:
            last = _isrs(bootstrap, topic)
            if last and all(leader > 0 and isr == [1, 2, 3] for leader, isr in last.values()):
                return time.monotonic() - t0
        except Exception as e:  # metadata while a broker restarts
            last = repr(e)
        time.sleep(0.2)
    raise AssertionError(f"ISRs not full after {timeout} s: {last}")


def _produce(bootstrap: str, topic: str, n: int) -> list[str]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 30000,
        }
    )
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    values = [f"record-{i}" for i in range(n)]
    for v in values:
        producer.produce(topic, v.encode(), callback=delivered)
    assert producer.flush(40) == 0, "records still in flight after 40 s"
    assert errors == []
    return values


def _read_all(bootstrap: str, topic: str, partitions: int, n: int) -> list[str]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "systems-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.value() or b"").decode())
    finally:
        consumer.close()
    return got


def _state(pid: int) -> str | None:
    """The process state letter from /proc (T: stopped), None if gone."""
    return systems.proc_state(pid)


def _gone(pid: int) -> bool:
    return _state(pid) in (None, "Z")  # a zombie is gone too (not ours to reap)


def exercise(cluster, record_property) -> dict[str, float]:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    times: dict[str, float] = {}
    all_pids: list[int] = []
    try:
        cluster.start()
        times["start"] = cluster.start_seconds
        pids = cluster.pids
        assert all(pids.values()), pids
        all_pids += [*pids.values(), cluster.zookeeper.pid]
        assert len(cluster.bootstrap.split(",")) == 3

        t0 = time.monotonic()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        _wait_full_isrs(cluster.bootstrap, TOPIC, 30)
        times["create topic"] = time.monotonic() - t0
        configs = admin.describe_configs([ConfigResource("topic", TOPIC)])
        (entries,) = [f.result(10) for f in configs.values()]
        assert entries["min.insync.replicas"].value == "2"

        t0 = time.monotonic()
        sent = _produce(cluster.bootstrap, TOPIC, RECORDS)
        read = _read_all(cluster.bootstrap, TOPIC, 3, RECORDS)
        assert sorted(read) == sorted(sent)
        times["produce 100 + read back"] = time.monotonic() - t0

        # SIGSTOP / SIGCONT
        pid2 = cluster.pid(2)
        cluster.pause(2)
        assert _state(pid2) == "T"
        cluster.resume(2)
        assert _state(pid2) != "T"
        assert cluster.pid(2) == pid2
        cluster.wait_ready(30)

        # SIGKILL and restart: back in every ISR
        old = cluster.pid(3)
        cluster.kill(3)
        assert cluster.pid(3) is None and _gone(old)
        t0 = time.monotonic()
        cluster.start_broker(3)
        times["restart after kill (to Metadata)"] = time.monotonic() - t0
        assert cluster.pid(3) not in (None, old)
        all_pids.append(cluster.pid(3))
        _wait_full_isrs(cluster.bootstrap, TOPIC, 60)
        times["restart after kill (to full ISRs)"] = time.monotonic() - t0
        more = _produce(cluster.bootstrap, TOPIC, 10)
        assert len(more) == 10

        # a clean stop and start of one broker
        t0 = time.monotonic()
        code = cluster.stop_broker(1)
        times["stop_broker (SIGTERM to exit)"] = time.monotonic() - t0
        # a JVM whose shutdown hooks ran on SIGTERM exits 143 (128 + 15)
        assert code in ((0, 143) if cluster.name == "kafka" else (0,)), code
        cluster.start_broker(1)
        _wait_full_isrs(cluster.bootstrap, TOPIC, 60)
        all_pids.append(cluster.pid(1))

        # every broker killed at once, started again: the acknowledged records are all there
        cluster.kill_all()
        assert cluster.pids == {1: None, 2: None, 3: None}
        t0 = time.monotonic()
        cluster.start_all()
        times["start_all after kill_all"] = time.monotonic() - t0
        all_pids += cluster.pids.values()
        read = _read_all(cluster.bootstrap, TOPIC, 3, RECORDS + 10)
        assert sorted(read) == sorted(sent + more)
    finally:
        t0 = time.monotonic()
        cluster.stop()
        times["stop"] = time.monotonic() - t0
    assert cluster.processes() == {}
    leftovers = [p for p in all_pids if p and not _gone(p)]
    assert leftovers == []
    for name, took in times.items():
        record_property(name, round(took, 2))
    print(
        f"\n{cluster.name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()),
        file=sys.stderr,
    )
    return times


@needs_java
@pytest.mark.timeout(150)
def test_headrace_cluster(tmp_path, record_property):
    exercise(systems.HeadraceCluster(tmp_path / "headrace"), record_property)


@needs_java
@kafka_enabled
@pytest.mark.timeout(180)
def test_kafka_cluster(tmp_path, record_property):
    systems.kafka_classpath(systems.KAFKA_VERSION)  # a first Maven resolution is not the test's
    exercise(systems.KafkaCluster(tmp_path / "kafka"), record_property)
