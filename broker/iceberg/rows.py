"""The rows of a topic's table, as Arrow tables (pyarrow), from a partition's committed records
(committed.py). Imported only when a topic is written as a table.

Every row holds the record's Kafka coordinates beside its data:

``key_value``               key binary, value binary, headers list<struct<key string, value
                            binary>>, partition int, offset long, timestamp timestamptz (µs),
                            timestamp_type int (0 CreateTime, 1 LogAppendTime)
``value_schema_id_prefix``  the same, but instead of ``value``: ``schema_id`` int and ``value``
                            a struct of the columns of the value's Avro schema (Confluent's wire
                            format: byte 0, a 4-byte big-endian schema id, the Avro body).
                            A value that does not decode (no magic byte, an unknown schema id,
                            not Avro, a body that does not read) keeps ``value`` null and its
                            bytes in ``value_raw``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .committed import Columns

KEY_VALUE, VALUE_SCHEMA_ID_PREFIX = "key_value", "value_schema_id_prefix"
MAGIC = 0
_SCHEMA_ID = struct.Struct(">bI")

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP = pa.timestamp("us", tz="UTC")
META = [
    pa.field("key", pa.binary()),
    pa.field("headers", HEADERS),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", TIMESTAMP),
    pa.field("timestamp_type", pa.int32()),
]
KEY_VALUE_SCHEMA = pa.schema([META[0], pa.field("value", pa.binary()), *META[1:]])


def _meta(cols: Columns) -> dict[str, pa.Array]:
    import pyarrow.compute as pc

    n = len(cols)
    if any(cols.headers):
        headers = pa.array([[{"key": k, "value": v} for k, v in h] for h in cols.headers], HEADERS)
    else:  # (the common case: no record has headers) n empty lists, without a Python loop
        empty = pa.array([], HEADERS.value_type)
        headers = pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), empty)
    millis = pa.array(cols.timestamps, pa.int64())
    return {
        "key": pa.array(cols.keys, pa.binary()),
        "headers": headers,
        "partition": pa.array([cols.partition] * n, pa.int32()),
        "offset": pa.array(cols.offsets, pa.int64()),
        "timestamp": pc.multiply(millis, 1000).cast(TIMESTAMP),
        "timestamp_type": pa.array(cols.timestamp_types, pa.int32()),
    }


def key_value_rows(cols: Columns) -> pa.Table:
    arrays = _meta(cols)
    arrays["value"] = pa.array(cols.values, pa.binary())
    return pa.table({f.name: arrays[f.name] for f in KEY_VALUE_SCHEMA}, schema=KEY_VALUE_SCHEMA)


# --- value_schema_id_prefix: Avro values -------------------------------------------------------


class UnknownSchemas(Exception):
    """Values name schema ids this round has not looked up yet (the event loop looks them up in
    the schema registry, then the round runs again)."""

    def __init__(self, ids: set[int]) -> None:
        super().__init__(f"schema ids to look up: {sorted(ids)}")
        self.ids = ids


# schema id -> (schema type, text, referenced texts), or None when the registry has no such id
SchemaTexts = dict[int, tuple[str, str, list[str]] | None]


class AvroValues:
    """Avro readers and Arrow types per schema id (parsed once, kept per translator)."""

    def __init__(self) -> None:
        self._parsed: dict[int, tuple[Any, pa.DataType] | None] = {}

    def reader(self, schema_id: int, texts: SchemaTexts) -> tuple[Any, pa.DataType] | None:
        if schema_id not in self._parsed:
            found = texts.get(schema_id)
            if found is None or found[0] != "AVRO":
                self._parsed[schema_id] = None
            else:
                from fastavro import parse_schema

                named: dict[str, Any] = {}
                for ref in found[2]:
                    parse_schema(json.loads(ref), named_schemas=named)
                parsed = parse_schema(json.loads(found[1]), named_schemas=named)
                self._parsed[schema_id] = (parsed, _struct_type(parsed, named))
        return self._parsed[schema_id]


def schema_id_rows(cols: Columns, texts: SchemaTexts, avro: AvroValues) -> pa.Table:
    """The rows of ``cols`` for a value_schema_id_prefix topic: one Arrow table per schema id
    seen, concatenated with their schemas unified (later fields added, nulls where absent).
    Raises ``UnknownSchemas`` for ids not in ``texts`` yet."""
    from fastavro import schemaless_reader

    ids: list[int] = []
    for v in cols.values:
        if v is not None and len(v) >= 5 and v[0] == MAGIC:
            ids.append(_SCHEMA_ID.unpack_from(v)[1])
        else:
            ids.append(-1)
    missing = {i for i in ids if i >= 0 and i not in texts}
    if missing:
        raise UnknownSchemas(missing)
    by_id: dict[int, list[int]] = {}
    decoded: list[Any] = [None] * len(ids)
    raw: list[bytes | None] = [None] * len(ids)
    for row, (schema_id, value) in enumerate(zip(ids, cols.values)):
        reader = avro.reader(schema_id, texts) if schema_id >= 0 else None
        if reader is None:
            raw[row] = value
            by_id.setdefault(-1, []).append(row)
            continue
        try:
            record = schemaless_reader(io.BytesIO(value[5:]), reader[0], None)  # type: ignore[index]
        except Exception:  # a body that is not what the schema says
            raw[row] = value
            by_id.setdefault(-1, []).append(row)
            continue
        decoded[row] = record
        by_id.setdefault(schema_id, []).append(row)
    meta = _meta(cols)
    tables = []
    for schema_id, rows in sorted(by_id.items()):
        take = pa.array(rows, pa.int64())
        arrays = {name: array.take(take) for name, array in meta.items()}
        values = None
        if schema_id >= 0:
            struct_type = avro.reader(schema_id, texts)[1]  # type: ignore[index]
            try:
                values = pa.array([_wrap(decoded[r]) for r in rows], struct_type)
            except (pa.ArrowException, TypeError, ValueError):
                for r in rows:  # values Arrow cannot take as typed (a union of kinds): raw
                    raw[r] = cols.values[r]
                schema_id = -1
        arrays["schema_id"] = pa.array(
            [schema_id if schema_id >= 0 else None] * len(rows), pa.int32()
        )
        arrays["value_raw"] = pa.array([raw[r] for r in rows], pa.binary())
        fields = [*META[:1], pa.field("schema_id", pa.int32())]
        if values is not None:  # (rows without a decoded value: no column, nulls when joined)
            arrays["value"] = values
            fields.append(pa.field("value", values.type))
        fields += [pa.field("value_raw", pa.binary()), *META[1:]]
        schema = pa.schema(fields)
        tables.append(pa.table({f.name: arrays[f.name] for f in schema}, schema=schema))
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="permissive")
    return table.sort_by([("offset", "ascending")])


def _wrap(record: Any) -> Any:
    """A decoded Avro value whose schema is not a record is kept under the column ``value``."""
    return record if isinstance(record, dict) else {"value": record}


def _struct_type(schema: Any, named: dict[str, Any]) -> pa.DataType:
    t = arrow_type(schema, named)
    return t if pa.types.is_struct(t) else pa.struct([pa.field("value", t)])


_PRIMITIVE: dict[str, Callable[[], pa.DataType]] = {
    "boolean": pa.bool_,
    "int": pa.int32,
    "long": pa.int64,
    "float": pa.float32,
    "double": pa.float64,
    "bytes": pa.binary,
    "string": pa.string,
}


def arrow_type(
    schema: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()
) -> pa.DataType:
    """The Arrow type of an Avro schema (fastavro's parsed form): records are structs (every
    field nullable, so later schema versions may add fields), ``[null, T]`` is a nullable T,
    other unions are kept as their JSON text, enums are strings, fixed is binary, maps have
    string keys; date, time, timestamp and decimal logical types map to Arrow's."""
    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return _PRIMITIVE[schema]()
        if schema == "null":
            return pa.null()
        if schema in named and schema not in seen:
            return arrow_type(named[schema], named, seen | {schema})
        return pa.string()  # a recursive type: its JSON text
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return arrow_type(branches[0], named, seen)
        return pa.string()
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    if logical == "time-millis" and kind == "int":
        return pa.time64("us")
    if logical == "time-micros" and kind == "long":
        return pa.time64("us")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema.get("precision", 38)), int(schema.get("scale", 0)))
    if kind == "record":
        name = schema.get("name", "")
        inner = seen | {name}
        return pa.struct(
            [pa.field(f["name"], arrow_type(f["type"], named, inner)) for f in schema["fields"]]
        )
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], named, seen))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], named, seen))
    if isinstance(kind, str | list | dict):
        return arrow_type(kind, named, seen)
    return pa.string()
