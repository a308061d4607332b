"""Schema GUIDs (Confluent Schema Registry 8.x), ``/contexts`` and the lists' ``offset`` and
``limit``, against a real broker: the GUIDs worked out here from Confluent's hashed layout
(``Schema.updateHash``), records framed with the GUID in a header (confluent-kafka's
``header_schema_id_serializer``) produced and read back.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
import registryhttp
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registryhttp import call

POINT = {
    "type": "record",
    "name": "Point",
    "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}],
}


def md5_uuid(*parts: bytes) -> str:
    return str(uuid.UUID(bytes=hashlib.md5(b"".join(parts)).digest()))


broker, base = registryhttp.fixtures("registry-guids", **{"num.partitions": 1})


def test_guid_in_answers_and_schema_by_guid(base):
    text = json.dumps(POINT, separators=(",", ":"))
    registered = call(base, "POST", "/subjects/gd-value/versions", {"schema": text})
    guid = md5_uuid(registered["schema"].encode())
    assert registered == {"id": registered["id"], "version": 1, "guid": guid, "schema": text}
    sid = registered["id"]
    assert call(base, "GET", "/subjects/gd-value/versions/1")["guid"] == guid
    assert call(base, "GET", f"/schemas/ids/{sid}") == {"guid": guid, "schema": text}
    assert call(base, "POST", "/subjects/gd-value", {"schema": text})["guid"] == guid
    # by GUID: the schema as by its id, in either written form
    assert call(base, "GET", f"/schemas/guids/{guid}") == {"guid": guid, "schema": text}
    assert call(base, "GET", f"/schemas/guids/{guid.upper().replace('-', '')}")["guid"] == guid
    # registering again answers the same
    assert call(base, "POST", "/subjects/gd-value/versions", {"schema": text}) == registered
    # unknown and malformed GUIDs: Confluent's 40403
    unknown = str(uuid.uuid4())
    error = call(base, "GET", f"/schemas/guids/{unknown}", status=404)
    assert error == {"error_code": 40403, "message": f"Schema {unknown} not found"}
    for bad in ("nope", "g" * 32, "1-2-3-4-5", "%00", "x" * 5000):
        assert call(base, "GET", f"/schemas/guids/{bad}", status=404)["error_code"] == 40403


def test_ids_by_guid(base):
    text = json.dumps({"type": "record", "name": "Ids", "fields": [{"name": "a", "type": "int"}]})
    registered = call(base, "POST", "/subjects/ids-value/versions", {"schema": text})
    guid, sid = registered["guid"], registered["id"]
    # the same schema in another subject: one id (ids are global), one entry
    assert call(base, "POST", "/subjects/ids-other/versions", {"schema": text})["id"] == sid
    assert call(base, "GET", f"/schemas/guids/{guid}/ids") == [{"context": ".", "id": sid}]
    assert call(base, "GET", f"/schemas/guids/{guid.replace('-', '').upper()}/ids") == [
        {"context": ".", "id": sid}
    ]
    # soft-deleted: the id still reads, so it is still listed
    call(base, "DELETE", "/subjects/ids-value")
    call(base, "DELETE", "/subjects/ids-other")
    assert call(base, "GET", f"/schemas/guids/{guid}/ids") == [{"context": ".", "id": sid}]
    # gone for good: none (Confluent's answers an empty list, not 40403)
    call(base, "DELETE", "/subjects/ids-value", permanent="true")
    call(base, "DELETE", "/subjects/ids-other", permanent="true")
    assert call(base, "GET", f"/schemas/guids/{guid}/ids") == []
    for bad in (str(uuid.uuid4()), "nope", "g" * 32, "%00", "x" * 5000):
        assert call(base, "GET", f"/schemas/guids/{bad}/ids") == []


def test_guid_covers_references_metadata_and_rule_set(base):
    call(base, "POST", "/subjects/gd-ref-value/versions", {"schema": json.dumps(POINT)})
    line = {
        "type": "record",
        "name": "Line",
        "fields": [{"name": "a", "type": "Point"}, {"name": "b", "type": "Point"}],
    }
    body = {
        "schema": json.dumps(line),
        "references": [{"name": "Point", "subject": "gd-ref-value", "version": 1}],
        "metadata": {
            "tags": {"b": ["PII", "EU"]},
            "properties": {"owner": "ann", "a": "1"},
            "sensitive": ["owner"],
        },
        "ruleSet": {
            "domainRules": [{"name": "r1", "type": "CEL", "expr": "true", "disabled": True}]
        },
    }
    registered = call(base, "POST", "/subjects/gd-line-value/versions", body)
    expected = md5_uuid(
        registered["schema"].encode(),
        b"Point", b"gd-ref-value", (1).to_bytes(4, "big"),
        b"\x01", b"b", b"EU", b"PII", b"a", b"1", b"owner", b"ann", b"owner",
        b"\x01", b"r1", b"TRANSFORM", b"WRITEREAD", b"CEL", b"true", b"\x01",
    )  # fmt: skip
    assert registered["guid"] == expected
    assert registered["metadata"]["properties"] == {"a": "1", "owner": "ann"}
    by_guid = call(base, "GET", f"/schemas/guids/{expected}")
    assert by_guid == call(base, "GET", f"/schemas/ids/{registered['id']}")
    assert by_guid["references"] == body["references"]
    wanted = {"key": "owner", "value": "ann"}
    assert call(base, "GET", "/subjects/gd-line-value/metadata", **wanted)["guid"] == expected
    listed = call(base, "GET", "/schemas", subjectPrefix="gd-line-")
    assert [(s["subject"], s["version"], s["guid"]) for s in listed] == [
        ("gd-line-value", 1, expected)
    ]


def test_contexts_and_paging(base):
    assert call(base, "GET", "/contexts") == ["."]
    assert call(base, "GET", "/contexts", offset=1) == []
    assert call(base, "GET", "/contexts", offset=0, limit=1) == ["."]
    for n in range(3):
        schema = {"type": "record", "name": "P", "fields": [{"name": f"f{n}", "type": "int"}]}
        call(base, "PUT", "/config/pg-value", {"compatibility": "NONE"})
        call(base, "POST", "/subjects/pg-value/versions", {"schema": json.dumps(schema)})
        call(base, "POST", f"/subjects/pg-{n}/versions", {"schema": json.dumps(schema)})
    assert call(base, "GET", "/subjects", subjectPrefix="pg-") == [
        "pg-0",
        "pg-1",
        "pg-2",
        "pg-value",
    ]
    assert call(base, "GET", "/subjects", subjectPrefix="pg-", offset=1, limit=2) == [
        "pg-1",
        "pg-2",
    ]
    assert call(base, "GET", "/subjects/pg-value/versions", offset=2) == [3]
    assert call(base, "GET", "/subjects/pg-value/versions", limit=0) == [1, 2, 3]  # (all)
    listed = call(base, "GET", "/schemas", subjectPrefix="pg-value")
    assert [s["version"] for s in listed] == [1, 2, 3]
    latest = call(base, "GET", "/schemas", subjectPrefix="pg-", latestOnly="true")
    assert [(s["subject"], s["version"]) for s in latest] == [
        ("pg-0", 1), ("pg-1", 1), ("pg-2", 1), ("pg-value", 3)
    ]  # fmt: skip
    # soft-deleted only
    call(base, "DELETE", "/subjects/pg-2")
    call(base, "DELETE", "/subjects/pg-value/versions/1")
    assert call(base, "GET", "/subjects", subjectPrefix="pg-", deletedOnly="true") == ["pg-2"]
    assert call(base, "GET", "/subjects/pg-value/versions", deletedOnly="true") == [1]
    # bad offsets and limits: Confluent's answer to a query parameter that is not an int
    for bad in ("x", "2147483648", "1.5", "99999999999999999999", " 1"):
        for path in ("/contexts", "/subjects", "/schemas", "/subjects/pg-value/versions"):
            error = call(base, "GET", path, offset=bad, status=404)
            assert error == {"error_code": 404, "message": "HTTP 404 Not Found"}
            assert call(base, "GET", path, limit=bad, status=404)["error_code"] == 404
    assert call(base, "GET", "/contexts", offset=2147483647, limit=-2147483648) == []
    assert call(base, "GET", "/contexts", offset=-5) == ["."]
    # a schema id in a path that is not a Java int: the same 404 (and no crash)
    for bad in ("abc", "%205", "2147483648", "%D9%A3"):  # (the last: an Arabic-Indic 3)
        error = call(base, "GET", f"/schemas/ids/{bad}", status=404)
        assert error == {"error_code": 404, "message": "HTTP 404 Not Found"}


def consume(broker, topic: str, count: int):
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(300):
            if len(got) == count:
                break
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_records_framed_with_the_guid_in_a_header(broker, base, kind):
    topic = f"framed-{kind}"
    client = SchemaRegistryClient({"url": base})
    conf = {"schema.id.serializer": header_schema_id_serializer}
    reader = SchemaRegistryClient({"url": base})  # (nothing cached from the writer)
    if kind == "avro":
        serializer = AvroSerializer(client, json.dumps(POINT), conf=conf)
        prefixed = AvroSerializer(client, json.dumps(POINT))
        deserializer = AvroDeserializer(reader)
    else:
        schema = json.dumps({"type": "object", "properties": {"x": {"type": "integer"}}})
        serializer = JSONSerializer(schema, client, conf=conf)
        prefixed = JSONSerializer(schema, client)
        deserializer = JSONDeserializer(None, schema_registry_client=reader)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    # (values above 5 bytes: confluent-kafka 2.16.1's AvroDeserializer refuses shorter ones
    # before it looks at the headers)
    points = [{"x": 10**6 + i, "y": -(10**6)} if kind == "avro" else {"x": i} for i in range(3)]
    for point in points:
        ctx = SerializationContext(topic, MessageField.VALUE, [])
        value = serializer(point, ctx)
        # the value without the 5 bytes of magic byte and id: the GUID is in the header
        assert value == prefixed(point, SerializationContext(topic, MessageField.VALUE))[5:]
        producer.produce(topic, value=value, headers=ctx.headers)
    assert producer.flush(30) == 0
    got = consume(broker, topic, len(points))
    latest = call(base, "GET", f"/subjects/{topic}-value/versions/latest")
    headers = dict(got[0].headers())
    assert headers["__value_schema_id"] == b"\x01" + uuid.UUID(latest["guid"]).bytes
    assert latest["guid"] == md5_uuid(latest["schema"].encode())
    read = [
        deserializer(m.value(), SerializationContext(topic, MessageField.VALUE, m.headers()))
        for m in got
    ]
    assert read == points
