"""The rows of a topic's table, as Arrow tables (pyarrow), from a partition's committed records
(committed.py). Imported only when a topic is written as a table.

Every row holds the record's Kafka coordinates beside its data:

``key_value``               key binary, value binary, headers list<struct<key string, value
                            binary>>, partition int, offset long, timestamp timestamptz (µs),
                            timestamp_type int (0 CreateTime, 1 LogAppendTime)
``value_schema_id_prefix``  the same, but instead of ``value``: ``schema_id`` int and ``value``
                            a struct of the columns of the value's schema (Confluent's wire
                            format: byte 0, a 4-byte big-endian schema id, the body): an AVRO
                            schema's fields, a JSON schema's properties, or the fields of the
                            PROTOBUF message the value's message indexes name
                            (protobuf_values.py). A value that does not decode (no magic byte,
                            an unknown schema id, a body that does not read) keeps ``value``
                            null and its bytes in ``value_raw``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from . import protobuf_values
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


def _meta(cols: Columns, arrays: dict[str, Any] | None = None) -> dict[str, pa.Array]:
    import pyarrow.compute as pc

    found = cols.arrays() if arrays is None else arrays
    n = len(cols)
    by_row = found["headers"]
    if any(by_row):
        headers = pa.array([[{"key": k, "value": v} for k, v in h] for h in by_row], HEADERS)
    else:  # (the common case: no record has headers) n empty lists, without a Python loop
        empty = pa.array([], HEADERS.value_type)
        zeros = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(bytes(4 * (n + 1)))])
        headers = pa.ListArray.from_arrays(zeros, empty)
    return {
        "key": found["key"],
        "headers": headers,
        "partition": pa.repeat(pa.scalar(cols.partition, pa.int32()), n),
        "offset": found["offset"],
        "timestamp": pc.multiply(found["timestamp"], 1000).cast(TIMESTAMP),
        "timestamp_type": found["timestamp_type"],
    }


def key_value_rows(cols: Columns) -> pa.Table:
    found = cols.arrays()
    arrays = _meta(cols, found)
    arrays["value"] = found["value"]
    return pa.table({f.name: arrays[f.name] for f in KEY_VALUE_SCHEMA}, schema=KEY_VALUE_SCHEMA)


# --- value_schema_id_prefix: Avro, JSON and Protobuf values ------------------------------------


class UnknownSchemas(Exception):
    """Values name schema ids this round has not looked up yet (the event loop looks them up in
    the schema registry, then the round runs again)."""

    def __init__(self, ids: set[int]) -> None:
        super().__init__(f"schema ids to look up: {sorted(ids)}")
        self.ids = ids


# schema id -> (schema type, text, referenced texts), or None when the registry has no such id
SchemaTexts = dict[int, tuple[str, str, list[str]] | None]

# the bodies (after the 5-byte prefix) of one schema id's values -> ([(the positions of the
# bodies that decoded as one Arrow struct type, that struct array)], the positions that did not)
Decoder = Callable[[list[bytes]], tuple[list[tuple[list[int], pa.Array]], list[int]]]


class SchemaValues:
    """Decoders per schema id, made once and kept per translator: AVRO (with fastavro), JSON
    (JSON Schema's types), PROTOBUF (protobuf_values.py); None for unreadable schemas."""

    def __init__(self) -> None:
        self._parsed: dict[int, Decoder | None] = {}

    def reader(self, schema_id: int, texts: SchemaTexts) -> Decoder | None:
        if schema_id not in self._parsed:
            found = texts.get(schema_id)
            decoder = None
            if found is not None:
                try:
                    if found[0] == "AVRO":
                        decoder = _one_by_one(*_avro_decoder(found[1], found[2]))
                    elif found[0] == "JSON":
                        decoder = _one_by_one(*_json_decoder(found[1]))
                    elif found[0] == "PROTOBUF":
                        decoder = protobuf_values.decoder(found[1], found[2])
                except (ValueError, TypeError, KeyError, AttributeError):
                    decoder = None  # (not readable here: its values stay raw)
            self._parsed[schema_id] = decoder
        return self._parsed[schema_id]


def _one_by_one(decode: Callable[[bytes], Any], struct_type: pa.DataType) -> Decoder:
    """A decoder of values read one at a time (fastavro, json): one struct array, or none
    when Arrow cannot take the values as typed (a union of kinds: all raw)."""

    def decode_all(bodies: list[bytes]) -> tuple[list[tuple[list[int], pa.Array]], list[int]]:
        good: list[int] = []
        values: list[Any] = []
        bad: list[int] = []
        for row, body in enumerate(bodies):
            try:
                values.append(_wrap(decode(body)))
            except Exception:  # a body that is not what the schema says
                bad.append(row)
                continue
            good.append(row)
        if not good:
            return [], bad
        try:
            return [(good, pa.array(values, struct_type))], bad
        except (pa.ArrowException, TypeError, ValueError):
            return [], list(range(len(bodies)))

    return decode_all


def _avro_decoder(text: str, references: list[str]) -> tuple[Callable[[bytes], Any], pa.DataType]:
    from fastavro import parse_schema, schemaless_reader

    named: dict[str, Any] = {}
    for ref in references:
        parse_schema(json.loads(ref), named_schemas=named)
    parsed = parse_schema(json.loads(text), named_schemas=named)
    convert = _avro_convert(parsed, named)

    def decode(body: bytes) -> Any:
        value = schemaless_reader(io.BytesIO(body), parsed, None)
        return value if convert is None else convert(value)

    return decode, _struct_type(parsed, named)


def _text(v: Any) -> Any:
    return None if v is None else json.dumps(v, separators=(",", ":"), default=str)


def _avro_convert(
    schema: Any, named: dict[str, Any], seen: frozenset[str] = frozenset()
) -> Callable[[Any], Any] | None:
    """What fastavro's value needs to fit ``arrow_type(schema)``: the JSON text of a union of
    several types or of a recursive type, ``str`` of a uuid; None when it fits as it is."""
    if isinstance(schema, str):
        if schema in named and schema not in _PRIMITIVE and schema != "null":
            if schema in seen:
                return _text
            return _avro_convert(named[schema], named, seen | {schema})
        return None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return _avro_convert(branches[0], named, seen) if len(branches) == 1 else _text
    kind = schema.get("type")
    if schema.get("logicalType") == "uuid":
        return lambda v: None if v is None else str(v)
    if kind == "record":
        inner = seen | {schema.get("name", "")}
        fields = [(f["name"], _avro_convert(f["type"], named, inner)) for f in schema["fields"]]
        changing = [(name, fn) for name, fn in fields if fn is not None]
        if not changing:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            v = dict(v)
            for name, fn in changing:
                v[name] = fn(v.get(name))
            return v

        return record
    if kind == "array":
        item = _avro_convert(schema["items"], named, seen)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if kind == "map":
        each = _avro_convert(schema["values"], named, seen)
        if each is None:
            return None
        return lambda v: None if v is None else {k: each(x) for k, x in v.items()}
    if isinstance(kind, str | list | dict) and kind not in ("enum", "fixed"):
        return _avro_convert(kind, named, seen)
    return None


def schema_id_rows(cols: Columns, texts: SchemaTexts, values: SchemaValues) -> pa.Table:
    """The rows of ``cols`` for a value_schema_id_prefix topic: one Arrow table per schema id
    (and, for PROTOBUF, message type) seen, concatenated with their schemas unified (later
    fields added, nulls where absent). Raises ``UnknownSchemas`` for ids not in ``texts``
    yet."""
    payloads = cols.value_list()
    ids: list[int] = []
    for v in payloads:
        if v is not None and len(v) >= 5 and v[0] == MAGIC:
            ids.append(_SCHEMA_ID.unpack_from(v)[1])
        else:
            ids.append(-1)
    missing = {i for i in ids if i >= 0 and i not in texts}
    if missing:
        raise UnknownSchemas(missing)
    by_id: dict[int, list[int]] = {}
    raw: list[int] = []
    for row, schema_id in enumerate(ids):
        if schema_id >= 0 and values.reader(schema_id, texts) is not None:
            by_id.setdefault(schema_id, []).append(row)
        else:
            raw.append(row)
    meta = _meta(cols)
    tables = []
    for schema_id, rows in sorted(by_id.items()):
        decode = values.reader(schema_id, texts)
        groups, bad = decode([payloads[r][5:] for r in rows])  # type: ignore[index,misc]
        raw += [rows[i] for i in bad]
        for positions, array in groups:
            tables.append(_piece(meta, [rows[i] for i in positions], schema_id, array, payloads))
    if raw:
        tables.append(_piece(meta, sorted(raw), None, None, payloads))
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="permissive")
    return table.sort_by([("offset", "ascending")])


