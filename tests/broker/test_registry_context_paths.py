"""The ``/contexts/{context}/...`` path prefix (Confluent's ``ContextFilter``): its rewriting
rules, then against a real broker every kind of route through it (register, read, list,
lookup, compatibility, config, mode, delete) answering as the route with the qualified
subject does, Confluent's refusals, ``referenceFormat=qualified``, and confluent-kafka's
client and serializers pointed at a context's URL. (Authorization through the prefix:
test_registry_auth.py; a write through it forwarded to the leader: test_registry_cluster.py.)
"""

from __future__ import annotations

import json
import socket

import pytest
import registryhttp
import requests
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from registryhttp import call
from yarl import URL

from headrace.broker.registry.context_paths import unprefixed

# Confluent's ContextFilterTest cases (its trailing slashes aside), then more
REWRITES = [
    ("/contexts/", "/contexts"),
    ("/contexts/.foo/", "/contexts/:.foo:"),
    ("/contexts/.c/subjects/s/versions", "/subjects/:.c:s/versions"),
    ("/contexts/:.:/subjects/s/versions", "/subjects/s/versions"),
    ("/contexts/:.:/subjects", "/subjects?subjectPrefix="),
    ("/contexts/c/subjects/s/versions", "/subjects/:.c:s/versions"),
    ("/contexts/.c/subjects/s/", "/subjects/:.c:s"),
    ("/contexts/.c/schemas/ids/1/", "/schemas/ids/1?subject=:.c:"),
    ("/contexts/:.:/schemas/?subjectPrefix=:*:", "/schemas?subjectPrefix=:*:"),
    ("/contexts/.c/subjects/:.c:s/versions", "/subjects/:.c:s/versions"),
    ("/contexts/.c/subjects/%3A.c%3As/versions", "/subjects/:.c:s/versions"),
    ("/contexts/.c/subjects/slash%2Fin%2Fmiddle/", "/subjects/:.c:slash%2Fin%2Fmiddle"),
    ("/contexts/.c/config/s", "/config/:.c:s"),
    ("/contexts/.c/config", "/config/:.c:"),
    ("/chc/live", "/chc/live"),
    ("/contexts/.c/mode/s", "/mode/:.c:s"),
    ("/contexts/.c/mode", "/mode/:.c:"),
    ("/contexts/:.:/mode", "/mode"),
    ("/other/config/test", "/other/config/test"),
    ("/contexts/.c/subjects/subjects/versions", "/subjects/:.c:subjects/versions"),
    ("/contexts/.c/subjects/contexts/versions", "/subjects/:.c:contexts/versions"),
    ("/contexts/.c/subjects?subjectPrefix=a&deleted=true", "/subjects?subjectPrefix=:.c:a&deleted=true"),
    ("/contexts/.c/schemas?subjectPrefix=:.d:", "/schemas?subjectPrefix=:.d:"),
    ("/contexts/.c/schemas/ids/3/versions?subject=s", "/schemas/ids/3/versions?subject=:.c:s"),
    ("/contexts/.c/schemas/ids/3?subject=:.d:s", "/schemas/ids/3?subject=:.d:s"),
    ("/contexts/.c/compatibility/subjects/s/versions/1", "/compatibility/subjects/:.c:s/versions/1"),
    ("/contexts/.c/schemas/guids/g", "/schemas/guids/g"),
    ("/contexts/my%20c/subjects/a%20b/versions", "/subjects/:.my%20c:a%20b/versions"),
    ("/contexts/.c", "/contexts/:.c:"),
    ("/contexts/.", "/"),
    ("/contexts/.a/contexts/.b/subjects/s", "/subjects/:.b:s"),
    ("/contexts/a:b/schemas/types", "/schemas/types"),  # (the context unused: not refused)
]  # fmt: skip


@pytest.mark.parametrize("path, route", REWRITES)
def test_paths_are_rewritten_as_confluents(path, route):
    assert str(unprefixed(URL(path))) == route


