"""Schema contexts (Confluent's ``:.ctx:subject``) against a real broker: ids numbered per
context, qualified subjects on the subject routes and in the lists (``subjectPrefix``,
``:*:``), ``GET /contexts``, ``DELETE /contexts/{c}``, a context's config and mode, ids read
with ``subject=``, the records in ``_schemas`` as Confluent writes them, a restart, and
confluent-kafka's client and serializers with a context subject.
"""

from __future__ import annotations

import json
import uuid

import pytest
import registryhttp
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registryhttp import call


def record(name: str, *fields: str) -> str:
    """An Avro record as the registry keeps it (compact, Avro's key order)."""
    doc = {"type": "record", "name": name, "fields": [{"name": f, "type": "int"} for f in fields]}
    return json.dumps(doc, separators=(",", ":"))


def register(base: str, subject: str, schema: str, **extra) -> dict:
    return call(base, "POST", f"/subjects/{subject}/versions", {"schema": schema, **extra})


broker, base = registryhttp.fixtures("registry-contexts", **{"num.partitions": 1})


@pytest.fixture(scope="module")
def ctx1(base):
    """A (default: ``ct-a`` id 1), B (``:.ctx1:ct-a``, id 1 there), then A in ``.ctx1``
    under two subjects (one id there, 2)."""
    a, b = record("A", "x"), record("B", "y")
    assert register(base, "ct-a", a)["id"] == 1
    first = register(base, ":.ctx1:ct-a", b)
    assert (first["id"], first["version"], first["schema"]) == (1, 1, b)
    assert register(base, ":.ctx1:ct-b", a)["id"] == 2  # its own id in the context
    assert register(base, ":.ctx1:ct-c", a)["id"] == 2  # one schema, one id in a context
    return a, b


def test_subjects_and_lists_are_qualified(base, ctx1):
    ctx_subjects = [":.ctx1:ct-a", ":.ctx1:ct-b", ":.ctx1:ct-c"]
    assert call(base, "GET", "/subjects") == [*ctx_subjects, "ct-a"]  # every context
    assert call(base, "GET", "/subjects", subjectPrefix="") == ["ct-a"]  # the default one
    assert call(base, "GET", "/subjects", subjectPrefix=":.ctx1:") == ctx_subjects
    assert call(base, "GET", "/subjects", subjectPrefix=":.ct") == ctx_subjects
    assert call(base, "GET", "/subjects", subjectPrefix=":*:ct-a") == [":.ctx1:ct-a", "ct-a"]
    assert call(base, "GET", "/subjects", subjectPrefix=":.ctx1:ct-b") == [":.ctx1:ct-b"]
    assert call(base, "GET", "/contexts") == [".", ".ctx1"]
    assert call(base, "GET", "/contexts", contextPrefix=".ctx") == [".ctx1"]
    # GET /schemas: the default context unless the prefix names others (Confluent's "")
    assert [s["subject"] for s in call(base, "GET", "/schemas")] == ["ct-a"]
    in_ctx1 = call(base, "GET", "/schemas", subjectPrefix=":.ctx1:")
    assert [(s["subject"], s["id"]) for s in in_ctx1] == list(zip(ctx_subjects, [1, 2, 2]))


def test_subject_routes_take_qualified_subjects(base, ctx1):
    a, b = ctx1
    got = call(base, "GET", "/subjects/:.ctx1:ct-a/versions/1")
    assert (got["subject"], got["version"], got["id"], got["schema"]) == (":.ctx1:ct-a", 1, 1, b)
    assert call(base, "GET", "/subjects/:.ctx1:ct-b/versions") == [1]
    # ":.:" is the default context: the subject as kept is the bare name
    assert call(base, "GET", "/subjects/:.:ct-a/versions/latest")["subject"] == "ct-a"
    found = call(base, "POST", "/subjects/:.ctx1:ct-c", {"schema": a})
    assert (found["subject"], found["id"]) == (":.ctx1:ct-c", 2)
    compatible = call(base, "POST", "/compatibility/subjects/:.ctx1:ct-a/versions/latest", {
        "schema": record("B", "y", "z")})  # fmt: skip
    assert compatible == {"is_compatible": False}
    error = call(base, "GET", "/subjects/:.ctx1:nope/versions", status=404)
    assert error == {"error_code": 40401, "message": "Subject ':.ctx1:nope' not found."}
    # no subject in the global context, nor an empty one
    for bad in (":.__GLOBAL:x", ":.ctx1:"):
        error = call(base, "POST", f"/subjects/{bad}/versions", {"schema": a}, status=422)
        assert error["error_code"] == 42208


