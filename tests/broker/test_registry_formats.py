"""``format=`` on the registry's reads (and on a lookup and a registration), against a real
broker: what Confluent's ``formattedString`` answers per schema type (AVRO ``resolved``,
PROTOBUF ``serialized``; JSON and unknown values the text as kept, never an error), through
HTTP and through confluent-kafka's ``SchemaRegistryClient``.
"""

from __future__ import annotations

import base64
import json

import pytest
import registryhttp
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from fastavro.schema import parse_schema
from google.protobuf import descriptor_pb2
from registryhttp import call


def compact(document) -> str:
    return json.dumps(document, separators=(",", ":"))


POINT = {
    "type": "record",
    "name": "Point",
    "namespace": "geo",
    "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}],
}
LINE = {
    "type": "record",
    "name": "Line",
    "namespace": "shapes",
    "fields": [{"name": "a", "type": "geo.Point"}, {"name": "b", "type": "geo.Point"}],
}
POLYGON = {
    "type": "record",
    "name": "Polygon",
    "namespace": "shapes",
    "fields": [{"name": "sides", "type": {"type": "array", "items": "Line"}}],
}
# as Avro's Schema.toString() writes them alone: a referenced type written out where first
# used (its namespace given when it is not the enclosing one), then by name
POINT_TEXT = compact(POINT)
LINE_RESOLVED = (
    '{"type":"record","name":"Line","namespace":"shapes","fields":['
    f'{{"name":"a","type":{POINT_TEXT}}},{{"name":"b","type":"geo.Point"}}]}}'
)
POLYGON_RESOLVED = (
    '{"type":"record","name":"Polygon","namespace":"shapes","fields":[{"name":"sides","type":'
    '{"type":"array","items":{"type":"record","name":"Line","fields":['
    f'{{"name":"a","type":{POINT_TEXT}}},{{"name":"b","type":"geo.Point"}}]}}}}}}]}}'
)


def text(base: str, path: str, **params) -> str:
    """A bare-text route's answer, as sent."""
    r = requests.get(base + path, params=params, timeout=30)
    assert r.status_code == 200, (r.status_code, r.text)
    return r.text


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    b = registryhttp.start(tmp_path_factory.mktemp("registry-formats"))
    yield registryhttp.url(b)
    b.kill()


@pytest.fixture(scope="module")
def avro_ids(base):
    """(Point's id, Line's id, Polygon's id): Line refers to Point, Polygon to Line only."""
    point = call(base, "POST", "/subjects/fm-point/versions", {"schema": json.dumps(POINT)})
    line_refs = [{"name": "geo.Point", "subject": "fm-point", "version": 1}]
    line = call(
        base,
        "POST",
        "/subjects/fm-line/versions",
        {"schema": json.dumps(LINE), "references": line_refs},
    )
    polygon_refs = [{"name": "shapes.Line", "subject": "fm-line", "version": 1}]
    polygon = call(
        base,
        "POST",
        "/subjects/fm-polygon/versions",
        {"schema": json.dumps(POLYGON), "references": polygon_refs},
    )
    return point["id"], line["id"], polygon["id"]


def test_avro_resolved_inlines_the_referenced_types(base, avro_ids):
    _, line_id, polygon_id = avro_ids
    kept = call(base, "GET", f"/schemas/ids/{line_id}")
    assert kept["schema"] == compact(LINE)  # by name, as kept
    resolved = call(base, "GET", f"/schemas/ids/{line_id}", format="resolved")
    # the same answer but for the text: the GUID and the references stay the kept schema's
    assert resolved == {**kept, "schema": LINE_RESOLVED}
    assert resolved["references"] == [{"name": "geo.Point", "subject": "fm-point", "version": 1}]
    # transitively: Polygon names only Line, whose own reference is followed too
    polygon = call(base, "GET", f"/schemas/ids/{polygon_id}", format="resolved")["schema"]
    assert polygon == POLYGON_RESOLVED
    # the resolved text stands alone: it parses without references, and registers as is
    parse_schema(json.loads(polygon), _write_hint=False)
    alone = call(base, "POST", "/subjects/fm-alone/versions", {"schema": LINE_RESOLVED})
    assert alone["schema"] == LINE_RESOLVED and alone["id"] not in avro_ids