def _piece(
    meta: dict[str, pa.Array],
    rows: list[int],
    schema_id: int | None,
    values: pa.Array | None,
    payloads: list[bytes | None],
) -> pa.Table:
    """The rows ``rows`` (positions in the round's columns): decoded as ``values`` under
    ``schema_id``, or (None, None) kept raw in ``value_raw`` without a ``value`` column
    (nulls when joined)."""
    take = pa.array(rows, pa.int64())
    arrays = {name: array.take(take) for name, array in meta.items()}
    arrays["schema_id"] = pa.array([schema_id] * len(rows), pa.int32())
    raw = [None] * len(rows) if values is not None else [payloads[r] for r in rows]
    arrays["value_raw"] = pa.array(raw, pa.binary())
    fields = [*META[:1], pa.field("schema_id", pa.int32())]
    if values is not None:
        arrays["value"] = values
        fields.append(pa.field("value", values.type))
    fields += [pa.field("value_raw", pa.binary()), *META[1:]]
    schema = pa.schema(fields)
    return pa.table({f.name: arrays[f.name] for f in schema}, schema=schema)


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


# --- JSON Schema values -----------------------------------------------------------------------

_JSON_PRIMITIVE: dict[str, Callable[[], pa.DataType]] = {
    "string": pa.string,
    "integer": pa.int64,
    "number": pa.float64,
    "boolean": pa.bool_,
}


