"""The schema registry's rules without a broker: Avro's schema resolution, Confluent's JSON
Schema and Protobuf rules, the compatibility levels, the records of ``_schemas`` and the state
they leave (the same after compaction)."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2

from headrace.broker.registry import contracts, records
from headrace.broker.registry.errors import RegistryError
from headrace.broker.registry.records import (
    ConfigRecord,
    ModeRecord,
    SchemaRecord,
    SchemaRemoved,
    SubjectDeleted,
)
from headrace.broker.registry.schema_types import incompatibilities, parse
from headrace.broker.registry.state import RegistryState


def avro(document) -> object:
    return parse("AVRO", json.dumps(document), [], False)


def rec(*fields, name="R", **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def ok(level, new, *olds) -> bool:
    return not incompatibilities(level, new, list(olds))


# Avro ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "reader", "readable"),
    [
        ("int", "long", True),
        ("int", "double", True),
        ("long", "int", False),
        ("float", "double", True),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("string", "int", False),
        ("int", ["null", "int"], True),
        (["null", "int"], "int", False),
        (["int", "long"], ["long"], True),
    ],
)
def test_avro_promotions_and_unions(writer, reader, readable):
    assert ok("BACKWARD", avro(reader), avro(writer)) is readable


def test_avro_records_fields_defaults_and_aliases():
    v1 = avro(rec({"name": "a", "type": "int"}))
    with_default = avro(
        rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0})
    )
    without = avro(rec({"name": "a", "type": "int"}, {"name": "b", "type": "int"}))
    assert ok("BACKWARD", with_default, v1)
    assert not ok("BACKWARD", without, v1)
    assert ok("FORWARD", without, v1)  # v1 skips b
    assert ok("FULL", with_default, v1)
    aliased = avro(rec({"name": "z", "type": "int", "aliases": ["a"]}))
    assert ok("BACKWARD", aliased, v1)
    renamed = avro(rec({"name": "a", "type": "int"}, name="Other"))
    assert not ok("BACKWARD", renamed, v1)


def test_avro_enums_fixed_arrays_maps_and_recursion():
    e1 = avro({"type": "enum", "name": "E", "symbols": ["A", "B"]})
    e2 = avro({"type": "enum", "name": "E", "symbols": ["A"]})
    e3 = avro({"type": "enum", "name": "E", "symbols": ["A"], "default": "A"})
    assert not ok("BACKWARD", e2, e1) and ok("BACKWARD", e3, e1) and ok("BACKWARD", e1, e2)
    f4, f8 = (avro({"type": "fixed", "name": "F", "size": n}) for n in (4, 8))
    assert not ok("BACKWARD", f8, f4)
    arr = avro({"type": "array", "items": "int"})
    assert ok("BACKWARD", avro({"type": "array", "items": "long"}), arr)
    assert not ok("BACKWARD", avro({"type": "map", "values": "int"}), arr)
    node = rec({"name": "next", "type": ["null", "Node"], "default": None}, name="Node")
    assert ok("FULL", avro(node), avro(node))


def test_transitive_levels_and_none():
    v1 = avro(rec({"name": "a", "type": "int"}))
    v2 = avro(rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}))
    v3 = avro(rec({"name": "a", "type": "int"}, {"name": "b", "type": "int"}))
    assert ok("BACKWARD", v3, v1, v2)
    assert not ok("BACKWARD_TRANSITIVE", v3, v1, v2)
    assert ok("NONE", avro("string"), v1)
    assert not ok("BACKWARD", parse("JSON", "{}", [], False), v1)  # another type


def test_avro_named_types_from_references():
    address = json.dumps(rec({"name": "street", "type": "string"}, name="Address", namespace="ex"))
    person = json.dumps(rec({"name": "home", "type": "ex.Address"}, name="Person", namespace="ex"))
    # kept as Confluent keeps it: the referenced type by name, short in its own namespace
    assert parse("AVRO", person, [address], False).text == (
        '{"type":"record","name":"Person","namespace":"ex",'
        '"fields":[{"name":"home","type":"Address"}]}'
    )
    with pytest.raises(ValueError):
        parse("AVRO", person, [], False)


# Avro's canonical text ---------------------------------------------------------------------

# (schema, referenced schemas (theirs first), then the texts Confluent's registry keeps for it:
# AvroSchema.canonicalString() (Avro 1.11.3's Schema.toString()) and, with normalize=true,
# AvroSchema.normalize().canonicalString(); taken from a run of Confluent's client 7.5.3 over
# these documents)
AVRO_CANONICAL = [
    (
        {'namespace': 'shop', 'type': 'record', 'name': 'Order', 'fields': [{'type': 'long', 'name': 'id'}, {'name': 'item', 'type': {'type': 'string'}}, {'name': 'tags', 'type': {'items': 'string', 'type': 'array'}, 'default': []}, {'name': 'next', 'type': ['null', 'Order'], 'default': None}, {'name': 'kind', 'type': {'type': 'enum', 'name': 'Kind', 'symbols': ['A', 'B'], 'default': 'A', 'doc': 'k'}}, {'name': 'k2', 'type': 'Kind'}, {'name': 'other', 'type': {'type': 'fixed', 'name': 'x.F', 'size': 4, 'aliases': ['G', 'y.H']}}, {'name': 'd', 'type': {'type': 'bytes', 'logicalType': 'decimal', 'precision': 4, 'scale': 2}}, {'name': 'o', 'type': 'int', 'order': 'descending', 'aliases': ['oo'], 'foo': 1, 'doc': 'dd'}], 'doc': 'an order', 'connect.name': 'x', 'aliases': ['Old']},
        [],
        '{"type":"record","name":"Order","namespace":"shop","doc":"an order","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"tags","type":{"type":"array","items":"string"},"default":[]},{"name":"next","type":["null","Order"],"default":null},{"name":"kind","type":{"type":"enum","name":"Kind","doc":"k","symbols":["A","B"],"default":"A"}},{"name":"k2","type":"Kind"},{"name":"other","type":{"type":"fixed","name":"F","namespace":"x","size":4,"aliases":["G","y.H"]}},{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}},{"name":"o","type":"int","doc":"dd","order":"descending","aliases":["oo"],"foo":1}],"connect.name":"x","aliases":["Old"]}',
        '{"type":"record","name":"Order","namespace":"shop","doc":"an order","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"tags","type":{"type":"array","items":"string"},"default":[]},{"name":"next","type":["null","Order"],"default":null},{"name":"kind","type":{"type":"enum","name":"Kind","doc":"k","symbols":["A","B"],"default":"A"}},{"name":"k2","type":"Kind"},{"name":"other","type":{"type":"fixed","name":"F","namespace":"x","size":4,"aliases":["G","y.H"]}},{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}},{"name":"o","type":"int","doc":"dd","order":"descending","aliases":["oo"],"foo":1}],"connect.name":"x","aliases":["Old"]}',
    ),
    (
        {'type': 'record', 'name': 'shop.Order', 'fields': [{'name': 'id', 'type': 'long'}, {'name': 'n', 'type': {'type': 'record', 'name': 'Inner', 'namespace': '', 'fields': [{'name': 'a', 'type': {'type': 'map', 'values': 'long', 'x': 'y'}}]}}]},
        [],
        '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"n","type":{"type":"record","name":"Inner","namespace":"","fields":[{"name":"a","type":{"type":"map","values":"long","x":"y"}}]}}]}',
        '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"n","type":{"type":"record","name":"Inner","fields":[{"name":"a","type":{"type":"map","values":"long","x":"y"}}]}}]}',
    ),
    (
        'string',
        [],
        '"string"',
        '"string"',
    ),
    (
        {'type': 'string', 'avro.java.string': 'String'},
        [],
        '{"type":"string","avro.java.string":"String"}',
        '{"type":"string","avro.java.string":"String"}',
    ),
    (
        {'type': 'record', 'name': 'Order', 'namespace': 'shop', 'fields': [{'name': 'item', 'type': 'Item'}, {'name': 'i2', 'type': 'shop.Item'}, {'name': 'w', 'type': 'other.W'}]},
        [{'type': 'record', 'name': 'W', 'namespace': 'other', 'fields': []}, {'type': 'record', 'name': 'Item', 'namespace': 'shop', 'fields': [{'name': 'sku', 'type': 'string'}, {'name': 'w', 'type': 'other.W'}]}],
        '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"item","type":"Item"},{"name":"i2","type":"Item"},{"name":"w","type":"other.W"}]}',
        '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"item","type":"Item"},{"name":"i2","type":"Item"},{"name":"w","type":"other.W"}]}',
    ),
    (
        {'type': 'record', 'name': 'R', 'fields': [{'name': 'u', 'type': ['null', {'type': 'enum', 'name': 'E', 'namespace': 'n', 'symbols': ['X']}]}]},
        [],
        '{"type":"record","name":"R","fields":[{"name":"u","type":["null",{"type":"enum","name":"E","namespace":"n","symbols":["X"]}]}]}',
        '{"type":"record","name":"R","fields":[{"name":"u","type":["null",{"type":"enum","name":"E","namespace":"n","symbols":["X"]}]}]}',
    ),
    (
        {'type': 'record', 'name': 'P', 'namespace': 'a', 'zeta': 1, 'alpha': {'y': 1, 'x': 2}, 'aliases': ['b.Z', 'Y'], 'fields': [{'name': 'f', 'type': {'type': 'int', 'z': 1, 'a': 2}, 'zz': 1, 'aa': 2, 'aliases': ['q', 'p'], 'default': 3}, {'name': 'g', 'type': {'type': 'array', 'items': 'long', 'b': 1, 'a': 0}}, {'name': 'h', 'type': ['null', {'type': 'fixed', 'name': 'F', 'size': 2, 'y': 1, 'x': 2}], 'default': None}]},
        [],
        '{"type":"record","name":"P","namespace":"a","fields":[{"name":"f","type":{"type":"int","z":1,"a":2},"default":3,"aliases":["q","p"],"zz":1,"aa":2},{"name":"g","type":{"type":"array","items":"long","b":1,"a":0}},{"name":"h","type":["null",{"type":"fixed","name":"F","size":2,"y":1,"x":2}],"default":null}],"zeta":1,"alpha":{"y":1,"x":2},"aliases":["b.Z","Y"]}',
        '{"type":"record","name":"P","namespace":"a","fields":[{"name":"f","type":{"type":"int","a":2,"z":1},"default":3,"aliases":["p","q"],"aa":2,"zz":1},{"name":"g","type":{"type":"array","items":"long","a":0,"b":1}},{"name":"h","type":["null",{"type":"fixed","name":"F","size":2,"x":2,"y":1}],"default":null}],"alpha":{"x":2,"y":1},"zeta":1,"aliases":["Y","b.Z"]}',
    ),
    (
        {'type': 'record', 'name': 'D', 'namespace': 'a', 'fields': [{'name': 'x', 'type': 'double', 'default': 1}, {'name': 'y', 'type': {'type': 'map', 'values': 'int'}, 'default': {'b': 1, 'a': 2}}, {'name': 'z', 'type': {'type': 'record', 'name': 'N', 'namespace': '', 'fields': []}}]},
        [],
        '{"type":"record","name":"D","namespace":"a","fields":[{"name":"x","type":"double","default":1},{"name":"y","type":{"type":"map","values":"int"},"default":{"b":1,"a":2}},{"name":"z","type":{"type":"record","name":"N","namespace":"","fields":[]}}]}',
        '{"type":"record","name":"D","namespace":"a","fields":[{"name":"x","type":"double","default":1.0},{"name":"y","type":{"type":"map","values":"int"},"default":{"a":2,"b":1}},{"name":"z","type":{"type":"record","name":"N","fields":[]}}]}',
    ),
]


@pytest.mark.parametrize(("document", "references", "text", "normalized"), AVRO_CANONICAL)
def test_avro_is_kept_as_avros_own_text(document, references, text, normalized):
    refs = [json.dumps(r) for r in references]
    assert parse("AVRO", json.dumps(document), refs, False).text == text
    assert parse("AVRO", json.dumps(document), refs, True).text == normalized
    # the same schema written any other way: indented, Avro's own keys the other way round
    # (other attributes are properties, kept in the order they come, as Avro keeps them)
    reordered = json.dumps(_reversed_keys(document), indent=2)
    assert parse("AVRO", reordered, refs, False).text == text


AVRO_KEYS = {"type", "name", "namespace", "doc", "fields", "items", "values", "symbols", "size",
             "aliases", "default", "order"}  # fmt: skip


def _reversed_keys(document):
    if isinstance(document, dict):
        own = [k for k in reversed(list(document)) if k in AVRO_KEYS]
        props = [k for k in document if k not in AVRO_KEYS]
        return {k: _reversed_keys(document[k]) for k in own + props}
    if isinstance(document, list):
        return [_reversed_keys(v) for v in document]
    return document


def test_avro_forms_of_one_schema_have_one_text_and_others_differ():
    forms = [
        rec({"name": "a", "type": "string"}, name="shop.R"),
        rec({"name": "a", "type": {"type": "string"}}, name="R", namespace="shop"),
        {"fields": [{"type": "string", "name": "a"}], "namespace": "shop", "name": "R", "type": "record"},
    ]
    texts = {avro(f).text for f in forms}
    assert avro(forms[0]).text == parse("AVRO", json.dumps(forms[0], indent=4), [], False).text
    assert texts == {'{"type":"record","name":"R","namespace":"shop","fields":[{"name":"a","type":"string"}]}'}
    # a doc, a property, the order of fields or of properties are part of the schema
    for other in (
        rec({"name": "a", "type": "string"}, name="shop.R", doc="d"),
        rec({"name": "a", "type": "string", "x": 1}, name="shop.R"),
        rec({"name": "a", "type": "string"}, name="shop.R", x=1, y=2),
        rec({"name": "a", "type": "string"}, name="shop.R", y=2, x=1),
        rec({"name": "a", "type": "string"}, {"name": "b", "type": "int"}, name="shop.R"),
    ):
        assert avro(other).text not in texts
    xy, yx = (rec({"name": "a", "type": "string"}, name="shop.R", **p) for p in ({"x": 1, "y": 2}, {"y": 2, "x": 1}))
    assert avro(xy).text != avro(yx).text
    # normalize=true: properties sorted, so then their order does not count
    xy, yx = (parse("AVRO", json.dumps(d), [], True).text for d in (xy, yx))
    assert xy == yx == '{"type":"record","name":"R","namespace":"shop","fields":[{"name":"a","type":"string"}],"x":1,"y":2}'
    assert parse("AVRO", json.dumps(forms[0]), [], True).text in texts


def test_json_schemas_are_kept_compact_in_their_key_order():
    a = '{ "type": "object",\n  "properties": {"n": {"type": "string", "title": "é"}} }'
    b = '{"properties":{"n":{"title":"é","type":"string"}},"type":"object"}'
    kept = parse("JSON", a, [], False).text
    assert kept == '{"type":"object","properties":{"n":{"type":"string","title":"é"}}}'
    assert parse("JSON", b, [], False).text != kept  # another key order: another schema
    assert parse("JSON", a, [], True).text == parse("JSON", b, [], True).text == b


def test_a_text_kept_in_another_form_is_still_the_same_schema():
    """A version an older registry kept as registered (not canonical) still matches the
    schema's canonical form, for a registration's dedupe and a lookup."""
    from types import SimpleNamespace

    from headrace.broker.registry.schemas import Schemas
    from headrace.broker.registry.state import Stored

    state = RegistryState()
    old = '{"name": "R", "type": "record", "fields": [{"type": "long", "name": "id"}]}'
    state.apply(SchemaRecord("s", 1, 7, "AVRO", old, (), False))
    schemas = Schemas(SimpleNamespace(state=state), max_schema_bytes=1 << 20)
    parsed, stored = schemas.from_request({"schema": old}, False)
    assert stored.text == '{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}'
    assert schemas.same(7, stored)
    assert not schemas.same(7, Stored("JSON", stored.text, ()))
    other, _ = schemas.from_request({"schema": json.dumps(rec({"name": "id", "type": "int"}))}, False)
    assert not schemas.same(7, Stored("AVRO", other.text, ()))


# JSON Schema --------------------------------------------------------------------------------


def js(document) -> object:
    return parse("JSON", json.dumps(document), [], False)


def obj(props, **extra):
    return {"type": "object", "properties": props, **extra}


def test_json_schema_rules():
    base = js(obj({"a": {"type": "string"}}, required=["a"]))
    assert ok("BACKWARD", js(obj({"a": {"type": "string"}})), base)  # a required dropped
    assert not ok("BACKWARD", js(obj({"a": {"type": "integer"}}, required=["a"])), base)
    assert not ok("BACKWARD", js(obj({"a": {"type": "string"}, "b": {"type": "string"}})), base)
    closed = js(obj({"a": {"type": "string"}}, additionalProperties=False))
    added_to_closed = js(
        obj({"a": {"type": "string"}, "b": {"type": "string"}}, additionalProperties=False)
    )
    assert ok("BACKWARD", added_to_closed, closed)
    assert not ok("BACKWARD", js(obj({}, additionalProperties=False)), closed)
    newly_required = js(obj({"a": {"type": "string"}}, required=["a", "a2"]))
    assert not ok("BACKWARD", newly_required, base)
    assert ok("BACKWARD", js({"type": "number"}), js({"type": "integer"}))
    assert not ok("BACKWARD", js({"type": "integer"}), js({"type": "number"}))
    assert not ok("BACKWARD", js({"type": "string", "maxLength": 5}), js({"type": "string"}))
    assert ok("BACKWARD", js({"enum": ["a", "b", "c"]}), js({"enum": ["a", "b"]}))
    assert not ok("BACKWARD", js({"enum": ["a"]}), js({"enum": ["a", "b"]}))
    with pytest.raises(ValueError):
        parse("JSON", json.dumps({"type": 12}), [], False)
    with pytest.raises(ValueError):
        parse("JSON", "[1, 2]", [], False)


# Protobuf -----------------------------------------------------------------------------------

PROTO = """syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  map<string, int32> counts = 4;
  oneof pay { string card = 5; string cash = 6; }
  Status status = 7;
  message Line { int32 qty = 1; }
  Line line = 8;
  enum Status { NEW = 0; DONE = 1; }
}
"""


def proto(text: str):
    return parse("PROTOBUF", text, [], False)


def test_protobuf_text_and_descriptor_are_one_model():
    fd = descriptor_pb2.FileDescriptorProto(name="o.proto", package="shop", syntax="proto3")
    m = fd.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=3, label=1)
    m.field.add(name="item", number=2, type=9, label=1)
    encoded = base64.b64encode(fd.SerializeToString()).decode()
    text = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string item = 2; }'
    assert proto(encoded).model == proto(text).model


def test_protobuf_rules():
    base = proto(PROTO)
    assert ok("FULL", base, base)
    assert ok("BACKWARD", proto(PROTO.replace("  string item = 2;\n", "")), base)  # removed
    added = PROTO.replace("Line line = 8;", "Line line = 8;\n  bool rush = 9;")
    assert ok("FULL", proto(added), base)
    assert ok("BACKWARD", proto(PROTO.replace("int64 id = 1", "uint64 id = 1")), base)  # group
    assert ok("BACKWARD", proto(PROTO.replace("string item = 2", "bytes item = 2")), base)
    for change in (
        PROTO.replace("string item = 2", "int32 item = 2"),  # scalar kind
        PROTO.replace("Status status = 7", "Line status = 7"),  # named type
        PROTO.replace("string item = 2", "Line item = 2"),  # scalar to message
        PROTO.replace("package shop;", "package store;"),
        PROTO.replace("string item = 2", "string item = 12"),  # renumbered: a new field...
    ):
        found = incompatibilities("BACKWARD", proto(change), [base])
        if "item = 12" in change:
            assert not found  # ...and a removal: both compatible, as Confluent has it
        else:
            assert found, change
    removed_message = PROTO.replace("  message Line { int32 qty = 1; }\n", "").replace(
        "  Line line = 8;\n", ""
    )
    assert not ok("BACKWARD", proto(removed_message), base)  # MESSAGE_REMOVED
    out_of_oneof = PROTO.replace(
        "oneof pay { string card = 5; string cash = 6; }", "string card = 5;"
    )
    assert not ok("BACKWARD", proto(out_of_oneof), base)
    for bad in ("message {", "syntax = 'proto3'; message M { strin a = ; }", "hello"):
        with pytest.raises(ValueError):
            proto(bad)


# _schemas records and the state ----------------------------------------------------------


def test_records_are_confluents_layouts():
    key, value = records.encode(SchemaRecord("s", 2, 7, "PROTOBUF", "x", (("n", "o", 1),), False))
    assert json.loads(key) == {"keytype": "SCHEMA", "subject": "s", "version": 2, "magic": 1}
    assert json.loads(value) == {
        "subject": "s",
        "version": 2,
        "id": 7,
        "schemaType": "PROTOBUF",
        "references": [{"name": "n", "subject": "o", "version": 1}],
        "schema": "x",
        "deleted": False,
    }
    key, value = records.encode(SchemaRecord("s", 1, 3, "AVRO", '"int"', (), False))
    assert "schemaType" not in json.loads(value)
    key, value = records.encode(ConfigRecord(None, {"compatibilityLevel": "FULL"}))
    assert json.loads(key) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(value) == {"compatibilityLevel": "FULL"}
    metadata = '{"properties":{"owner":"ann"}}'
    rule = {"kind": "TRANSFORM", "mode": "WRITEREAD", "name": "r", "type": "CEL"}
    rules = contracts.kept({"domainRules": [rule]})
    with_contract = SchemaRecord("s", 1, 3, "AVRO", '"int"', (), False, metadata, rules)
    value = json.loads(records.encode(with_contract)[1])
    assert value["metadata"] == {"properties": {"owner": "ann"}}
    assert value["ruleSet"] == {"domainRules": [rule]}
    key, value = records.encode(ModeRecord("s", "READONLY"))
    assert (json.loads(key)["keytype"], json.loads(value)) == ("MODE", {"mode": "READONLY"})
    key, value = records.encode(SubjectDeleted("s", 4))
    assert json.loads(key) == {"keytype": "DELETE_SUBJECT", "subject": "s", "magic": 0}
    assert json.loads(value) == {"subject": "s", "version": 4}
    for change in (
        SchemaRecord("s", 1, 3, "AVRO", '"int"', (), True),
        SchemaRemoved("s", 1),
        with_contract,
        ConfigRecord("s", None),
        ConfigRecord("s", {"compatibilityLevel": "NONE", "defaultMetadata": json.loads(metadata)}),
        ModeRecord(None, "IMPORT"),
        SubjectDeleted("s", 2),
    ):
        assert records.decode(*records.encode(change)) == change
    assert records.decode(b'{"keytype":"NOOP","magic":0}', None) is None


def test_the_state_after_compaction_is_the_state_before():
    log = [
        SchemaRecord("a", 1, 1, "AVRO", '"int"', (), False),
        SchemaRecord("a", 2, 2, "AVRO", '"long"', (), False),
        SchemaRecord("b", 1, 1, "AVRO", '"int"', (), False),
        ConfigRecord("a", {"compatibilityLevel": "NONE"}),
        SubjectDeleted("a", 2),
        SchemaRemoved("a", 1),
        ConfigRecord("a", {"compatibilityLevel": "FULL"}),
        ModeRecord(None, "READONLY"),
        SchemaRecord("b", 2, 3, "AVRO", '"string"', (), False),
        SchemaRecord("b", 2, 3, "AVRO", '"string"', (), True),
    ]
    whole = RegistryState()
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, change in enumerate(log):
        whole.apply(change)
        key, value = records.encode(change)
        last[key] = (offset, value)
    compacted = RegistryState()
    for key, (_, value) in sorted(last.items(), key=lambda kv: kv[1][0]):
        change = records.decode(key, value)
        assert change is not None
        compacted.apply(change)
    for state in (whole, compacted):
        assert {
            s: {n: (v.id, v.deleted) for n, v in vs.items()} for s, vs in state.subjects.items()
        } == {
            "a": {2: (2, True)},
            "b": {1: (1, False), 2: (3, True)},
        }
        assert state.configs == {"a": {"compatibilityLevel": "FULL"}}
        assert state.modes == {None: "READONLY"}
        assert sorted(state.schemas) == [1, 2, 3] and state.max_id == 3


# data contracts ------------------------------------------------------------------------------


def test_metadata_and_rule_sets_take_confluents_form():
    assert contracts.metadata(
        {"tags": {"f": ["b", "a", "a"]}, "properties": {"z": "1", "a": "2"}, "sensitive": ["s"]}
    ) == {"tags": {"f": ["a", "b"]}, "properties": {"a": "2", "z": "1"}, "sensitive": ["s"]}
    assert contracts.metadata({"tags": {}, "properties": {}}) is None  # empty: none
    rules = contracts.rule_set({"domainRules": [{"name": "checkSsn", "type": "CEL"}]})
    assert rules == {
        "domainRules": [
            {"kind": "TRANSFORM", "mode": "WRITEREAD", "name": "checkSsn", "type": "CEL"}
        ]
    }
    assert contracts.rule_set({"migrationRules": [], "domainRules": None}) is None


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("metadata", [], 42201),
        ("metadata", {"properties": {"a": 1}}, 42201),
        ("metadata", {"tags": {"f": "PII"}}, 42201),
        ("metadata", {"sensitive": "ssn"}, 42201),
        ("ruleSet", {"domainRules": {"r": 1}}, 42210),
        ("ruleSet", {"domainRules": [{"type": "CEL"}]}, 42210),
        ("ruleSet", {"domainRules": [{"name": "1st", "type": "CEL"}]}, 42210),
        ("ruleSet", {"domainRules": [{"name": "a b", "type": "CEL"}]}, 42210),
        ("ruleSet", {"domainRules": [{"name": "r"}]}, 42210),
        ("ruleSet", {"domainRules": [{"name": "r", "type": "CEL", "mode": "UPGRADE"}]}, 42210),
        ("ruleSet", {"migrationRules": [{"name": "r", "type": "JSONATA", "mode": "WRITE"}]}, 42210),
        ("ruleSet", {"domainRules": [{"name": "r", "type": "CEL", "kind": "OTHER"}]}, 42210),
        (
            "ruleSet",
            {"domainRules": [{"name": "r", "type": "CEL"}, {"name": "r", "type": "CEL"}]},
            42210,
        ),
        (
            "ruleSet",
            {"domainRules": [{"name": "r", "type": "CEL", "mode": "WRITE", "onFailure": "A,B"}]},
            42210,
        ),
        ("ruleSet", {"domainRules": [{"name": "r", "type": "CEL", "params": {"k": 1}}]}, 42210),
    ],
)
def test_shapes_that_are_not_confluents_are_refused(field, value, code):
    check = contracts.metadata if field == "metadata" else contracts.rule_set
    with pytest.raises(RegistryError) as refused:
        check(value)
    assert (refused.value.status, refused.value.code) == (422, code)


def test_config_defaults_and_overrides_merge_as_confluents():
    config = {
        "defaultMetadata": {"properties": {"owner": "team", "tier": "2"}},
        "overrideMetadata": {"properties": {"tier": "1"}, "sensitive": ["ssn"]},
        "defaultRuleSet": {"domainRules": [{"name": "a", "type": "CEL"}]},
    }
    own = (contracts.kept({"properties": {"owner": "ann"}, "sensitive": ["dob"]}), None)
    metadata, rules = contracts.applied(config, own, (None, None))
    assert json.loads(metadata) == {
        "properties": {"owner": "ann", "tier": "1"},
        "sensitive": ["dob", "ssn"],
    }
    assert json.loads(rules) == {"domainRules": [{"name": "a", "type": "CEL"}]}
    # nothing brought: the latest version's, under the config's
    latest = (contracts.kept({"properties": {"app": "v1"}}), None)
    metadata, _ = contracts.applied({}, (None, None), latest)
    assert json.loads(metadata) == {"properties": {"app": "v1"}}
    # a rule of the same name replaces the older one
    newer = {"domainRules": [{"name": "a", "type": "JSONATA"}, {"name": "b", "type": "CEL"}]}
    _, rules = contracts.applied(
        {"overrideRuleSet": newer}, (None, contracts.kept(config["defaultRuleSet"])), (None, None)
    )
    assert json.loads(rules) == newer
    assert contracts.applied({}, (None, None), (None, None)) == (None, None)


def test_a_global_readonly_override_is_every_subjects_mode():
    state = RegistryState()
    state.apply(ModeRecord("s", "READWRITE"))
    state.apply(ModeRecord(None, "READONLY"))
    assert (state.mode("s"), state.mode("t")) == ("READWRITE", "READONLY")
    state.apply(ModeRecord(None, "READONLY_OVERRIDE"))
    assert (state.mode("s"), state.mode("t")) == ("READONLY_OVERRIDE", "READONLY_OVERRIDE")
    state.apply(ModeRecord("s", "READONLY_OVERRIDE"))
    state.apply(ModeRecord(None, None))
    assert (state.mode("s"), state.mode("t")) == ("READONLY_OVERRIDE", "READWRITE")


def test_metadata_and_rules_count_towards_the_bytes_held():
    state = RegistryState()
    state.apply(SchemaRecord("a", 1, 1, "AVRO", '"int"', (), False, '{"p":"x"}', '{"r":[]}'))
    assert state.text_bytes == len('"int"') + len('{"p":"x"}') + len('{"r":[]}')
    state.apply(SchemaRemoved("a", 1))
    assert state.text_bytes == 0


def test_protobuf_descriptor_and_text_convert_both_ways():
    """A descriptor printed as text parses back into one protobuf's pool builds, with the same
    messages, fields, maps, oneofs and enums."""
    from google.protobuf import descriptor_pool

    from headrace.broker.registry.protobuf_text import to_descriptor, to_text

    fd = to_descriptor(PROTO + "message Extra { optional string note = 1; }\n", "shop.proto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    order = pool.FindMessageTypeByName("shop.Order")
    assert [f.name for f in order.fields] == [
        "id",
        "item",
        "tags",
        "counts",
        "card",
        "cash",
        "status",
        "line",
    ]
    assert order.fields_by_name["counts"].message_type.GetOptions().map_entry
    assert order.fields_by_name["status"].enum_type.full_name == "shop.Order.Status"
    assert order.fields_by_name["line"].message_type.full_name == "shop.Order.Line"
    assert [f.name for f in order.oneofs_by_name["pay"].fields] == ["card", "cash"]
    note = pool.FindMessageTypeByName("shop.Extra").fields_by_name["note"]
    assert note.has_presence
    again = to_descriptor(to_text(fd), "shop.proto")
    assert again == fd
    assert (
        proto(to_text(fd)).model
        == proto(PROTO + "message Extra { optional string note = 1; }").model
    )


def test_protobuf_text_is_kept_canonical_with_its_file_options():
    plain = (
        'syntax = "proto3"; package p; option java_package = "com.p"; message M { int32 a = 1; }'
    )
    spaced = """// a comment
syntax = "proto3";
package p;

option java_package = "com.p";

message M {
  int32 a = 1;  // the same field
}
"""
    assert proto(plain).text == proto(spaced).text
    assert 'option java_package = "com.p";' in proto(plain).text


def test_each_worker_gets_a_registry_port_of_its_own():
    from headrace.broker.app.workers import _registry_listener

    assert _registry_listener("http://127.0.0.1:8081", 0) == "http://127.0.0.1:8081"
    assert _registry_listener("http://127.0.0.1:8081", 2) == "http://127.0.0.1:8083"
    assert _registry_listener("http://127.0.0.1:0", 2) == "http://127.0.0.1:0"
    assert _registry_listener("", 1) == ""