def test_ids_are_read_in_the_subjects_context(base, ctx1):
    a, b = ctx1
    assert call(base, "GET", "/schemas/ids/1")["schema"] == a  # the default context's
    assert call(base, "GET", "/schemas/ids/1", subject=":.ctx1:ct-a")["schema"] == b
    assert call(base, "GET", "/schemas/ids/1", subject=":.ctx1:")["schema"] == b
    assert call(base, "GET", "/schemas/ids/2", subject=":.ctx1:")["schema"] == a
    # a subject of a named context must hold the id; the default context has no id 2
    error = call(base, "GET", "/schemas/ids/2", subject=":.ctx1:ct-a", status=404)
    assert error == {"error_code": 40403, "message": "Schema 2 not found"}
    assert call(base, "GET", "/schemas/ids/2", status=404)["error_code"] == 40403
    assert call(base, "GET", "/schemas/ids/2/subjects", subject=":.ctx1:") == [
        ":.ctx1:ct-b",
        ":.ctx1:ct-c",
    ]
    assert call(base, "GET", "/schemas/ids/1/versions", subject=":.ctx1:") == [
        {"subject": ":.ctx1:ct-a", "version": 1}
    ]
    assert call(base, "GET", "/schemas/ids/1/subjects") == ["ct-a"]
    # one GUID, an id in each context that holds it
    guid = call(base, "GET", "/schemas/ids/1")["guid"]
    assert call(base, "GET", f"/schemas/guids/{guid}/ids") == [
        {"context": ".", "id": 1},
        {"context": ".ctx1", "id": 2},
    ]


def test_a_bare_subject_is_looked_for_in_the_named_contexts(base, ctx1):
    c = record("C", "z")
    sid = register(base, ":.ctx1:ct-only", c)["id"]
    got = call(base, "GET", "/subjects/ct-only/versions/1")
    assert (got["subject"], got["id"], got["schema"]) == (":.ctx1:ct-only", sid, c)
    found = call(base, "POST", "/subjects/ct-only", {"schema": c})
    assert (found["subject"], found["version"]) == (":.ctx1:ct-only", 1)
    assert call(base, "GET", f"/schemas/ids/{sid}", subject="ct-only")["schema"] == c
    # not for a subject of a named context, nor when the bare subject has the version
    assert call(base, "GET", "/subjects/:.ctx9:ct-only/versions/1", status=404)["error_code"] == (
        40401
    )
    assert call(base, "GET", "/subjects/ct-a/versions/1")["subject"] == "ct-a"


def test_references_are_read_in_the_referring_context(base):
    point = record("Point", "x", "y")
    register(base, ":.ctx6:point", point)
    line = json.dumps({"type": "record", "name": "Line",
                       "fields": [{"name": "a", "type": "Point"}]})  # fmt: skip
    refs = [{"name": "Point", "subject": "point", "version": 1}]  # ("point" of .ctx6)
    lid = register(base, ":.ctx6:line", line, references=refs)["id"]
    assert call(base, "GET", "/subjects/:.ctx6:point/versions/1/referencedby") == [lid]
    # in the default context "point" is not there
    error = call(
        base, "POST", "/subjects/line/versions", {"schema": line, "references": refs}, status=422
    )
    assert error["error_code"] == 42201
    # a version another schema refers to is not deleted
    error = call(base, "DELETE", "/subjects/:.ctx6:point/versions/1", status=422)
    assert error["error_code"] == 42206


