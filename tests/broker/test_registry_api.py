"""The schema registry's REST API, checked against Confluent's Schema Registry API reference
with a plain HTTP client (requests): every endpoint, its status codes and error bodies.

One broker for the module (its registry on a free port); each test uses subjects of its own.
"""

from __future__ import annotations

import base64
import json

import pytest
import requests
from google.protobuf import descriptor_pb2

from headrace.broker.tools.process import BrokerProcess

CT = "application/vnd.schemaregistry.v1+json"
HEADERS = {"Content-Type": CT, "Accept": CT}


def avro(*fields: tuple[str, object], name: str = "R", defaults: dict | None = None) -> str:
    out = []
    for field_name, field_type in fields:
        f: dict = {"name": field_name, "type": field_type}
        if defaults and field_name in defaults:
            f["default"] = defaults[field_name]
        out.append(f)
    return json.dumps({"type": "record", "name": name, "fields": out})


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("registry"),
        {"schema.registry.listeners": "http://127.0.0.1:0"},
    ).start()
    yield f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"
    broker.kill()


class Api:
    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body=None, **params):
        data = None if body is None else json.dumps(body)
        r = requests.request(
            method, self.base + path, data=data, headers=HEADERS, params=params, timeout=30
        )
        assert r.headers["Content-Type"].startswith(CT), r.headers
        return r

    def ok(self, method: str, path: str, body=None, **params):
        r = self.call(method, path, body, **params)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def error(self, status: int, code: int, method: str, path: str, body=None, **params) -> str:
        r = self.call(method, path, body, **params)
        assert r.status_code == status, (r.status_code, r.text)
        document = r.json()
        assert set(document) == {"error_code", "message"}, document
        assert document["error_code"] == code, document
        return document["message"]

    def register(self, subject: str, schema: str, **extra) -> int:
        return self.ok("POST", f"/subjects/{subject}/versions", {"schema": schema, **extra})["id"]


@pytest.fixture
def api(url) -> Api:
    return Api(url)


def test_root_and_schema_types(api):
    assert api.ok("GET", "/") == {}
    assert sorted(api.ok("GET", "/schemas/types")) == ["AVRO", "JSON", "PROTOBUF"]


def test_register_and_read_back_every_way(api):
    s1 = avro(("a", "int"))
    sid = api.register("rb-value", s1)
    assert api.register("rb-value", s1) == sid  # the same schema again: the same id
    assert api.ok("GET", "/subjects/rb-value/versions") == [1]
    v1 = api.ok("GET", "/subjects/rb-value/versions/1")
    guid = v1["guid"]
    assert v1 == {
        "subject": "rb-value",
        "version": 1,
        "id": sid,
        "guid": guid,
        "schema": v1["schema"],
    }
    assert json.loads(v1["schema"]) == json.loads(s1)
    assert api.ok("GET", "/subjects/rb-value/versions/latest") == v1
    assert api.ok("GET", "/subjects/rb-value/versions/-1") == v1
    assert json.loads(api.call("GET", "/subjects/rb-value/versions/1/schema").text) == json.loads(
        s1
    )
    by_id = {"guid": guid, "schema": v1["schema"]}
    assert api.ok("GET", f"/schemas/ids/{sid}") == by_id
    assert api.ok("GET", f"/schemas/ids/{sid}", subject="rb-value") == by_id
    # a subject of the default context that does not hold the id: the default context's id
    # still answers (Confluent's getSchemaKeyUsingContexts); one of another context does not
    assert api.ok("GET", f"/schemas/ids/{sid}", subject="rb-nope") == by_id
    api.error(404, 40403, "GET", f"/schemas/ids/{sid}", subject=":.rb-nowhere:rb-value")
    assert json.loads(api.call("GET", f"/schemas/ids/{sid}/schema").text) == json.loads(s1)
    assert api.ok("GET", f"/schemas/ids/{sid}/subjects") == ["rb-value"]
    assert api.ok("GET", f"/schemas/ids/{sid}/versions") == [{"subject": "rb-value", "version": 1}]
    assert "rb-value" in api.ok("GET", "/subjects")
    assert api.ok("GET", "/subjects", subjectPrefix="rb-") == ["rb-value"]
    # lookup (POST /subjects/{s}): the version that holds the schema
    found = api.ok("POST", "/subjects/rb-value", {"schema": s1})
    assert found == v1
    # the same schema under another subject: Confluent's ids are global
    assert api.register("rb-other", s1) == sid
    assert sorted(api.ok("GET", f"/schemas/ids/{sid}/subjects")) == ["rb-other", "rb-value"]
    # an evolution (a field with a default: BACKWARD) is version 2 with a new id
    s2 = avro(("a", "int"), ("b", "string"), defaults={"b": "x"})
    sid2 = api.register("rb-value", s2)
    assert sid2 > sid
    assert api.ok("GET", "/subjects/rb-value/versions") == [1, 2]
    assert api.ok("GET", "/subjects/rb-value/versions/latest")["version"] == 2