def record(name: str, *fields: str) -> str:
    """An Avro record as the registry keeps it (compact, Avro's key order)."""
    doc = {"type": "record", "name": name, "fields": [{"name": f, "type": "int"} for f in fields]}
    return json.dumps(doc, separators=(",", ":"))


broker, base = registryhttp.fixtures("registry-context-paths")


def alike(base: str, path: str, plain: str, body=None, **params):
    """``path`` under ``/contexts/.pc`` answers as ``plain``; that answer."""
    method = "GET" if body is None else "POST"
    got = call(base, method, f"/contexts/.pc{path}", body, **params)
    assert got == call(base, method, plain, body, **params)
    return got


def test_a_contexts_subjects_and_ids_through_the_prefix(base):
    a, b = record("A", "x"), record("B", "y")
    assert call(base, "POST", "/subjects/orders/versions", {"schema": a})["id"] == 1
    made = call(base, "POST", "/contexts/.pc/subjects/orders/versions", {"schema": b})
    assert (made["id"], made["version"]) == (1, 1)  # .pc's own id 1
    got = call(base, "GET", "/subjects/:.pc:orders/versions/1")
    assert (got["subject"], got["id"], got["schema"]) == (":.pc:orders", 1, b)
    # lists: the context's (the default context's through ":.:")
    assert alike(base, "/subjects", "/subjects", subjectPrefix=":.pc:") == [":.pc:orders"]
    for form in ("pc", ":.pc:", ":.pc"):
        assert call(base, "GET", f"/contexts/{form}/subjects") == [":.pc:orders"]
    assert call(base, "GET", "/contexts/:.:/subjects") == ["orders"]
    in_pc = alike(base, "/schemas", "/schemas", subjectPrefix=":.pc:")
    assert [(s["subject"], s["id"]) for s in in_pc] == [(":.pc:orders", 1)]
    # a subject's routes
    assert alike(base, "/subjects/orders/versions", "/subjects/:.pc:orders/versions") == [1]
    latest = "/subjects/orders/versions/latest"
    assert alike(base, latest, "/subjects/:.pc:orders/versions/latest")["schema"] == b
    schema_path = "/subjects/orders/versions/1/schema"
    assert alike(base, schema_path, "/subjects/:.pc:orders/versions/1/schema") == json.loads(b)
    found = alike(base, "/subjects/orders", "/subjects/:.pc:orders", {"schema": b})
    assert (found["subject"], found["version"]) == (":.pc:orders", 1)
    test = {"schema": record("B", "y", "z")}  # (a field without a default: not BACKWARD)
    compatible = alike(
        base,
        "/compatibility/subjects/orders/versions/latest",
        "/compatibility/subjects/:.pc:orders/versions/latest",
        test,
    )
    assert compatible == {"is_compatible": False}
    # ids: read in the context (the default context's id 1 is another schema)
    assert alike(base, "/schemas/ids/1", "/schemas/ids/1", subject=":.pc:")["schema"] == b
    assert call(base, "GET", "/schemas/ids/1")["schema"] == a
    assert alike(base, "/schemas/ids/1/subjects", "/schemas/ids/1/subjects", subject=":.pc:") == [
        ":.pc:orders"
    ]
    assert call(base, "GET", "/contexts/.pc/schemas/ids/1/versions") == [
        {"subject": ":.pc:orders", "version": 1}
    ]
    assert call(base, "GET", "/contexts/.pc/schemas/ids/1", subject="orders")["schema"] == b
    # a subject naming its own context keeps it
    assert call(base, "GET", "/contexts/.pc/subjects/:.:orders/versions/1")["schema"] == a
    error = call(base, "GET", "/contexts/.pc/subjects/:.other:x/versions", status=404)
    assert error == {"error_code": 40401, "message": "Subject ':.other:x' not found."}


