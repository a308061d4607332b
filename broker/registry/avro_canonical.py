"""The text an Avro schema is kept as: Avro's own ``Schema.toString()``, which is what
Confluent's registry keeps (``AvroSchema.canonicalString()``), so that any form of one schema
(key order, white space, ``{"type": "string"}`` for ``"string"``, a full name or a name and
namespace) has one text, and so one id.

How this works
--------------
The schema is read into a small model first (``_Reader``), as Avro's parser reads it: names
resolved in their namespace (an unqualified name is looked up in the enclosing namespace,
then in none), each named type defined once, reserved attributes taken out and every other
attribute kept as a property, in the order it came. Then it is written as Avro writes it
(``_Writer``), compact JSON with these keys in this order:

* a primitive: its name, or ``{"type", <properties>}`` when it has properties (a logical
  type is one);
* record (or error): ``type, name, namespace, doc, fields, <properties>, aliases``;
  enum: ``type, name, namespace, doc, symbols, default, <properties>, aliases``; fixed:
  ``type, name, namespace, doc, size, <properties>, aliases``; ``namespace`` only where it
  differs from the enclosing one (``""`` for none inside one), a named type written out the
  first time and by name after (short in its own namespace);
* a field: ``name, type, doc, default, order`` (unless ascending), ``aliases, <properties>``;
* array: ``type, items, <properties>``; map: ``type, values, <properties>``; a union: a list.

The top-level named types of referenced schemas are written by name, as Confluent does
(``Schema.toString(references, false)``); their nested ones are written out where first used.
``resolved`` (``format=resolved``) writes them out where first used too, as Avro's
``Schema.toString()`` writes the schema Confluent parsed with its references (the text then
stands alone, needing no references to parse).

``normalize`` (``normalize=true``) gives what Confluent keeps then: its normalized text
(``AvroSchemaUtils.toNormalizedString()``) parsed again and written as above, so properties
come sorted by key (their values' keys too), aliases sorted, an int default of a float or
double field as a float, and a named type declared in no namespace inside a namespaced one
takes the enclosing namespace (the normalized text names it by its full name alone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_SCHEMA_RESERVED = {
    "doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases",
}  # fmt: skip
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = {"default", "doc", "name", "order", "type", "aliases"}


@dataclass(slots=True)
class _Named:
    kind: str  # record, error, enum, fixed
    full: str
    space: str | None
    doc: Any = None
    body: list[tuple[str, Any]] = field(default_factory=list)  # fields, symbols, size, default
    props: dict[str, Any] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)  # full names


@dataclass(slots=True)
class _Field:
    name: str
    type: Any
    rest: dict[str, Any]  # doc, default, order, aliases (those present), then properties


@dataclass(slots=True)
class _Complex:  # a primitive with properties, an array or a map
    type: str
    inner: tuple[str, Any] | None
    props: dict[str, Any]


def canonical(
    document: Any, references: list[Any], normalize: bool = False, resolved: bool = False
) -> str:
    """``document`` (a parsed Avro schema's JSON) as Avro's ``Schema.toString()`` writes it,
    the named types of ``references`` (their JSON, those they refer to first) known; with
    ``normalize`` as Confluent normalizes it; ``resolved``: the references' types written
    out where first used, not by name."""
    plain = _Reader(False)  # (the references as Confluent reads them: not normalized)
    tops = [plain.read(ref, None) for ref in references]
    reader = _Reader(normalize)
    for ref in references:
        reader.read(ref, None)
    model = reader.read(document, None)
    written = set() if resolved else {t.full for t in tops if isinstance(t, _Named)}
    out = _write(model, None, written)
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def _split(name: str, space: str | None) -> tuple[str, str | None]:
    """(full name, namespace) of ``name`` declared in ``space``, as Avro's ``Name``."""
    if "." in name:
        space, _, _ = name.rpartition(".")
    space = space or None
    return (f"{space}.{name.rpartition('.')[2]}" if space else name), space


def _qualified(full: str, space: str | None) -> str:
    own, _, short = full.rpartition(".")
    return short if not own or own == space else full


def _sorted(value: Any) -> Any:
    """``value`` with the keys of its objects sorted, all the way down."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


class _Reader:
    def __init__(self, normalize: bool) -> None:
        self.names: dict[str, _Named] = {}
        self.normalize = normalize

    def _props(self, s: dict, reserved: set[str]) -> dict[str, Any]:
        props = {k: v for k, v in s.items() if k not in reserved}
        return _sorted(props) if self.normalize else props

    def read(self, s: Any, space: str | None) -> Any:
        if isinstance(s, str):
            return s if s in PRIMITIVES else self._resolve(s, space)
        if isinstance(s, list):
            return [self.read(branch, space) for branch in s]
        if not isinstance(s, dict):
            raise ValueError(f"not an Avro schema: {s!r}")
        kind = s.get("type")
        if isinstance(kind, list | dict):  # {"type": <a schema>}
            return self.read(kind, space)
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(s, kind, space)
        props = self._props(s, _SCHEMA_RESERVED)
        if kind == "array":
            return _Complex("array", ("items", self.read(s["items"], space)), props)
        if kind == "map":
            return _Complex("map", ("values", self.read(s["values"], space)), props)
        if kind in PRIMITIVES:
            return _Complex(kind, None, props) if props else kind
        return self._resolve(str(kind), space)  # {"type": "SomeNamedType"}

    def _resolve(self, name: str, space: str | None) -> _Named:
        full = f"{space}.{name}" if space and "." not in name else name
        found = self.names.get(full) or self.names.get(name)
        if found is None:
            raise ValueError(f"unknown type {name!r}")
        return found

    def _named(self, s: dict, kind: str, space: str | None) -> _Named:
        declared = s.get("namespace")
        full, own = _split(s["name"], declared if isinstance(declared, str) else space)
        if self.normalize and own is None and space:
            full, own = f"{space}.{full}", space
        reserved = _ENUM_RESERVED if kind == "enum" else _SCHEMA_RESERVED
        named = _Named(kind, full, own, s.get("doc"))
        self.names[full] = named  # before its fields: a record may hold itself
        if kind in ("record", "error"):
            named.body.append(("fields", [self._field(f, own) for f in s["fields"]]))
        elif kind == "enum":
            named.body.append(("symbols", list(s["symbols"])))
            if s.get("default") is not None:
                named.body.append(("default", s["default"]))
        else:
            named.body.append(("size", s["size"]))
        named.props = self._props(s, reserved)
        named.aliases = [_split(a, own)[0] for a in s.get("aliases") or ()]
        if self.normalize:
            named.aliases = sorted(set(named.aliases))
        return named

    def _field(self, f: dict, space: str | None) -> _Field:
        kind = self.read(f["type"], space)
        rest: dict[str, Any] = {}
        if f.get("doc") is not None:
            rest["doc"] = f["doc"]
        if "default" in f:
            rest["default"] = self._default(f["default"], kind)
        order = str(f.get("order", "ascending")).lower()
        if order != "ascending":
            rest["order"] = order
        if f.get("aliases"):
            aliases = list(f["aliases"])
            rest["aliases"] = sorted(set(aliases)) if self.normalize else aliases
        rest.update(self._props(f, _FIELD_RESERVED))
        return _Field(f["name"], kind, rest)

    def _default(self, value: Any, kind: Any) -> Any:
        if not self.normalize:
            return value
        if isinstance(kind, _Complex):
            kind = kind.type
        if kind in ("float", "double") and type(value) is int:
            return float(value)
        return _sorted(value)


def _write(m: Any, space: str | None, written: set[str]) -> Any:
    if isinstance(m, str):
        return m
    if isinstance(m, list):
        return [_write(branch, space, written) for branch in m]
    if isinstance(m, _Complex):
        out: dict[str, Any] = {"type": m.type}
        if m.inner is not None:
            out[m.inner[0]] = _write(m.inner[1], space, written)
        out.update(m.props)
        return out
    assert isinstance(m, _Named)
    if m.full in written:
        return _qualified(m.full, space)
    written.add(m.full)
    out = {"type": m.kind, "name": m.full.rpartition(".")[2]}
    if m.space != space:
        out["namespace"] = m.space or ""
    if m.doc is not None:
        out["doc"] = m.doc
    for key, value in m.body:
        if key == "fields":
            value = [
                {"name": f.name, "type": _write(f.type, m.space, written), **f.rest} for f in value
            ]
        out[key] = value
    out.update(m.props)
    if m.aliases:
        out["aliases"] = [_qualified(a, m.space) for a in m.aliases]
    return out
