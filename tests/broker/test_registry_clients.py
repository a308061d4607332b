"""The schema registry with confluent-kafka's own client and serializers (no mocks): Avro,
JSON Schema and Protobuf records produced to a Headrace topic and read back through the
registry; schemas evolved, incompatible changes refused with 409; then a restart of the
broker, after which every subject, version and id is as it was.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from headrace.broker.tools.process import BrokerProcess

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
ORDER_V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "quantity", "type": "int", "default": 1},
    ],
}
ORDER_BAD = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}],
}
EVENT_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event",
    "type": "object",
    "properties": {"kind": {"type": "string"}, "at": {"type": "integer"}},
    "required": ["kind"],
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("registry-clients"),
        {"schema.registry.listeners": "http://127.0.0.1:0", "num.partitions": 1},
    ).start()
    yield b
    b.kill()


def registry_url(b: BrokerProcess) -> str:
    return f"http://127.0.0.1:{b.listener_ports['SCHEMA_REGISTRY']}"


@pytest.fixture
def client(broker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url(broker)})


def round_trip(broker, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` to ``topic`` and read them back."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        producer.produce(topic, value=v)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])  # (no group join to wait for)
    got: list[bytes] = []
    try:
        for _ in range(300):
            if len(got) == len(values):
                break
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    return got


def test_avro_serializer_round_trip_evolution_and_refusal(broker, client):
    topic = "orders"
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = AvroSerializer(client, json.dumps(ORDER_V1))
    orders = [{"id": i, "item": f"thing-{i}"} for i in range(5)]
    payloads = [serializer(o, ctx) for o in orders]
    assert payloads[0][0] == 0  # Confluent's wire format: magic 0, then the schema id
    v1_id = int.from_bytes(payloads[0][1:5], "big")
    got = round_trip(broker, topic, payloads)
    deserializer = AvroDeserializer(client)
    assert [deserializer(v, ctx) for v in got] == orders
    assert client.get_latest_version("orders-value").schema_id == v1_id
    # evolve: a field with a default (BACKWARD); records of both versions read back
    v2 = client.register_schema("orders-value", Schema(json.dumps(ORDER_V2), "AVRO"))
    assert v2 != v1_id
    assert client.get_versions("orders-value") == [1, 2]
    serializer2 = AvroSerializer(client, json.dumps(ORDER_V2))
    newer = serializer2({"id": 9, "item": "new", "quantity": 3}, ctx)
    reader = AvroDeserializer(client, json.dumps(ORDER_V2))
    assert reader(payloads[0], ctx) == {"id": 0, "item": "thing-0", "quantity": 1}
    assert reader(newer, ctx) == {"id": 9, "item": "new", "quantity": 3}
    # an incompatible change is refused with 409
    assert not client.test_compatibility("orders-value", Schema(json.dumps(ORDER_BAD), "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("orders-value", Schema(json.dumps(ORDER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    # the same schema under another subject gets the same id
    assert client.register_schema("mirror-value", Schema(json.dumps(ORDER_V1), "AVRO")) == v1_id


def test_json_serializer_round_trip_and_refusal(broker, client):
    topic = "events"
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(json.dumps(EVENT_JSON), client)
    events = [{"kind": "click", "at": i} for i in range(4)]
    got = round_trip(broker, topic, [serializer(e, ctx) for e in events])
    deserializer = JSONDeserializer(json.dumps(EVENT_JSON), schema_registry_client=client)
    assert [deserializer(v, ctx) for v in got] == events
    # dropping a required property is compatible (BACKWARD); changing a type is not
    relaxed = {**EVENT_JSON, "required": []}
    client.register_schema("events-value", Schema(json.dumps(relaxed), "JSON"))
    retyped = {
        **EVENT_JSON,
        "properties": {"kind": {"type": "integer"}, "at": {"type": "integer"}},
    }
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("events-value", Schema(json.dumps(retyped), "JSON"))
    assert refused.value.http_status_code == 409


def message_class(fields: list[tuple[str, int, int]], name: str = "Reading"):
    """A Protobuf message class made at run time (no protoc): ``fields`` as (name, number,
    FieldDescriptorProto type)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name=f"{name.lower()}_{uuid.uuid4().hex[:6]}.proto", package="sensors", syntax="proto3"
    )
    m = fd.message_type.add(name=name)
    for field_name, number, kind in fields:
        m.field.add(name=field_name, number=number, type=kind, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"sensors.{name}"))


T = descriptor_pb2.FieldDescriptorProto


def test_protobuf_serializer_round_trip_evolution_and_refusal(broker, client):
    topic = "readings"
    ctx = SerializationContext(topic, MessageField.VALUE)
    Reading = message_class([("sensor", 1, T.TYPE_STRING), ("value", 2, T.TYPE_DOUBLE)])
    conf = {"use.deprecated.format": False}
    serializer = ProtobufSerializer(Reading, client, conf)
    readings = [Reading(sensor=f"s{i}", value=i / 2) for i in range(3)]
    got = round_trip(broker, topic, [serializer(r, ctx) for r in readings])
    deserializer = ProtobufDeserializer(Reading, conf)
    assert [deserializer(v, ctx) for v in got] == readings
    # a field added: compatible; a field's type changed: refused
    Added = message_class(
        [("sensor", 1, T.TYPE_STRING), ("value", 2, T.TYPE_DOUBLE), ("unit", 3, T.TYPE_STRING)]
    )
    ProtobufSerializer(Added, client, conf)(Added(sensor="x", value=1.0, unit="C"), ctx)
    assert client.get_versions("readings-value") == [1, 2]
    Changed = message_class([("sensor", 1, T.TYPE_INT64), ("value", 2, T.TYPE_DOUBLE)])
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(Changed, client, conf)(Changed(sensor=1, value=1.0), ctx)
    assert refused.value.http_status_code == 409


def every_version(c: SchemaRegistryClient, fields) -> dict:
    """(subject, version) -> ``fields`` of it, for every live version the registry holds."""
    return {
        (subject, v): fields(c.get_version(subject, v))
        for subject in c.get_subjects()
        for v in c.get_versions(subject)
    }


def kept_across_restarts(broker: BrokerProcess, snapshot):
    """``snapshot()`` before, after a clean stop and after a SIGKILL (each time the same)."""
    before = snapshot()
    for stop in (broker.stop, broker.kill):
        stop()
        broker.start()
        assert snapshot() == before
    return before


def test_a_restart_keeps_every_schema_and_id(broker, client):
    """(After the tests above, on the same broker.) A clean stop and a SIGKILL: each time every
    subject, version, id and setting reads back the same, and new ids go on from the highest."""
    client.set_compatibility("events-value", "FORWARD")
    client.delete_version("orders-value", 2)  # a soft delete survives too

    def snapshot():
        c = SchemaRegistryClient({"url": registry_url(broker)})
        out = every_version(c, lambda r: (r.schema_id, r.schema.schema_str, r.schema.schema_type))
        deleted = c.get_version("orders-value", 2, deleted=True).schema_id
        return out, deleted, c.get_compatibility("events-value")

    before = kept_across_restarts(broker, snapshot)
    assert len(before[0]) >= 6
    c = SchemaRegistryClient({"url": registry_url(broker)})
    highest = max(i for i, _, _ in before[0].values())
    fresh = {**ORDER_V1, "name": "Fresh"}
    assert c.register_schema("fresh-value", Schema(json.dumps(fresh), "AVRO")) > highest
