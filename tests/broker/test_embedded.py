"""``headrace.Broker``: a broker on its own thread and event loop in the test's process, used
by real clients (kafka-python, confluent-kafka, aiokafka) over real sockets."""

from __future__ import annotations

import socket

import pytest

import headrace
from headrace.broker.client.admin_request import AdminError
from headrace.broker.config.settings import ConfigError
from headrace.broker.app.server import StartupError


def refused(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def produce_and_read(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` with kafka-python (acks=all) and read the whole topic back."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for v in values:
        producer.send(topic, v).get(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    seen = [m.value for m in consumer]
    consumer.close()
    return seen


def test_context_manager_serves_clients_and_cleans_up():
    with headrace.Broker(num_partitions=3) as broker:
        bootstrap = broker.bootstrap_servers
        assert bootstrap.startswith("127.0.0.1:") and broker.port > 0
        data_dir = broker.data_dir
        assert produce_and_read(bootstrap, "auto", [b"a", b"b"]) in ([b"a", b"b"], [b"b", b"a"])
        from confluent_kafka.admin import AdminClient

        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert len(topics["auto"].partitions) == 3  # num_partitions=3 took effect
    assert refused(bootstrap)
    assert not data_dir.exists()  # the temporary directory went with the broker


def test_settings_as_dict_and_create_topic():
    with headrace.Broker({"auto.create.topics.enable": False}) as broker:
        broker.create_topic("made", partitions=2, cleanup_policy="compact")
        with pytest.raises(AdminError, match="TOPIC_ALREADY_EXISTS"):
            broker.create_topic("made")
        from confluent_kafka.admin import AdminClient, ConfigResource

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        meta = admin.list_topics(timeout=10)
        assert len(meta.topics["made"].partitions) == 2
        assert "missing" not in meta.topics  # auto-creation is off
        resource = ConfigResource(ConfigResource.Type.TOPIC, "made")
        configs = admin.describe_configs([resource])[resource].result(10)
        assert configs["cleanup.policy"].value == "compact"


def test_given_data_dir_outlives_the_broker_and_restart_keeps_port_and_data(tmp_path):
    with headrace.Broker(data_dir=tmp_path / "data") as broker:
        assert produce_and_read(broker.bootstrap_servers, "kept", [b"one"]) == [b"one"]
        port = broker.port
        broker.restart()
        assert broker.port == port
        assert produce_and_read(broker.bootstrap_servers, "kept", [b"two"]) == [b"one", b"two"]
    assert (tmp_path / "data" / ".clean_shutdown").exists()  # stopped cleanly, dir kept
    with headrace.Broker(data_dir=tmp_path / "data") as again:
        assert produce_and_read(again.bootstrap_servers, "kept", []) == [b"one", b"two"]


async def test_async_context_manager_with_aiokafka():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async with headrace.Broker() as broker:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        await producer.start()
        try:
            meta = await producer.send_and_wait("aio", b"value")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio", bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            record = await consumer.getone()
        finally:
            await consumer.stop()
        assert (record.offset, record.value) == (meta.offset, b"value")
        bootstrap = broker.bootstrap_servers
    assert refused(bootstrap)


def test_two_brokers_at_once_and_one_data_dir_each(tmp_path):
    with headrace.Broker(data_dir=tmp_path / "a") as a, headrace.Broker() as b:
        assert a.port != b.port
        assert produce_and_read(a.bootstrap_servers, "t", [b"a"]) == [b"a"]
        assert produce_and_read(b.bootstrap_servers, "t", [b"b"]) == [b"b"]
        with pytest.raises(StartupError, match="in use by another broker"):
            headrace.Broker(data_dir=tmp_path / "a").start()


def test_bad_settings_fail_at_construction():
    with pytest.raises(ConfigError, match="unknown setting 'no.such.setting'"):
        headrace.Broker({"no.such.setting": 1})
    with pytest.raises(ConfigError, match="num.partitions"):
        headrace.Broker(num_partitions="many")
    with pytest.raises(ValueError, match="not both"):
        headrace.Broker({"log.dirs": "/tmp/x"}, data_dir="/tmp/y")


def test_port_taken_is_a_startup_error_that_releases_the_data_dir(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match="cannot listen"):
            with headrace.Broker(listeners=f"PLAINTEXT://127.0.0.1:{port}", data_dir=tmp_path):
                pass
    with headrace.Broker(data_dir=tmp_path) as broker:  # the failed start let go of it
        assert produce_and_read(broker.bootstrap_servers, "t", [b"x"]) == [b"x"]


@pytest.mark.parametrize("name", ["acls", "quotas", "group_configs", "delegation_tokens"])
def test_a_shared_document_that_cannot_be_read_stops_the_start(tmp_path, name):
    for content in ('{"cut', "[1]"):  # not JSON; JSON of the wrong shape
        (tmp_path / f"{name}.json").write_text(content)
        with pytest.raises(StartupError, match=f"cannot read {tmp_path / name}.json"):
            headrace.Broker(data_dir=tmp_path).start()
    (tmp_path / f"{name}.json").unlink()
    with headrace.Broker(data_dir=tmp_path) as broker:  # the failed starts let go of it
        assert produce_and_read(broker.bootstrap_servers, "t", [b"x"]) == [b"x"]
