"""Values in Confluent's wire format into columns (broker/iceberg/rows.py), without a broker:
Avro's types and logical types, nested records, arrays, maps, nullable unions; JSON Schema's
types; values that do not decode kept raw."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal

import pytest

pytest.importorskip("pyarrow")
fastavro = pytest.importorskip("fastavro")

from headrace.broker.iceberg.committed import Columns  # noqa: E402
from headrace.broker.iceberg.rows import SchemaValues, UnknownSchemas, schema_id_rows  # noqa: E402

RICH = {
    "type": "record",
    "name": "Rich",
    "namespace": "t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "ok", "type": "boolean"},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {
            "name": "inner",
            "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]},
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "either", "type": ["int", "string"]},
    ],
}


def wire(schema_id: int, schema: dict, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


def columns(values: list[bytes | None]) -> Columns:
    n = len(values)
    return Columns(0, 0, n, list(range(n)), [1000] * n, [0] * n, [None] * n, list(values), [[]] * n)


def test_avro_types_become_arrow_types():
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    record = {
        "id": 1,
        "name": None,
        "ok": True,
        "score": 1.5,
        "tags": ["a", "b"],
        "attrs": {"k": 1},
        "inner": {"x": 7},
        "color": "BLUE",
        "at": at,
        "day": dt.date(2026, 1, 2),
        "price": Decimal("12.34"),
        "either": 5,
    }
    texts = {3: ("AVRO", json.dumps(RICH), [])}
    table = schema_id_rows(columns([wire(3, RICH, record)]), texts, SchemaValues())
    row = table.to_pylist()[0]
    value = row["value"]
    assert row["schema_id"] == 3 and row["value_raw"] is None
    assert value["id"] == 1 and value["name"] is None and value["ok"] is True
    assert value["tags"] == ["a", "b"] and value["attrs"] == [("k", 1)]
    assert value["inner"] == {"x": 7} and value["color"] == "BLUE"
    assert value["at"] == at and value["day"] == dt.date(2026, 1, 2)
    assert value["price"] == Decimal("12.34")
    assert value["either"] == "5"  # (a union of several types: its JSON text)


def test_values_that_do_not_decode_stay_raw_and_unknown_ids_are_asked_for():
    schema = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}
    texts = {1: ("AVRO", json.dumps(schema), []), 2: None, 4: ("PROTOBUF", "syntax...", [])}
    good = wire(1, schema, {"x": 1})
    values = [good, b"plain", None, struct.pack(">bI", 0, 2) + b"?", b"\0\0\0\0\4xx", good[:5]]
    table = schema_id_rows(columns(values), texts, SchemaValues())
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    assert rows[0]["value"] == {"x": 1} and rows[0]["schema_id"] == 1
    for row, raw in zip(rows[1:], values[1:]):
        assert row["value"] is None and row["value_raw"] == raw
    with pytest.raises(UnknownSchemas) as e:
        schema_id_rows(columns([struct.pack(">bI", 0, 9) + b"x"]), texts, SchemaValues())
    assert e.value.ids == {9}


# --- PROTOBUF ---------------------------------------------------------------------------------

COMMON_PROTO = """syntax = "proto3";
package common;
enum Color { RED = 0; BLUE = 1; }
message Money { int64 units = 1; string currency = 2; }
"""
ORDER_PROTO = """syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";
message Order {
  int32 id = 1;
  sint32 delta = 2;
  int64 total = 3;
  uint32 small = 4;
  uint64 big = 5;
  float ratio = 6;
  double score = 7;
  bool ok = 8;
  string name = 9;
  bytes blob = 10;
  .common.Color color = 11;
  .common.Money price = 12;
  repeated string tags = 13;
  map<string, int32> attrs = 14;
  repeated Line lines = 15;
  .google.protobuf.Timestamp at = 16;
  optional string note = 17;
  .google.protobuf.StringValue label = 18;
  oneof pick { int32 number = 19; string word = 20; }
  Order parent = 21;
  .google.protobuf.Empty nothing = 22;
  message Line { string sku = 1; int32 count = 2; }
}
message Other { string x = 1; }
"""


def proto_classes():
    """The test's own message classes of ORDER_PROTO (protobuf's pool, not the broker's)."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        empty_pb2,
        message_factory,
        timestamp_pb2,
        wrappers_pb2,
    )

    from headrace.broker.registry.protobuf_text import to_descriptor

    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2, empty_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fd)
        pool.Add(fd)
    pool.Add(to_descriptor(COMMON_PROTO, "common.proto"))
    order = to_descriptor(ORDER_PROTO, "order.proto")
    for m in order.message_type:  # (imported types: the pool finds whether enum or message)
        for f in m.field:
            if f.type_name and not f.type_name.startswith(".shop."):
                f.ClearField("type")
    pool.Add(order)
    get = message_factory.GetMessageClass
    return get(pool.FindMessageTypeByName("shop.Order")), get(
        pool.FindMessageTypeByName("shop.Other")
    )