@pytest.mark.parametrize("fmt", ["default", "DEFAULT", "", "serialized", "nope", " resolved"])
def test_avro_other_values_answer_the_kept_text(base, avro_ids, fmt):
    _, line_id, _ = avro_ids
    assert call(base, "GET", f"/schemas/ids/{line_id}", format=fmt)["schema"] == compact(LINE)


def test_resolved_on_every_route_that_takes_format(base, avro_ids):
    _, line_id, _ = avro_ids
    guid = call(base, "GET", f"/schemas/ids/{line_id}")["guid"]
    q = {"format": "Resolved"}  # (any case)
    assert call(base, "GET", f"/schemas/guids/{guid}", **q)["schema"] == LINE_RESOLVED
    assert call(base, "GET", "/subjects/fm-line/versions/1", **q)["schema"] == LINE_RESOLVED
    assert call(base, "GET", "/subjects/fm-line/versions/latest", **q)["guid"] == guid
    assert call(base, "GET", "/subjects/fm-line/metadata", **q)["schema"] == LINE_RESOLVED
    # the bare-text routes answer the text itself
    for path in (f"/schemas/ids/{line_id}/schema", "/subjects/fm-line/versions/1/schema"):
        assert text(base, path, **q) == LINE_RESOLVED
        assert text(base, path) == compact(LINE)
    # a lookup and a registration (of the schema already there) answer it formatted too
    refs = [{"name": "geo.Point", "subject": "fm-point", "version": 1}]
    body = {"schema": json.dumps(LINE), "references": refs}
    found = call(base, "POST", "/subjects/fm-line", body, **q)
    assert (found["id"], found["version"], found["schema"]) == (line_id, 1, LINE_RESOLVED)
    again = call(base, "POST", "/subjects/fm-line/versions", body, **q)
    assert again == {
        "id": line_id,
        "version": 1,
        "guid": guid,
        "references": refs,
        "schema": LINE_RESOLVED,
    }


def test_json_schema_answers_the_kept_text_whatever_the_format(base):
    kept = compact(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}},
        }
    )
    registered = call(
        base, "POST", "/subjects/fm-json/versions", {"schema": kept, "schemaType": "JSON"}
    )
    for fmt in ("resolved", "serialized", "default", "nope"):
        got = call(base, "GET", f"/schemas/ids/{registered['id']}", format=fmt)
        assert got == {"guid": registered["guid"], "schemaType": "JSON", "schema": kept}


def test_protobuf_formats(base):
    proto = 'syntax = "proto3";\npackage fm;\n\nmessage M {\n  string a = 1;\n}\n'
    registered = call(
        base, "POST", "/subjects/fm-proto/versions", {"schema": proto, "schemaType": "PROTOBUF"}
    )
    sid, kept = registered["id"], registered["schema"]
    serialized = call(base, "GET", f"/schemas/ids/{sid}", format="SERIALIZED")["schema"]
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert (fd.package, [m.name for m in fd.message_type]) == ("fm", ["M"])
    assert text(base, "/subjects/fm-proto/versions/1/schema", format="serialized") == serialized
    for fmt in ("default", "ignore_extensions", "resolved", "nope"):
        assert call(base, "GET", f"/schemas/ids/{sid}", format=fmt)["schema"] == kept


def test_confluent_kafka_client_asks_for_a_format(base, avro_ids):
    _, line_id, _ = avro_ids
    client = SchemaRegistryClient({"url": base})
    assert client.get_schema(line_id, fmt="resolved").schema_str == LINE_RESOLVED
    assert client.get_version("fm-line", 1, fmt="resolved").schema.schema_str == LINE_RESOLVED
    latest = SchemaRegistryClient({"url": base}).get_latest_version("fm-line", fmt="resolved")
    assert (latest.schema_id, latest.schema.schema_str) == (line_id, LINE_RESOLVED)
    guid = latest.guid
    by_guid = SchemaRegistryClient({"url": base}).get_schema_by_guid(guid, fmt="resolved")
    assert by_guid.schema_str == LINE_RESOLVED
    refs = [SchemaReference("geo.Point", "fm-point", 1)]
    found = SchemaRegistryClient({"url": base}).lookup_schema(
        "fm-line", Schema(json.dumps(LINE), "AVRO", refs), fmt="resolved"
    )
    assert (found.schema_id, found.version) == (line_id, 1)
    # (the client hands back the schema it looked up, so the id and version are what count)
    fresh = SchemaRegistryClient({"url": base})
    assert fresh.get_schema(line_id).schema_str == compact(LINE)
