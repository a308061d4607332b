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
from headrace.broker.iceberg.rows import AvroValues, UnknownSchemas, schema_id_rows  # noqa: E402

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
    table = schema_id_rows(columns([wire(3, RICH, record)]), texts, AvroValues())
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
    table = schema_id_rows(columns(values), texts, AvroValues())
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    assert rows[0]["value"] == {"x": 1} and rows[0]["schema_id"] == 1
    for row, raw in zip(rows[1:], values[1:]):
        assert row["value"] is None and row["value_raw"] == raw
    with pytest.raises(UnknownSchemas) as e:
        schema_id_rows(columns([struct.pack(">bI", 0, 9) + b"x"]), texts, AvroValues())
    assert e.value.ids == {9}