def _json_decoder(text: str) -> tuple[Callable[[bytes], Any], pa.DataType]:
    """A JSON Schema's values as columns: an object's ``properties`` are struct fields (each
    nullable), string, integer, number and boolean their Arrow types, arrays lists; anything
    else (no type, several types, ``$ref``) is kept as its JSON text. Confluent's JSON
    serializer writes the value as UTF-8 JSON after the 5-byte prefix."""
    schema = json.loads(text)
    arrow, convert = _json_type(schema if isinstance(schema, dict) else {})
    if not pa.types.is_struct(arrow):
        arrow, inner = pa.struct([pa.field("value", arrow)]), convert

        def convert(v: Any, inner=inner) -> Any:
            return {"value": inner(v)}

    return (lambda body: convert(json.loads(body))), arrow


def _as_text(v: Any) -> Any:
    return None if v is None else json.dumps(v, separators=(",", ":"))


def _same(v: Any) -> Any:
    return v


def _json_type(schema: dict) -> tuple[pa.DataType, Callable[[Any], Any]]:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" and isinstance(schema.get("properties"), dict):
        fields = {
            name: _json_type(sub)
            for name, sub in schema["properties"].items()
            if isinstance(sub, dict)
        }
        arrow = pa.struct([pa.field(name, t) for name, (t, _) in fields.items()])

        def convert(v: Any) -> Any:
            if not isinstance(v, dict):
                return None
            return {name: c(v.get(name)) for name, (_, c) in fields.items()}

        return arrow, convert
    if kind == "array" and isinstance(schema.get("items"), dict):
        item, convert_item = _json_type(schema["items"])

        def convert_list(v: Any) -> Any:
            return None if v is None else [convert_item(x) for x in v]

        return pa.list_(item), convert_list
    if isinstance(kind, str) and kind in _JSON_PRIMITIVE:
        return _JSON_PRIMITIVE[kind](), _same
    return pa.string(), _as_text
