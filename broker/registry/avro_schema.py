"""AVRO schemas: parsed and checked by fastavro, compared by Avro's schema-resolution rules.

A schema is kept as Confluent keeps it, in Avro's own ``Schema.toString()`` form
(avro_canonical.py): any form of one schema has one text, and so one id; with ``normalize``
in Confluent's normalized form. Named types of referenced schemas (``references``) are parsed first,
so the schema may use them by name.

Compatibility (``incompatibilities(reader, writer)``) is the Avro specification's "Schema
Resolution": can data written with ``writer`` be read with ``reader``? Records match by full
name (or a reader alias); each reader field is read from the writer's field of the same name
(or alias), else it needs a default; writer fields the reader lacks are skipped. Enums need
every writer symbol in the reader (or a reader default); fixed types the same size; a writer
union needs each branch readable, a reader union one branch that reads the writer. Numeric
promotions: int to long, float, double; long to float, double; float to double; string and
bytes either way.
"""

from __future__ import annotations

import json
from typing import Any

from fastavro.schema import SchemaParseException, UnknownType, parse_schema

from .avro_canonical import canonical

PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class AvroSchema:
    """A parsed Avro schema: ``parsed`` (fastavro's form: full names, a named type written out
    once, then used by name) and ``named`` (every named type by full name)."""

    def __init__(self, parsed: Any, named: dict[str, Any]) -> None:
        self.parsed, self.named = parsed, named


def parse(text: str, references: list[str], normalize: bool) -> tuple[str, AvroSchema]:
    """(The text to keep, the parsed schema); ValueError with the parser's message."""
    try:
        document = json.loads(text)
    except ValueError:
        document = text  # a bare primitive name: "string"
        if text.strip() not in PRIMITIVES:
            raise ValueError(f"not JSON: {text[:80]!r}") from None
        document = text.strip()
    named: dict[str, Any] = {}
    try:
        for ref in references:
            parse_schema(json.loads(ref), named_schemas=named, _write_hint=False)
        parsed = parse_schema(document, named_schemas=named, _write_hint=False)
    except (
        SchemaParseException,
        UnknownType,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    ) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None
    try:
        kept = canonical(document, [json.loads(ref) for ref in references], normalize)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None
    return kept, AvroSchema(parsed, named)


def incompatibilities(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    found: list[str] = []
    _check(reader.parsed, writer.parsed, reader, writer, "/", found, set())
    return found


def _resolve(schema: Any, owner: AvroSchema) -> Any:
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return owner.named.get(schema, schema)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return kind if isinstance(kind, str) and kind in PRIMITIVES | _COMPLEX else _kind(kind)
    return str(schema)


_COMPLEX = {"record", "error", "enum", "array", "map", "fixed"}


def _name(schema: Any) -> str:
    return schema.get("name", "") if isinstance(schema, dict) else ""


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _names_match(reader: dict, writer: dict) -> bool:
    r, w = _name(reader), _name(writer)
    aliases = set(reader.get("aliases") or ())
    return r == w or _short(r) == _short(w) or w in aliases or _short(w) in aliases


def _check(r, w, ro: AvroSchema, wo: AvroSchema, path: str, found: list[str], seen: set) -> None:
    r, w = _resolve(r, ro), _resolve(w, wo)
    key = (id(r), id(w))
    if key in seen:  # a recursive type, already being compared
        return
    seen.add(key)
    rk, wk = _kind(r), _kind(w)
    if isinstance(r, dict) and rk in PRIMITIVES and not isinstance(r["type"], str):
        r = r["type"]
    if wk == "union":
        for i, branch in enumerate(w):
            _check(r, branch, ro, wo, f"{path}{i}/", found, seen)
        return
    if rk == "union":
        for branch in r:
            trial: list[str] = []
            _check(branch, w, ro, wo, path, trial, set(seen))
            if not trial:
                return
        found.append(
            f"{{errorType:'MISSING_UNION_BRANCH', path:'{path}', description:'The new"
            f" schema is missing a type inside a union field: {wk}'}}"
        )
        return
    if rk != wk:
        if (wk, rk) not in PROMOTIONS:
            found.append(
                f"{{errorType:'TYPE_MISMATCH', path:'{path}', description:'The type"
                f" (path '{path}') of a field in the new schema does not match with"
                f" the old schema: expected {wk}, found {rk}'}}"
            )
        return
    if rk in ("record", "error"):
        if not _names_match(r, w):
            found.append(
                f"{{errorType:'NAME_MISMATCH', path:'{path}', description:'The name"
                f" of the schema has changed (path '{path}'): expected {_name(w)}'}}"
            )
            return
        writer_fields = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            source = writer_fields.get(field["name"])
            if source is None:
                for alias in field.get("aliases") or ():
                    source = writer_fields.get(alias)
                    if source is not None:
                        break
            where = f"{path}fields/{field['name']}/"
            if source is None:
                if "default" not in field:
                    found.append(
                        f"{{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE',"
                        f" path:'{where}', description:'The field"
                        f" '{field['name']}' at path '{where}' in the new schema has"
                        f" no default value and is missing in the old schema'}}"
                    )
                continue
            _check(field["type"], source["type"], ro, wo, f"{where}type/", found, seen)
    elif rk == "enum":
        if not _names_match(r, w):
            found.append(
                f"{{errorType:'NAME_MISMATCH', path:'{path}', description:'The name"
                f" of the schema has changed (path '{path}'): expected {_name(w)}'}}"
            )
            return
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            found.append(
                f"{{errorType:'MISSING_ENUM_SYMBOLS', path:'{path}symbols',"
                f" description:'The new schema is missing enum symbols {missing}'}}"
            )
    elif rk == "fixed":
        if not _names_match(r, w):
            found.append(
                f"{{errorType:'NAME_MISMATCH', path:'{path}', description:'The name"
                f" of the schema has changed (path '{path}'): expected {_name(w)}'}}"
            )
        elif r["size"] != w["size"]:
            found.append(
                f"{{errorType:'FIXED_SIZE_MISMATCH', path:'{path}size',"
                f" description:'The size of FIXED type field at path '{path}' in the"
                f" new schema does not match with the old schema'}}"
            )
    elif rk == "array":
        _check(r["items"], w["items"], ro, wo, f"{path}items/", found, seen)
    elif rk == "map":
        _check(r["values"], w["values"], ro, wo, f"{path}values/", found, seen)