def test_a_contexts_config_and_mode_through_the_prefix(base):
    v1, v2 = record("Cm", "a"), record("Cm", "b")  # (v2 cannot read v1: BACKWARD refuses)
    register = "/contexts/.pm/subjects/cm/versions"
    assert call(base, "POST", register, {"schema": v1})["version"] == 1
    error = call(base, "GET", "/contexts/.pm/config", status=404)
    assert error == call(base, "GET", "/config/:.pm:", status=404)  # (40408: none of its own)
    assert error["error_code"] == 40408
    assert call(base, "GET", "/contexts/:.:/config") == call(base, "GET", "/config")
    try:
        put = call(base, "PUT", "/contexts/.pm/config", {"compatibility": "NONE"})
        assert put == {"compatibility": "NONE"}
        assert call(base, "GET", "/config/:.pm:") == {"compatibilityLevel": "NONE"}
        assert call(base, "GET", "/config") == {"compatibilityLevel": "BACKWARD"}  # untouched
        assert call(base, "POST", register, {"schema": v2})["version"] == 2
        call(base, "PUT", "/contexts/.pm/config/cm", {"compatibility": "FULL"})
        assert call(base, "GET", "/config/:.pm:cm") == {"compatibilityLevel": "FULL"}
        assert call(base, "GET", "/contexts/.pm/config/cm") == {"compatibilityLevel": "FULL"}
        assert call(base, "DELETE", "/contexts/.pm/config/cm") == {"compatibilityLevel": "FULL"}
        # the context's mode
        assert call(base, "PUT", "/contexts/.pm/mode", {"mode": "READONLY"}) == {"mode": "READONLY"}
        assert call(base, "GET", "/mode/:.pm:") == {"mode": "READONLY"}
        assert call(base, "GET", "/mode") == {"mode": "READWRITE"}  # untouched
        assert call(base, "GET", "/contexts/:.:/mode") == {"mode": "READWRITE"}
        refused = call(base, "POST", register, {"schema": record("Cm")}, status=422)
        assert refused["error_code"] == 42205
        assert call(base, "DELETE", "/contexts/.pm/mode") == {"mode": "READONLY"}
    finally:
        call(base, "DELETE", "/contexts/.pm/config")
    assert call(base, "GET", "/config/:.pm:", status=404)["error_code"] == 40408
    assert call(base, "GET", "/mode/:.pm:", status=404)["error_code"] == 40409


def test_deletes_through_the_prefix(base):
    call(base, "POST", "/contexts/.pd/subjects/gone/versions", {"schema": record("Gone", "a")})
    assert ".pd" in call(base, "GET", "/contexts")
    not_empty = {"error_code": 42211, "message": "The specified context ':.pd:' is not empty."}
    assert call(base, "DELETE", "/contexts/pd", status=422) == not_empty
    assert call(base, "DELETE", "/contexts/.pd/subjects/gone/versions/1") == 1
    assert call(base, "GET", "/subjects/:.pd:gone/versions", deleted="true") == [1]
    assert call(base, "DELETE", "/contexts/.pd/subjects/gone", permanent="true") == [1]
    assert call(base, "GET", "/subjects", deleted="true", subjectPrefix=":.pd:") == []
    r = requests.delete(f"{base}/contexts/.pd", timeout=30)
    assert (r.status_code, r.content) == (204, b"")
    assert ".pd" not in call(base, "GET", "/contexts")


def test_bad_context_paths_are_refused_as_confluents(base):
    colon = {"error_code": 400, "message": "Context name 'a:b' cannot contain a colon"}
    assert call(base, "GET", "/contexts/a:b/subjects", status=400) == colon
    assert call(base, "POST", "/contexts/a:b/subjects/s/versions", {}, status=400) == colon
    assert call(base, "GET", "/contexts/.pc/nothing", status=404) == {
        "error_code": 404,
        "message": "HTTP 404 Not Found",
    }
    # the context alone is DELETE's only; the default context's is the root's
    assert call(base, "GET", "/contexts/.pc", status=405)["error_code"] == 405
    assert call(base, "DELETE", "/contexts/.", status=405)["error_code"] == 405
    assert call(base, "GET", "/contexts/:.:") == {}
    # a route that takes no subject: the context unused, so not refused either
    assert call(base, "GET", "/contexts/a:b/schemas/types") == call(base, "GET", "/schemas/types")


