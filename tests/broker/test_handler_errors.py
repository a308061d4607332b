"""A request whose handler fails unexpectedly gets UNKNOWN_SERVER_ERROR and the traceback
goes to the broker's log, as in Kafka; the connection stays open for the next requests.
Storage errors name the partition and the cause in the log.

The failures are injected into a real in-process broker (``headrace.Broker``): an API
module's ``handle`` is wrapped so that it raises for one topic (or returns an awaitable that
raises), and real clients talk to it over sockets. A disk that fills up (a small tmpfs, root
only) makes the storage errors.
"""

from __future__ import annotations

import logging
import os

import pytest

import headrace
from headrace.broker.apis import describe_configs, produce
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch
from kafkawire import WireClient

BOOM = "boom"


@pytest.fixture
def broker(monkeypatch):
    real_configs, real_produce = describe_configs.handle, produce.handle

    def configs_failing(broker, header, request):
        if any(r.resource_name == BOOM for r in request.resources):
            raise RuntimeError("injected failure in DescribeConfigs")
        return real_configs(broker, header, request)

    def produce_failing(broker, header, request):
        if any(t.name == BOOM for t in request.topic_data):
            if request.acks == 0:
                raise RuntimeError("injected failure in an acks=0 Produce")

            async def later():
                raise RuntimeError("injected failure after the Produce was handled")

            return later()
        return real_produce(broker, header, request)

    monkeypatch.setattr(describe_configs, "handle", configs_failing)
    monkeypatch.setattr(produce, "handle", produce_failing)
    with headrace.Broker() as b:
        b.create_topic(BOOM)
        b.create_topic("fine")
        yield b


def failures(caplog) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "headrace" and "answering UNKNOWN_SERVER_ERROR" in r.getMessage()
    ]


def test_failing_handler_answers_unknown_server_error_and_keeps_the_connection(broker, caplog):
    D = messages.DescribeConfigsRequest
    resources = [
        D.DescribeConfigsResource(resource_type=2, resource_name=name, configuration_keys=None)
        for name in ("fine", BOOM)
    ]
    with WireClient(broker.port) as client:
        response = client.request(ApiKey.DESCRIBE_CONFIGS, 4, D(resources=resources))
        # every resource of the request is answered, each with the error
        assert [(r.resource_name, r.error_code) for r in response.results] == [
            ("fine", ErrorCode.UNKNOWN_SERVER_ERROR),
            (BOOM, ErrorCode.UNKNOWN_SERVER_ERROR),
        ]
        # the same connection goes on
        ok = client.request(ApiKey.DESCRIBE_CONFIGS, 4, D(resources=resources[:1]))
        assert ok.results[0].error_code == ErrorCode.NONE
    (record,) = failures(caplog)
    assert record.levelno == logging.ERROR
    assert "DESCRIBE_CONFIGS v4" in record.getMessage()
    assert record.exc_info is not None and "injected failure" in str(record.exc_info[1])


def test_real_admin_client_sees_the_error(broker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    boom = ConfigResource(ConfigResource.Type.TOPIC, BOOM)
    with pytest.raises(KafkaException) as failed:
        admin.describe_configs([boom])[boom].result(10)
    assert failed.value.args[0].code() == KafkaError.UNKNOWN
    fine = ConfigResource(ConfigResource.Type.TOPIC, "fine")
    assert "cleanup.policy" in admin.describe_configs([fine])[fine].result(10)


def test_failing_awaitable_answers_unknown_server_error(broker, caplog):
    from kafka import KafkaProducer
    from kafka.errors import UnknownError

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0)
    with pytest.raises(UnknownError):
        producer.send(BOOM, b"x").get(10)
    assert producer.send("fine", b"y").get(10).offset == 0  # the same producer goes on
    producer.close()
    assert any("PRODUCE" in r.getMessage() for r in failures(caplog))


def test_failing_acks0_produce_closes_the_connection(broker, caplog):
    P = messages.ProduceRequest
    batch = build_batch([Record(key=None, value=b"v", timestamp=1)])
    request = P(
        transactional_id=None,
        acks=0,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name=BOOM, partition_data=[P.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    with WireClient(broker.port) as client:
        client.send(ApiKey.PRODUCE, 9, request)
        assert client.closed_by_peer()  # nothing else can tell an acks=0 client
    assert failures(caplog)


def test_storage_errors_are_logged_with_partition_and_cause(kafka_broker_factory, small_disk):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    broker = kafka_broker_factory(log_flush_interval_messages=1, data_dir=small_disk / "data")
    broker.create_topic("full")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0, acks="all")
    assert producer.send("full", b"first").get(10).offset == 0
    st = os.statvfs(small_disk)
    with open(small_disk / "filler", "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 64 * 1024))
    errors = 0
    for _ in range(200):
        try:
            producer.send("full", os.urandom(4000)).get(10)
        except KafkaStorageError:
            errors += 1
            if errors == 3:
                break
    producer.close()
    assert errors == 3
    logged = [line for line in broker.lines if "partition full-0:" in line]
    assert len(logged) == 1, logged  # once per partition and operation within 10 s
    assert "append failed" in logged[0] or "flush failed" in logged[0]
    assert "No space left on device" in logged[0]
    broker.kill()
