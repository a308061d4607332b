"""The pytest plugin (``headrace.pytest_plugin``, the ``pytest11`` entry point ``headrace``).

``test_example_project_*`` run pytest in a subprocess on ``tests/plugin_example``, a project of
its own (its own pyproject.toml and pytest settings, no conftest.py, rootdir there), with the
Headrace installed in this environment. What that proves: pytest finds the fixtures through
the installed package's entry point alone (``-p no:headrace`` makes the same run fail with
"fixture 'kafka_broker' not found"), and a user's test using them with a real client passes.
What it does not: that a wheel built from this tree installs into a fresh environment (the
plugin is a module of the ``headrace`` package, which every install has).

The other tests use the fixtures here, as any test suite would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import headrace
from headrace.broker.client.admin_request import AdminError
from headrace.broker.tools.process import BrokerProcess

EXAMPLE = Path(__file__).resolve().parent.parent / "plugin_example"


def run_example(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_example_project_gets_the_fixture_from_the_entry_point():
    done = run_example()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"rootdir: {EXAMPLE}" in done.stdout  # its own project, not ours
    assert "2 passed" in done.stdout


def test_example_project_without_the_plugin_has_no_fixture():
    done = run_example("-p", "no:headrace")
    assert done.returncode != 0
    assert "fixture 'kafka_broker' not found" in done.stdout


def consume(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    for _ in range(40):
        values += [m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        if len(values) >= expect:
            break
    consumer.close()
    return values


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0


def test_kafka_broker_is_a_process_that_can_be_killed_and_restarted(kafka_broker):
    assert isinstance(kafka_broker, BrokerProcess)
    kafka_broker.create_topic("events", partitions=2, retention_ms=3_600_000)
    with pytest.raises(AdminError, match="TOPIC_ALREADY_EXISTS"):
        kafka_broker.create_topic("events")
    produce(kafka_broker.bootstrap_servers, "events", [b"before"])
    pid = kafka_broker.pid
    kafka_broker.kill()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", kafka_broker.port), timeout=2)
    kafka_broker.restart()
    assert kafka_broker.pid != pid
    assert any("recovered" in line for line in kafka_broker.lines)  # the kill was unclean
    produce(kafka_broker.bootstrap_servers, "events", [b"after"])
    assert sorted(consume(kafka_broker.bootstrap_servers, "events", 2)) == [b"after", b"before"]


@pytest.fixture(scope="module")
def shared_broker(kafka_broker_factory):
    """One in-process broker for the module's tests, with settings of its own."""
    broker = kafka_broker_factory({"auto.create.topics.enable": False}, in_process=True)
    yield broker
    broker.stop()


def test_factory_in_process_broker_with_settings(shared_broker):
    assert isinstance(shared_broker, headrace.Broker)
    assert not hasattr(shared_broker, "kill")  # an unclean stop needs a process
    shared_broker.create_topic("first", partitions=3)
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers}).list_topics(
        timeout=10
    )
    assert len(topics.topics["first"].partitions) == 3


def test_factory_broker_lives_for_its_scope(shared_broker):
    # the topic the previous test made is still there: the same broker, auto-creation off
    produce(shared_broker.bootstrap_servers, "first", [b"kept"])
    shared_broker.restart()
    assert consume(shared_broker.bootstrap_servers, "first", 1) == [b"kept"]


def test_factory_keywords_name_settings(kafka_broker_factory, tmp_path):
    broker = kafka_broker_factory(num_partitions=4, data_dir=tmp_path / "d")
    try:
        produce(broker.bootstrap_servers, "auto", [b"x"])
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
        assert len(meta.topics["auto"].partitions) == 4
        assert (tmp_path / "d" / "meta.properties").exists()
    finally:
        broker.stop()