def test_a_100_continue_is_answered_once(base):
    """A client that waits for ``100 Continue`` before its body gets one, then the answer."""
    body = json.dumps({"schema": record("Wait", "w")}).encode()
    head = (
        "POST /contexts/.pc/subjects/wait/versions HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: {registryhttp.CT}\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((URL(base).host, URL(base).port), timeout=30) as s:
        s.sendall(head.encode())
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["version"] == 1


def test_references_qualified_on_request(base):
    """``referenceFormat=qualified``: a named context's version or id answers its references'
    subjects in the context they are read in; the default context's stay as registered."""
    point = record("Point", "x", "y")
    line = json.dumps({"type": "record", "name": "Line",
                       "fields": [{"name": "a", "type": "Point"}]})  # fmt: skip
    refs = [{"name": "Point", "subject": "point", "version": 1}]
    for prefix in ("/contexts/.rf", ""):
        call(base, "POST", f"{prefix}/subjects/point/versions", {"schema": point})
        made = call(
            base, "POST", f"{prefix}/subjects/line/versions", {"schema": line, "references": refs}
        )
    default_id = made["id"]
    qualified = [{**refs[0], "subject": ":.rf:point"}]
    version = "/subjects/:.rf:line/versions/1"
    assert call(base, "GET", version)["references"] == refs
    assert call(base, "GET", version, referenceFormat="qualified")["references"] == qualified
    assert call(base, "GET", version, referenceFormat="other")["references"] == refs
    got = call(base, "GET", "/contexts/.rf/subjects/line/versions/1", referenceFormat="qualified")
    assert got["references"] == qualified
    line_id = got["id"]
    assert call(base, "GET", f"/schemas/ids/{line_id}", subject=":.rf:")["references"] == refs
    by_id = call(base, "GET", f"/contexts/.rf/schemas/ids/{line_id}", referenceFormat="qualified")
    assert by_id["references"] == qualified
    # the default context's
    assert (
        call(base, "GET", "/subjects/line/versions/1", referenceFormat="qualified")["references"]
        == refs
    )
    by_id = call(base, "GET", f"/schemas/ids/{default_id}", referenceFormat="qualified")
    assert by_id["references"] == refs


def test_confluent_kafka_client_at_a_contexts_url(base):
    """confluent-kafka's client with ``url`` ``.../contexts/.app`` (as Confluent documents):
    a serializer registers ``pings-value`` in ``.app`` with the context's own id, and a
    deserializer at that URL reads it back, where the default context's id is another."""
    ping = json.dumps({"type": "record", "name": "Ping",
                       "fields": [{"name": "n", "type": "long"}]})  # fmt: skip
    at_app, plain = f"{base}/contexts/.app", SchemaRegistryClient({"url": base})
    pong = record("Pong", "n")
    default_id = plain.register_schema("pongs-value", Schema(pong, "AVRO"))
    serialize = AvroSerializer(SchemaRegistryClient({"url": at_app}), ping)
    ctx = SerializationContext("pings", MessageField.VALUE)
    payload = serialize({"n": 7}, ctx)
    schema_id = int.from_bytes(payload[1:5], "big")
    assert plain.get_latest_version(":.app:pings-value").schema_id == schema_id == 1
    assert ":.app:pings-value" in plain.get_subjects()
    assert SchemaRegistryClient({"url": at_app}).get_subjects() == [":.app:pings-value"]
    assert default_id >= schema_id  # (so the default context has an id 1: another schema)
    assert json.loads(plain.get_schema(schema_id).schema_str)["name"] != "Ping"
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": at_app}))
    assert deserialize(payload, ctx) == {"n": 7}