def test_not_found_errors(api):
    api.register("nf-value", avro(("a", "int")))
    message = api.error(404, 40401, "GET", "/subjects/nf-missing/versions")
    assert message == "Subject 'nf-missing' not found."
    api.error(404, 40401, "GET", "/subjects/nf-missing/versions/1")
    assert api.error(404, 40402, "GET", "/subjects/nf-value/versions/7") == "Version 7 not found."
    assert api.error(404, 40403, "GET", "/schemas/ids/999999") == "Schema 999999 not found"
    api.error(404, 40403, "GET", "/schemas/ids/999999/schema")
    api.error(404, 40403, "GET", "/schemas/ids/999999/subjects")
    api.error(404, 40403, "GET", "/schemas/ids/999999/versions")
    api.error(404, 40403, "POST", "/subjects/nf-value", {"schema": avro(("z", "long"))})
    api.error(404, 40401, "POST", "/subjects/nf-missing", {"schema": avro(("z", "long"))})
    assert api.error(404, 404, "GET", "/no/such/path") == "HTTP 404 Not Found"
    assert api.error(405, 405, "PATCH", "/subjects") == "HTTP 405 Method Not Allowed"


@pytest.mark.parametrize("version", ["0", "-2", "abc", "2147483648"])
def test_invalid_versions_are_42202(api, version):
    api.register("iv-value", avro(("a", "int")))
    message = api.error(422, 42202, "GET", f"/subjects/iv-value/versions/{version}")
    assert message.startswith(f"The specified version '{version}' is not a valid version id.")


def test_invalid_schemas_are_42201(api):
    api.error(422, 42201, "POST", "/subjects/is-value/versions", {"schema": "{not json"})
    api.error(422, 42201, "POST", "/subjects/is-value/versions", {"schema": '{"type": "nope"}'})
    bad_record = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a"}]})
    api.error(422, 42201, "POST", "/subjects/is-value/versions", {"schema": bad_record})
    api.error(
        422, 42201, "POST", "/subjects/is-value/versions",
        {"schema": '{"type": 5}', "schemaType": "JSON"},
    )  # fmt: skip
    api.error(
        422, 42201, "POST", "/subjects/is-value/versions",
        {"schema": "message {", "schemaType": "PROTOBUF"},
    )  # fmt: skip
    api.error(
        422, 42201, "POST", "/subjects/is-value/versions", {"schema": "{}", "schemaType": "XML"}
    )
    api.error(422, 42201, "POST", "/subjects/is-value/versions", {"no": "schema"})
    # a body that is not JSON at all
    r = requests.post(
        api.base + "/subjects/is-value/versions", data="{", headers=HEADERS, timeout=10
    )
    assert r.status_code == 400 and r.json()["error_code"] == 400