def proto_wire(schema_id: int, message, indexes: bytes = b"\0") -> bytes:
    return struct.pack(">bI", 0, schema_id) + indexes + message.SerializeToString()


def test_protobuf_types_become_arrow_types():
    order_cls, other_cls = proto_classes()
    full = order_cls(
        id=-1, delta=-2, total=2**40, small=2**32 - 1, big=2**64 - 1, ratio=0.5, score=1.25,
        ok=True, name="n", blob=b"\0\1", color=1, tags=["a", "b"], note="hi", word="w",
    )  # fmt: skip
    full.price.units, full.price.currency = 12, "EUR"
    full.attrs["k"] = 1
    full.lines.add(sku="s1", count=2)
    full.at.seconds, full.at.nanos = 1_767_323_045, 678_000_000
    full.label.value = "L"
    full.parent.id = 7
    empty = order_cls()
    texts = {3: ("PROTOBUF", ORDER_PROTO, [COMMON_PROTO])}
    values = [
        proto_wire(3, full),
        proto_wire(3, empty),
        proto_wire(3, other_cls(x="o"), b"\2\2"),  # indexes [1]: the second message
    ]
    table = schema_id_rows(columns(values), texts, SchemaValues())
    fields = {f.name: f.type for f in table.schema.field("value").type}
    assert str(fields["big"]) == "decimal128(20, 0)" and str(fields["small"]) == "int64"
    assert str(fields["ratio"]) == "float" and str(fields["at"]) == "timestamp[us, tz=UTC]"
    assert str(fields["attrs"]) == "map<string, int32>" and str(fields["label"]) == "string"
    assert str(fields["parent"]) == "string"  # (a recursive message: its JSON text)
    assert "nothing" not in fields  # (google.protobuf.Empty: Parquet has no empty struct)
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    v = rows[0]["value"]
    assert rows[0]["schema_id"] == 3 and rows[0]["value_raw"] is None
    assert (v["id"], v["delta"], v["total"], v["small"]) == (-1, -2, 2**40, 2**32 - 1)
    assert v["big"] == Decimal(2**64 - 1) and v["ratio"] == 0.5 and v["score"] == 1.25
    assert v["ok"] is True and v["name"] == "n" and v["blob"] == b"\0\1"
    assert v["color"] == "BLUE" and v["price"] == {"units": 12, "currency": "EUR"}
    assert v["tags"] == ["a", "b"] and v["attrs"] == [("k", 1)]
    assert v["lines"] == [{"sku": "s1", "count": 2}]
    assert v["at"] == dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    assert v["note"] == "hi" and v["label"] == "L" and v["number"] is None and v["word"] == "w"
    assert json.loads(v["parent"]) == {"id": 7}
    e = rows[1]["value"]  # absent: null with presence, protobuf's default without
    assert (e["id"], e["name"], e["ok"], e["color"], e["tags"], e["attrs"]) == (
        0, "", False, "RED", [], []
    )  # fmt: skip
    assert e["price"] is None and e["at"] is None and e["note"] is None and e["label"] is None
    assert e["number"] is None and e["word"] is None and e["parent"] is None
    assert rows[2]["value"]["x"] == "o" and rows[2]["value"]["id"] is None


def test_protobuf_values_that_do_not_decode_stay_raw():
    order_cls, _ = proto_classes()
    texts = {3: ("PROTOBUF", ORDER_PROTO, [COMMON_PROTO])}
    good = proto_wire(3, order_cls(id=5))
    values = [
        good,
        struct.pack(">bI", 0, 3) + b"\0\xff\xff",  # a varint that does not end
        struct.pack(">bI", 0, 3) + b"\2\x0a",  # indexes [5]: no such message
        struct.pack(">bI", 0, 3) + b"\x81",  # indexes that do not end
        struct.pack(">bI", 0, 3),  # no indexes
    ]
    rows = sorted(
        schema_id_rows(columns(values), texts, SchemaValues()).to_pylist(),
        key=lambda r: r["offset"],
    )
    assert rows[0]["value"]["id"] == 5
    for row, raw in zip(rows[1:], values[1:]):
        assert row["value"] is None and row["value_raw"] == raw and row["schema_id"] is None