def test_a_contexts_config_and_mode(base):
    v1, v2 = record("Cm", "a"), record("Cm", "b")  # (v2 cannot read v1: BACKWARD refuses)
    register(base, ":.ctx2:cm", v1)
    register(base, ":.ctx3:cm", v1)
    register(base, "cm", v1)
    try:
        assert call(base, "PUT", "/config/:.ctx2:", {"compatibility": "NONE"}) == {
            "compatibility": "NONE"
        }
        assert call(base, "GET", "/config/:.ctx2:") == {"compatibilityLevel": "NONE"}
        assert call(base, "GET", "/config/:.ctx2:cm", defaultToGlobal="true") == {
            "compatibilityLevel": "NONE"
        }
        assert register(base, ":.ctx2:cm", v2)["version"] == 2  # the context's NONE
        assert call(base, "POST", "/subjects/cm/versions", {"schema": v2}, status=409)
        # the global config is the default context's: another context falls back to
        # :.__GLOBAL:'s, then the default (Confluent 8.1)
        call(base, "PUT", "/config", {"compatibility": "NONE"})
        assert call(base, "POST", "/subjects/:.ctx3:cm/versions", {"schema": v2}, status=409)
        call(base, "PUT", "/config/:.__GLOBAL:", {"compatibility": "NONE"})
        assert register(base, ":.ctx3:cm", v2)["version"] == 2
        # ":.:" is the global setting; a context without its own is 40408, but :.__GLOBAL:
        assert call(base, "GET", "/config/:.:") == call(base, "GET", "/config")
        assert call(base, "GET", "/config/:.ctx3:", status=404)["error_code"] == 40408
        assert call(base, "GET", "/config/:.__GLOBAL:") == {"compatibilityLevel": "NONE"}
        # a context's mode
        assert call(base, "PUT", "/mode/:.ctx2:", {"mode": "READONLY"}) == {"mode": "READONLY"}
        assert call(base, "GET", "/mode/:.ctx2:cm", defaultToGlobal="true") == {"mode": "READONLY"}
        error = call(
            base, "POST", "/subjects/:.ctx2:cm/versions", {"schema": record("R")}, status=422
        )
        assert error["error_code"] == 42205
        assert register(base, "cm-other", record("R"))["version"] == 1
        assert call(base, "DELETE", "/mode/:.ctx2:") == {"mode": "READONLY"}
        assert register(base, ":.ctx2:cm", record("Cm"))["version"] == 3
    finally:
        call(base, "DELETE", "/config")
        call(base, "DELETE", "/config/:.__GLOBAL:")
    assert call(base, "GET", "/config/:.__GLOBAL:") == {"compatibilityLevel": "BACKWARD"}
    assert call(base, "GET", "/mode/:.__GLOBAL:") == {"mode": "READWRITE"}


def test_delete_context(base):
    register(base, ":.ctx4:gone", record("Gone", "a"))
    assert ".ctx4" in call(base, "GET", "/contexts")
    not_empty = {"error_code": 42211, "message": "The specified context ':.ctx4:' is not empty."}
    for form in (".ctx4", ":.ctx4:", "ctx4"):
        assert call(base, "DELETE", f"/contexts/{form}", status=422) == not_empty
    call(base, "DELETE", "/subjects/:.ctx4:gone")
    assert call(base, "DELETE", "/contexts/.ctx4", status=422) == not_empty  # (soft-deleted)
    call(base, "DELETE", "/subjects/:.ctx4:gone", permanent="true")
    assert ".ctx4" in call(base, "GET", "/contexts")  # (kept until deleted, as Confluent's)
    r = requests_delete(base, "/contexts/.ctx4")
    assert (r.status_code, r.content) == (204, b"")
    assert ".ctx4" not in call(base, "GET", "/contexts")
    error = call(base, "DELETE", "/contexts/a:b", status=400)
    assert error == {"error_code": 400, "message": "Context name 'a:b' cannot contain a colon"}
    # recorded again by its next registration, its ids from 1 again (its space went with
    # its record: so on every broker, and after a restart, alike)
    assert register(base, ":.ctx4:again", record("Again", "a"))["id"] == 1
    assert ".ctx4" in call(base, "GET", "/contexts")