def test_incompatible_change_is_409_and_compatibility_endpoint(api):
    api.register("ic-value", avro(("a", "int")))
    changed = avro(("a", "string"))
    message = api.error(409, 409, "POST", "/subjects/ic-value/versions", {"schema": changed})
    assert 'incompatible with an earlier schema for subject "ic-value"' in message
    path = "/compatibility/subjects/ic-value/versions/latest"
    assert api.ok("POST", path, {"schema": changed}) == {"is_compatible": False}
    verbose = api.ok("POST", path, {"schema": changed}, verbose="true")
    assert verbose["is_compatible"] is False and verbose["messages"]
    fine = avro(("a", "long"))  # int promotes to long: BACKWARD
    assert api.ok("POST", path, {"schema": fine}) == {"is_compatible": True}
    assert api.ok("POST", "/compatibility/subjects/ic-value/versions/1", {"schema": fine}) == {
        "is_compatible": True
    }
    assert api.ok("POST", "/compatibility/subjects/ic-value/versions", {"schema": fine}) == {
        "is_compatible": True
    }
    # a version that is not there (nor its subject) is 40402; "latest" of nothing: compatible
    api.error(404, 40402, "POST", "/compatibility/subjects/ic-nope/versions/1", {"schema": fine})
    api.error(404, 40402, "POST", "/compatibility/subjects/ic-value/versions/9", {"schema": fine})
    api.error(422, 42202, "POST", "/compatibility/subjects/ic-value/versions/x", {"schema": fine})
    nothing = "/compatibility/subjects/ic-nope/versions/latest"
    assert api.ok("POST", nothing, {"schema": fine}) == {"is_compatible": True}
    # an invalid schema: 42201, or with verbose a reason
    api.error(422, 42201, "POST", path, {"schema": "{bad"})
    bad = api.ok("POST", path, {"schema": "{bad"}, verbose="true")
    assert bad["is_compatible"] is False and bad["messages"]


def test_config_levels(api):
    assert api.ok("GET", "/config") == {"compatibilityLevel": "BACKWARD"}
    api.error(404, 40408, "GET", "/config/cf-value")
    assert api.ok("GET", "/config/cf-value", defaultToGlobal="true") == {
        "compatibilityLevel": "BACKWARD"
    }
    for level in ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                  "FULL_TRANSITIVE", "NONE"):  # fmt: skip
        assert api.ok("PUT", "/config/cf-value", {"compatibility": level}) == {
            "compatibility": level
        }
        assert api.ok("GET", "/config/cf-value") == {"compatibilityLevel": level}
    assert api.ok("PUT", "/config/cf-value", {"compatibilityLevel": "none"}) == {
        "compatibility": "NONE"
    }
    message = api.error(422, 42203, "PUT", "/config/cf-value", {"compatibility": "SIDEWAYS"})
    assert message.startswith("Invalid compatibility level")
    # NONE lets anything follow
    api.register("cf-value", avro(("a", "int")))
    api.register("cf-value", avro(("a", "string")))
    assert api.ok("DELETE", "/config/cf-value") == {"compatibilityLevel": "NONE"}
    api.error(404, 40408, "GET", "/config/cf-value")
    api.error(404, 40401, "DELETE", "/config/cf-never-registered")
    # FORWARD: the old schema must read the new one's data
    api.ok("PUT", "/config/cf-fwd", {"compatibility": "FORWARD"})
    api.register("cf-fwd", avro(("a", "int"), ("b", "int"), defaults={"b": 0}))
    api.register("cf-fwd", avro(("a", "int")))  # removing a field with a default: fine
    api.error(409, 409, "POST", "/subjects/cf-fwd/versions", {"schema": avro(("b", "int"))})
    # the global level
    assert api.ok("PUT", "/config", {"compatibility": "FULL"}) == {"compatibility": "FULL"}
    assert api.ok("GET", "/config") == {"compatibilityLevel": "FULL"}
    assert api.ok("DELETE", "/config") == {"compatibilityLevel": "FULL"}
    assert api.ok("GET", "/config") == {"compatibilityLevel": "BACKWARD"}


def test_transitive_levels_check_every_version(api):
    api.ok("PUT", "/config/tr-value", {"compatibility": "BACKWARD_TRANSITIVE"})
    api.register("tr-value", avro(("a", "int")))
    api.register("tr-value", avro(("a", "int"), ("b", "int"), defaults={"b": 1}))
    # readable from version 2's data, but not from version 1's (no default for b)
    third = avro(("a", "int"), ("b", "int"))
    api.error(409, 409, "POST", "/subjects/tr-value/versions", {"schema": third})
    api.ok("PUT", "/config/tr-value", {"compatibility": "BACKWARD"})  # the latest only
    assert api.register("tr-value", third)


