"""PROTOBUF values as Arrow columns (rows.py asks for them; run in the translator's worker
processes). Imported only when a topic is written as a table, as rows.py is.

Confluent's framing after the 5-byte prefix: the message indexes (which message of the
``.proto`` the value is: a zigzag varint count, then that many zigzag varint indexes, the
first into the file's messages, the next into that message's nested ones; the single byte 0
means [0], the first message), then the message's bytes.

A schema id's ``.proto`` text (as the registry keeps it, named types fully qualified) and the
texts it references (theirs first) are built into a ``DescriptorPool`` of their own, the
references as files the schema imports (their import names are not kept, so each file imports
every file before it); ``google/protobuf/*`` imports come from protobuf's own well-known
types. Each value is parsed by protobuf's message class (C, upb); the Arrow arrays are then
made a field at a time over all the values of one message type, not a record at a time.

Types: int32, sint32, sfixed32 int; int64, sint64, sfixed64 long; uint32, fixed32 long;
uint64, fixed64 decimal(20, 0) (Iceberg has no unsigned types: a long would turn values from
2^63 up negative); float, double, bool, string; bytes binary; an enum its value's name (an
unknown number its decimal text); a message a struct; repeated a list; a map a map;
google.protobuf.Timestamp a timestamptz (µs); the wrappers (google.protobuf.Int64Value, ...)
their nullable value; a recursive message its JSON text; a message of no fields
(google.protobuf.Empty) is left out, as Parquet has no struct without fields (a value of such a
message stays raw). Column names are the fields' names.
A field with presence (a message, proto3 ``optional``, a oneof's member, proto2's) is null
when absent; a field without presence (a proto3 scalar, a repeated field, a map) holds what
protobuf reads for it (0, "", an empty list).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.descriptor import FieldDescriptor as F

# (rows given, the Arrow array of their values) for each message type met, and the rows that
# did not decode (positions in the list of bodies given)
Decoded = tuple[list[tuple[list[int], pa.Array]], list[int]]

_SCALARS = {
    F.TYPE_INT32: pa.int32(),
    F.TYPE_SINT32: pa.int32(),
    F.TYPE_SFIXED32: pa.int32(),
    F.TYPE_INT64: pa.int64(),
    F.TYPE_SINT64: pa.int64(),
    F.TYPE_SFIXED64: pa.int64(),
    F.TYPE_UINT32: pa.int64(),
    F.TYPE_FIXED32: pa.int64(),
    F.TYPE_UINT64: pa.decimal128(20, 0),
    F.TYPE_FIXED64: pa.decimal128(20, 0),
    F.TYPE_FLOAT: pa.float32(),
    F.TYPE_DOUBLE: pa.float64(),
    F.TYPE_BOOL: pa.bool_(),
    F.TYPE_STRING: pa.string(),
    F.TYPE_BYTES: pa.binary(),
}
_TIMESTAMP = "google.protobuf.Timestamp"
_WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}


def decoder(text: str, references: list[str]) -> Callable[[list[bytes]], Decoded]:
    """The decoder of one PROTOBUF schema id's values (bodies after the 5-byte prefix);
    ValueError or TypeError when the schema does not build."""
    from google.protobuf.message import DecodeError

    file = _file(text, references)
    tops = list(file.message_types_by_name.values())
    types: dict[tuple[int, ...], _Message | None] = {}

    def message_type(path: tuple[int, ...]) -> _Message | None:
        if path not in types:
            found, desc = tops, None
            for i in path:
                desc = found[i] if i < len(found) else None
                if desc is None:
                    break
                found = desc.nested_types
            kind = None if desc is None else _Message(desc, frozenset())
            types[path] = kind if kind is not None and kind.fields else None
        return types[path]

    def decode(bodies: list[bytes]) -> Decoded:
        groups: dict[tuple[int, ...], tuple[list[int], list[Any]]] = {}
        bad: list[int] = []
        for row, body in enumerate(bodies):
            try:
                path, at = message_indexes(body)
                kind = message_type(path)
                if kind is None:
                    raise ValueError(f"no message with fields at indexes {list(path)}")
                parsed = kind.cls.FromString(body[at:])
            except (ValueError, DecodeError):
                bad.append(row)
                continue
            rows, messages = groups.setdefault(path, ([], []))
            rows.append(row)
            messages.append(parsed)
        out = []
        for path, (rows, messages) in groups.items():
            try:
                out.append((rows, types[path].build(messages, None)))  # type: ignore[union-attr]
            except (pa.ArrowException, TypeError, ValueError):
                bad += rows  # (values Arrow cannot take as typed: raw)
        return out, bad

    return decode


def message_indexes(body: bytes) -> tuple[tuple[int, ...], int]:
    """(The message indexes, where the message's bytes start); ValueError when they do not
    read."""
    if body[:1] == b"\0":
        return (0,), 1  # (the first message: the common case)
    count, at = _zigzag(body, 0)
    if not 0 < count <= len(body):
        raise ValueError(f"{count} message indexes")
    path = []
    for _ in range(count):
        index, at = _zigzag(body, at)
        if index < 0:
            raise ValueError(f"message index {index}")
        path.append(index)
    return tuple(path), at


def _zigzag(body: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(body) or shift > 63:
            raise ValueError("a message index that does not end")
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


# the schema -----------------------------------------------------------------------------------


def _file(text: str, references: list[str]) -> Any:
    from google.protobuf import descriptor_pool

    from headrace.broker.registry.protobuf_text import to_descriptor

    pool = descriptor_pool.DescriptorPool()
    names: list[str] = []
    for i, source in enumerate([*references, text]):
        fd = to_descriptor(source, f"{i}.proto")
        known = [dep for dep in fd.dependency if dep.startswith("google/protobuf/")]
        for dep in known:
            _add_well_known(pool, dep)
        del fd.dependency[:]
        fd.dependency.extend([*names, *known])
        _resolve_in_pool(fd.message_type)
        pool.Add(fd)
        names.append(fd.name)
    return pool.FindFileByName(names[-1])


def _add_well_known(pool: Any, name: str) -> None:
    from google.protobuf import descriptor_pb2, descriptor_pool

    try:
        pool.FindFileByName(name)
        return
    except KeyError:
        pass
    try:
        importlib.import_module(f"google.protobuf.{PurePosixPath(name).stem}_pb2")
        found = descriptor_pool.Default().FindFileByName(name)
    except (ImportError, KeyError):
        raise ValueError(f"imports {name}, not a well-known type") from None
    for dep in found.dependencies:
        _add_well_known(pool, dep.name)
    fd = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(fd)
    pool.Add(fd)


def _resolve_in_pool(messages: Any) -> None:
    """Named types without their kind: the text's parser guesses message for a type of
    another file, which may be an enum; the pool finds which from the name."""
    for m in messages:
        for f in m.field:
            if f.type_name:
                f.ClearField("type")
        _resolve_in_pool(m.nested_type)


# the columns ----------------------------------------------------------------------------------

Build = Callable[[list[Any]], pa.Array]  # the values of one field, as an Arrow array


class _Message:
    """A message type as a struct: its Arrow type, and ``build`` making the struct array of a
    list of its messages a field at a time."""

    def __init__(self, desc: Any, seen: frozenset[str]) -> None:
        from google.protobuf import message_factory

        self.cls = message_factory.GetMessageClass(desc)
        inner = seen | {desc.full_name}
        columns = [(f.name, _field(f, inner)) for f in desc.fields]
        # (a message of no fields, google.protobuf.Empty say, holds nothing: Parquet has no
        # struct without fields)
        columns = [c for c in columns if c[1][0] != pa.struct([])]
        self.fields = [pa.field(name, t) for name, (t, _) in columns]
        self.builds = [b for _, (_, b) in columns]
        self.type = pa.struct(self.fields)

    def build(self, messages: list[Any], mask: pa.Array | None) -> pa.Array:
        children = [b(messages) for b in self.builds]
        return pa.StructArray.from_arrays(children, fields=self.fields, mask=mask)


def _field(f: Any, seen: frozenset[str]) -> tuple[pa.DataType, Build]:
    """A field's Arrow type, and how its values are taken from a list of its messages."""
    name = f.name
    entry = f.message_type
    if f.is_repeated and entry is not None and entry.GetOptions().map_entry:
        key_type, keys = _values(entry.fields_by_name["key"], seen)
        item_type, items = _values(entry.fields_by_name["value"], seen)

        def build_map(messages: list[Any]) -> pa.Array:
            maps = [getattr(m, name) for m in messages]
            found = [k for mp in maps for k in mp]
            values = [mp[k] for mp in maps for k in mp]
            return pa.MapArray.from_arrays(
                _offsets(maps), keys(found, None), items(values, None), pa.map_(key_type, item_type)
            )

        return pa.map_(key_type, item_type), build_map
    item_type, values = _values(f, seen)
    if f.is_repeated:

        def build_list(messages: list[Any]) -> pa.Array:
            lists = [getattr(m, name) for m in messages]
            return pa.ListArray.from_arrays(
                _offsets(lists), values([x for xs in lists for x in xs], None)
            )

        return pa.list_(item_type), build_list
    if f.has_presence:

        def build_present(messages: list[Any]) -> pa.Array:
            absent = [not m.HasField(name) for m in messages]
            got = [getattr(m, name) for m in messages]
            return values(got, pa.array(absent) if any(absent) else None)

        return item_type, build_present
    return item_type, lambda messages: values([getattr(m, name) for m in messages], None)


def _offsets(lists: list[Any]) -> pa.Array:
    ends = [0]
    for xs in lists:
        ends.append(ends[-1] + len(xs))
    return pa.array(ends, pa.int32())


def _values(f: Any, seen: frozenset[str]) -> tuple[pa.DataType, Callable[[list, Any], pa.Array]]:
    """The Arrow type of one value of field ``f`` (an item, for a repeated field), and how a
    list of such values (null where ``mask`` is true) becomes an array of it."""
    if f.enum_type is not None:
        numbers = pa.array([v.number for v in f.enum_type.values], pa.int32())
        names = pa.array([v.name for v in f.enum_type.values], pa.string())

        def enum(values: list, mask: Any) -> pa.Array:
            found = pa.array(values, pa.int32())
            named = names.take(pc.index_in(found, value_set=numbers))
            return _masked(pc.coalesce(named, found.cast(pa.string())), mask)

        return pa.string(), enum
    desc = f.message_type
    if desc is None:
        kind = _SCALARS[f.type]
        return kind, lambda values, mask: _masked(pa.array(values, kind), mask)
    if desc.full_name == _TIMESTAMP:
        at = pa.timestamp("us", tz="UTC")

        def timestamp(values: list, mask: Any) -> pa.Array:
            micros = pa.array([v.seconds * 1_000_000 + v.nanos // 1000 for v in values], pa.int64())
            return _masked(micros.cast(at), mask)

        return at, timestamp
    if desc.full_name in _WRAPPERS:
        kind, inner = _values(desc.fields_by_name["value"], seen)
        return kind, lambda values, mask: inner([v.value for v in values], mask)
    if desc.full_name in seen:
        from google.protobuf.json_format import MessageToDict

        def text(values: list, mask: Any) -> pa.Array:
            found = [json.dumps(MessageToDict(v), separators=(",", ":")) for v in values]
            return _masked(pa.array(found, pa.string()), mask)

        return pa.string(), text
    message = _Message(desc, seen)
    return message.type, message.build


def _masked(array: pa.Array, mask: pa.Array | None) -> pa.Array:
    if mask is None:
        return array
    return pc.if_else(mask, pa.scalar(None, array.type), array)