def requests_delete(base: str, path: str) -> requests.Response:
    return requests.delete(base + path, timeout=30)


def test_confluent_kafka_client_and_serializers(broker, base, ctx1):
    client = SchemaRegistryClient({"url": base})
    assert ".ctx1" in client.get_contexts()
    # id 1 of .ctxc is this schema, id 1 of the default context another
    schema = json.dumps({"type": "record", "name": "Ping", "namespace": "ctxc",
                         "fields": [{"name": "n", "type": "long"}]})  # fmt: skip
    subject = ":.ctxc:pings-value"
    assert client.register_schema(subject, Schema(schema, "AVRO")) == 1
    assert subject in client.get_subjects()
    assert client.get_latest_version(subject).schema_id == 1
    assert SchemaRegistryClient({"url": base}).get_schema(1).schema_str != schema
    # a serializer writing to the context (its subject strategy names it); a deserializer
    # that knows nothing of contexts reads the id where "pings-value" holds it
    serializer = AvroSerializer(
        client,
        schema,
        conf={"auto.register.schemas": False, "use.latest.version": True,
              "subject.name.strategy": lambda ctx, name: f":.ctxc:{ctx.topic}-value"},
    )  # fmt: skip
    ctx = SerializationContext("pings", MessageField.VALUE)
    payload = serializer({"n": 7}, ctx)
    assert payload[:5] == b"\x00\x00\x00\x00\x01"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("pings", value=payload)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition("pings", 0, 0)])
    try:
        m = consumer.poll(30)
        assert m is not None and m.error() is None
    finally:
        consumer.close()
    reader = AvroDeserializer(SchemaRegistryClient({"url": base}))
    assert reader(m.value(), ctx) == {"n": 7}


def schemas_records(broker) -> list[tuple[bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition("_schemas", 0), timeout=30)[1]
        consumer.assign([TopicPartition("_schemas", 0, 0)])
        found: list[tuple[bytes, bytes | None]] = []
        while len(found) < end:
            m = consumer.poll(5)
            assert m is not None and m.error() is None
            found.append((m.key(), m.value()))
        return found
    finally:
        consumer.close()


def test_records_are_confluents_and_a_restart_keeps_them(broker, base, ctx1):
    """(Last: the broker's registry port changes with the restart.)"""
    pairs = schemas_records(broker)
    keys = [k for k, _ in pairs]
    context = b'{"keytype":"CONTEXT","tenant":"default","context":".ctx1","magic":0}'
    schema = b'{"keytype":"SCHEMA","subject":":.ctx1:ct-a","version":1,"magic":1}'
    assert keys.index(context) < keys.index(schema)  # written first, as Confluent's
    assert dict(pairs)[context] == b'{"tenant":"default","context":".ctx1"}'
    value = json.loads(dict(pairs)[schema])
    assert (value["subject"], value["id"]) == (":.ctx1:ct-a", 1)
    before = (
        call(base, "GET", "/subjects", deleted="true"),
        call(base, "GET", "/contexts"),
        call(base, "GET", "/schemas", subjectPrefix=":*:", deleted="true"),
    )
    broker.stop()
    broker.start()
    base = registryhttp.url(broker)
    after = (
        call(base, "GET", "/subjects", deleted="true"),
        call(base, "GET", "/contexts"),
        call(base, "GET", "/schemas", subjectPrefix=":*:", deleted="true"),
    )
    assert after == before
    # new ids go on above each context's highest
    highest = max(s["id"] for s in before[2] if s["subject"].startswith(":.ctx1:"))
    assert register(base, ":.ctx1:ct-new", record("New", "n"))["id"] == highest + 1