def test_modes(api):
    assert api.ok("GET", "/mode") == {"mode": "READWRITE"}
    api.error(404, 40409, "GET", "/mode/md-value")
    assert api.ok("GET", "/mode/md-value", defaultToGlobal="true") == {"mode": "READWRITE"}
    assert api.ok("PUT", "/mode/md-value", {"mode": "READONLY"}) == {"mode": "READONLY"}
    assert api.ok("GET", "/mode/md-value") == {"mode": "READONLY"}
    message = api.error(
        422, 42205, "POST", "/subjects/md-value/versions", {"schema": avro(("a", "int"))}
    )
    assert message == "Subject md-value is in read-only mode"
    api.error(422, 42204, "PUT", "/mode/md-value", {"mode": "SLEEPING"})
    assert api.ok("DELETE", "/mode/md-value") == {"mode": "READONLY"}
    api.error(404, 40409, "DELETE", "/mode/md-value")
    api.register("md-value", avro(("a", "int")))
    # IMPORT over a subject that has schemas needs force=true
    api.error(422, 42205, "PUT", "/mode/md-value", {"mode": "IMPORT"})
    # IMPORT mode: schemas registered with the ids (and versions) given, unchecked
    assert api.ok("PUT", "/mode/md-import", {"mode": "IMPORT"}) == {"mode": "IMPORT"}
    body = {"schema": avro(("x", "int"), name="Imported"), "id": 90001, "version": 5}
    imported = api.ok("POST", "/subjects/md-import/versions", body)
    assert (imported["id"], imported["version"]) == (90001, 5)
    assert api.ok("GET", "/subjects/md-import/versions") == [5]
    assert api.ok("GET", "/schemas/ids/90001")["schema"]
    other = {"schema": avro(("y", "int"), name="Imported2"), "id": 90001}
    api.error(422, 42207, "POST", "/subjects/md-import/versions", other)
    message = api.error(
        422, 42205, "POST", "/subjects/md-import/versions", {"schema": avro(("v", "int"))}
    )
    assert message == "Subject md-import is not in read-write mode"
    api.ok("DELETE", "/mode/md-import")
    # an id given outside IMPORT mode
    api.error(
        422, 42205, "POST", "/subjects/md-import/versions",
        {"schema": avro(("z", "int"), name="Other"), "id": 90002},
    )  # fmt: skip
    # ids allocated afterwards stay above the imported one
    assert api.register("md-after", avro(("w", "int"), name="After")) > 90001


def test_soft_and_hard_deletes_of_versions(api):
    s1 = avro(("a", "int"), name="Dv")  # (a schema of its own: ids are shared)
    s2 = avro(("a", "int"), ("b", "int"), name="Dv", defaults={"b": 0})
    id1 = api.register("dv-value", s1)
    api.register("dv-value", s2)
    # a hard delete before a soft one
    message = api.error(404, 40407, "DELETE", "/subjects/dv-value/versions/1", permanent="true")
    assert message == (
        "Subject 'dv-value' Version 1 was not deleted first before being permanently deleted"
    )
    assert api.ok("DELETE", "/subjects/dv-value/versions/1") == 1
    api.error(404, 40406, "DELETE", "/subjects/dv-value/versions/1")
    assert api.ok("GET", "/subjects/dv-value/versions") == [2]
    assert api.ok("GET", "/subjects/dv-value/versions", deleted="true") == [1, 2]
    api.error(404, 40402, "GET", "/subjects/dv-value/versions/1")
    assert api.ok("GET", "/subjects/dv-value/versions/1", deleted="true")["id"] == id1
    assert api.ok("GET", f"/schemas/ids/{id1}")  # a soft-deleted schema still reads by id
    assert api.ok("GET", f"/schemas/ids/{id1}/versions") == []
    assert api.ok("GET", f"/schemas/ids/{id1}/versions", deleted="true") == [
        {"subject": "dv-value", "version": 1}
    ]
    api.error(404, 40403, "POST", "/subjects/dv-value", {"schema": s1})
    assert api.ok("POST", "/subjects/dv-value", {"schema": s1}, deleted="true")["version"] == 1
    assert api.ok("DELETE", "/subjects/dv-value/versions/1", permanent="true") == 1
    api.error(404, 40402, "GET", "/subjects/dv-value/versions/1", deleted="true")
    api.error(404, 40403, "GET", f"/schemas/ids/{id1}")  # no version holds it any more
    api.error(404, 40402, "DELETE", "/subjects/dv-value/versions/1")
    api.error(404, 40401, "DELETE", "/subjects/dv-nope/versions/1")
    api.error(422, 42202, "DELETE", "/subjects/dv-value/versions/zero")
    assert api.ok("DELETE", "/subjects/dv-value/versions/latest") == 2


def test_soft_and_hard_deletes_of_subjects(api):
    api.register("ds-value", avro(("a", "int")))
    api.register("ds-value", avro(("a", "int"), ("b", "int"), defaults={"b": 0}))
    message = api.error(404, 40405, "DELETE", "/subjects/ds-value", permanent="true")
    assert message == "Subject 'ds-value' was not deleted first before being permanently deleted"
    assert api.ok("DELETE", "/subjects/ds-value") == [1, 2]
    message = api.error(404, 40404, "DELETE", "/subjects/ds-value")
    assert message == "Subject 'ds-value' was soft deleted.Set permanent=true to delete permanently"
    assert "ds-value" not in api.ok("GET", "/subjects")
    assert "ds-value" in api.ok("GET", "/subjects", deleted="true")
    api.error(404, 40401, "GET", "/subjects/ds-value/versions")
    assert api.ok("DELETE", "/subjects/ds-value", permanent="true") == [1, 2]
    assert "ds-value" not in api.ok("GET", "/subjects", deleted="true")
    api.error(404, 40401, "DELETE", "/subjects/ds-value")
    # registering again after a soft delete: versions go on from the highest
    api.register("ds-again", avro(("a", "int")))
    api.ok("DELETE", "/subjects/ds-again")
    api.register("ds-again", avro(("a", "int")))
    assert api.ok("GET", "/subjects/ds-again/versions") == [2]


def test_references_and_referencedby(api):
    address = json.dumps(
        {"type": "record", "name": "Address", "namespace": "ex",
         "fields": [{"name": "street", "type": "string"}]}
    )  # fmt: skip
    aid = api.register("rf-address", address)
    person = json.dumps(
        {"type": "record", "name": "Person", "namespace": "ex",
         "fields": [{"name": "home", "type": "ex.Address"}]}
    )  # fmt: skip
    refs = [{"name": "ex.Address", "subject": "rf-address", "version": 1}]
    pid = api.register("rf-person", person, references=refs)
    got = api.ok("GET", f"/schemas/ids/{pid}")
    assert got["references"] == refs
    assert api.ok("GET", "/subjects/rf-address/versions/1/referencedby") == [pid]
    assert api.ok("GET", "/subjects/rf-person/versions/1/referencedby") == []
    assert aid != pid
    # a referenced version cannot be deleted
    api.error(422, 42206, "DELETE", "/subjects/rf-address/versions/1")
    api.error(422, 42206, "DELETE", "/subjects/rf-address")
    # a reference to nothing
    bad = [{"name": "ex.Address", "subject": "rf-nothing", "version": 1}]
    api.error(
        422, 42201, "POST", "/subjects/rf-bad/versions", {"schema": person, "references": bad}
    )


def test_json_and_protobuf_schemas(api):
    js = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    jid = api.register("ty-json", js, schemaType="JSON")
    got = api.ok("GET", f"/schemas/ids/{jid}")
    assert got["schemaType"] == "JSON" and json.loads(got["schema"]) == json.loads(js)
    narrowed = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})
    api.error(
        409, 409, "POST", "/subjects/ty-json/versions", {"schema": narrowed, "schemaType": "JSON"}
    )
    proto = 'syntax = "proto3";\npackage ex;\n\nmessage M {\n  string a = 1;\n}\n'
    pid = api.register("ty-proto", proto, schemaType="PROTOBUF")
    assert api.ok("GET", "/subjects/ty-proto/versions/1")["schemaType"] == "PROTOBUF"
    # format=serialized: a base64 FileDescriptorProto (what Python's deserializer asks for)
    serialized = api.ok("GET", f"/schemas/ids/{pid}", format="serialized")["schema"]
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert (fd.package, [m.name for m in fd.message_type]) == ("ex", ["M"])
    # registered as that descriptor, it is the same schema: the same id, no new version
    assert api.register("ty-proto", serialized, schemaType="PROTOBUF") == pid
    assert api.ok("GET", "/subjects/ty-proto/versions") == [1]
    changed = proto.replace("string a = 1", "int32 a = 1")
    api.error(
        409,
        409,
        "POST",
        "/subjects/ty-proto/versions",
        {"schema": changed, "schemaType": "PROTOBUF"},
    )
    added = proto.replace("string a = 1;", "string a = 1;\n  int64 b = 2;")
    assert api.register("ty-proto", added, schemaType="PROTOBUF") not in (pid, jid)
    # a schema of another type under the same subject is incompatible
    api.error(409, 409, "POST", "/subjects/ty-proto/versions", {"schema": avro(("a", "int"))})


def test_content_types(api):
    body = json.dumps({"schema": avro(("a", "int"), name="Ct")})
    for content_type in (CT, "application/vnd.schemaregistry+json", "application/json",
                         "application/octet-stream"):  # fmt: skip
        r = requests.post(
            api.base + "/subjects/ct-value/versions",
            data=body,
            headers={"Content-Type": content_type},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith(CT)


def test_avro_forms_of_one_schema_share_an_id_and_read_back_canonical(api):
    """As Confluent's registry: an Avro schema is kept as Avro's Schema.toString() gives it,
    so another form of it (key order, white space, a full name for name and namespace,
    {"type": "string"} for "string") registers as the same id and version, finds it in a
    lookup, and reads back as that one text."""
    canonical = (
        '{"type":"record","name":"Order","namespace":"shop","fields":'
        '[{"name":"id","type":"long"},{"name":"item","type":"string","default":""}]}'
    )
    first = json.dumps(
        {
            "namespace": "shop",
            "name": "Order",
            "type": "record",
            "fields": [
                {"type": "long", "name": "id"},
                {"default": "", "type": {"type": "string"}, "name": "item"},
            ],
        },
        indent=2,
    )
    other = json.dumps(json.loads(canonical.replace('"Order","namespace":"shop"', '"shop.Order"')))
    assert other != canonical and first != canonical
    sid = api.register("cn-value", first)
    assert api.ok("GET", "/subjects/cn-value/versions/1")["schema"] == canonical
    assert api.call("GET", f"/schemas/ids/{sid}/schema").text == canonical
    assert api.register("cn-value", other) == sid
    assert api.register("cn-value", canonical) == sid
    assert api.ok("GET", "/subjects/cn-value/versions") == [1]
    found = api.ok("POST", "/subjects/cn-value", {"schema": other})
    assert (found["version"], found["id"], found["schema"]) == (1, sid, canonical)
    assert api.register("cn-other-value", other) == sid  # ids are global
    # a doc is part of the schema: another id, version 2
    documented = canonical.replace('"namespace":"shop",', '"namespace":"shop","doc":"an order",')
    assert api.register("cn-value", documented) != sid
    assert api.ok("GET", "/subjects/cn-value/versions") == [1, 2]
    api.error(404, 40403, "POST", "/subjects/cn-other-value", {"schema": documented})


def test_json_schemas_differ_by_key_order_unless_normalized(api):
    """As Confluent's registry: a JSON schema is kept as compact JSON in its own key order,
    so white space does not make another schema and key order does, unless normalize=true."""
    a = '{ "type": "object",\n  "properties": {"n": {"type": "string"}} }'
    kept = '{"type":"object","properties":{"n":{"type":"string"}}}'
    b = '{"properties":{"n":{"type":"string"}},"type":"object"}'
    jid = api.register("cj-value", a, schemaType="JSON")
    assert api.ok("GET", f"/schemas/ids/{jid}")["schema"] == kept
    assert api.register("cj-value", kept, schemaType="JSON") == jid
    api.error(404, 40403, "POST", "/subjects/cj-value", {"schema": b, "schemaType": "JSON"})
    bid = api.register("cj-value", b, schemaType="JSON")
    assert bid != jid
    assert api.ok("GET", "/subjects/cj-value/versions") == [1, 2]
    # normalize=true: keys sorted, both orders one schema
    body = {"schema": a, "schemaType": "JSON"}
    nid = api.ok("POST", "/subjects/cj-norm-value/versions", body, normalize="true")["id"]
    body = {"schema": b, "schemaType": "JSON"}
    assert api.ok("POST", "/subjects/cj-norm-value/versions", body, normalize="true")["id"] == nid
    assert api.ok("GET", "/subjects/cj-norm-value/versions") == [1]
    assert api.ok("GET", f"/schemas/ids/{nid}")["schema"] == b  # (b is a's keys sorted)
