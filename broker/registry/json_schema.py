"""JSON schemas (JSON Schema): checked by the ``jsonschema`` library, compared by Confluent's
rules for the common cases.

A schema is kept as Confluent keeps it (``JsonSchema.canonicalString()``, Jackson's compact
JSON of what was registered): white space does not count, key order does (two orders are two
schemas, with two ids) unless ``normalize`` sorts the keys, as Confluent's does. It must be a
JSON object or a boolean that its draft's meta-schema accepts (``$schema`` names the draft;
the newest the library knows otherwise).

Compatibility (``incompatibilities(reader, writer)``): can every document valid under
``writer`` be read by a consumer expecting ``reader``? Confluent's rules, for what schemas
mostly hold (``type``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``enum`` and the numeric and length bounds), each difference named with Confluent's
``errorType``:

* a changed ``type`` is TYPE_CHANGED (integer to number is TYPE_EXTENDED: compatible);
* a property added to an open content model (``additionalProperties`` not false) is
  PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL (the writer may have sent anything under that name),
  unless its schema accepts anything; one removed from a closed model is
  PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL;
* a property newly ``required`` is REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL /
  REQUIRED_ATTRIBUTE_ADDED;
* ``additionalProperties`` turned false is ADDITIONAL_PROPERTIES_REMOVED;
* an ``enum`` losing values is ENUM_ARRAY_NARROWED; tighter ``maxLength``, ``minLength``,
  ``maximum``, ``minimum``, ``maxItems``, ``minItems`` are *_NARROWED / *_ADDED.
Everything else (``$ref`` targets, combinators, formats) is compared as equal or not only
where it holds a property's own schema.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

_NARROWING = {
    # keyword -> True when a smaller value is narrower
    "maxLength": True,
    "maximum": True,
    "exclusiveMaximum": True,
    "maxItems": True,
    "maxProperties": True,
    "minLength": False,
    "minimum": False,
    "exclusiveMinimum": False,
    "minItems": False,
    "minProperties": False,
}


def parse(text: str, references: list[str], normalize: bool) -> tuple[str, Any]:
    """(The text to keep, the schema document); ValueError with the checker's message."""
    try:
        document = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(document, dict | bool):
        raise ValueError("a JSON schema is an object or a boolean")
    for ref in references:
        try:
            json.loads(ref)
        except ValueError as e:
            raise ValueError(f"a reference is not JSON: {e}") from None
    try:
        cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
        cls.check_schema(document)
    except SchemaError as e:
        raise ValueError(e.message) from None
    kept = json.dumps(document, separators=(",", ":"), sort_keys=normalize, ensure_ascii=False)
    return kept, document


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict) or "type" not in schema:
        return set()
    t = schema["type"]
    return {t} if isinstance(t, str) else set(t)


def _open(schema: dict) -> bool:
    extra = schema.get("additionalProperties", True)
    return extra is not False and not (isinstance(extra, dict) and extra.get("not") == {})


def _accepts_anything(schema: Any) -> bool:
    return schema is True or schema == {}


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    found: list[str] = []
    _check(reader, writer, "#", found)
    return found


def _say(found: list[str], kind: str, path: str) -> None:
    found.append(f"{{errorType:'{kind}', description:'at {path}'}}")


def _check(r: Any, w: Any, path: str, found: list[str]) -> None:
    if r == w or _accepts_anything(r):
        return
    if isinstance(r, bool) or isinstance(w, bool):
        if r is False or (w is True and not _accepts_anything(r)):
            _say(found, "TYPE_NARROWED", path)
        return
    rt, wt = _types(r), _types(w)
    if rt:
        unread = {
            t for t in wt or {"any"} if t not in rt and not (t == "integer" and "number" in rt)
        }
        if unread:
            _say(found, "TYPE_NARROWED" if wt & rt else "TYPE_CHANGED", f"{path}/type")
            return
    for keyword, smaller_is_narrower in _NARROWING.items():
        if keyword not in r:
            continue
        if keyword not in w:
            _say(found, f"{_upper(keyword)}_ADDED", f"{path}/{keyword}")
        elif (r[keyword] < w[keyword]) == smaller_is_narrower and r[keyword] != w[keyword]:
            _say(found, f"{_upper(keyword)}_NARROWED", f"{path}/{keyword}")
    if "enum" in r:
        if "enum" not in w or not all(v in r["enum"] for v in w["enum"]):
            _say(found, "ENUM_ARRAY_NARROWED", f"{path}/enum")
    if "const" in r and r.get("const") != w.get("const"):
        _say(found, "TYPE_NARROWED", f"{path}/const")
    # objects
    rp, wp = r.get("properties") or {}, w.get("properties") or {}
    if rp or wp or "required" in r or "additionalProperties" in r:
        for name, schema in rp.items():
            where = f"{path}/properties/{name}"
            if name in wp:
                _check(schema, wp[name], where, found)
            elif _open(w):
                if not _accepts_anything(schema):
                    _say(found, "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where)
        for name in wp:
            if name not in rp and not _open(r):
                _say(
                    found, "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{path}/properties/{name}"
                )
        newly = set(r.get("required") or ()) - set(w.get("required") or ())
        for name in sorted(newly):
            _say(found, "REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}")
        if _open(w) and not _open(r):
            _say(found, "ADDITIONAL_PROPERTIES_REMOVED", f"{path}/additionalProperties")
        elif isinstance(r.get("additionalProperties"), dict) and isinstance(
            w.get("additionalProperties"), dict
        ):
            _check(
                r["additionalProperties"],
                w["additionalProperties"],
                f"{path}/additionalProperties",
                found,
            )
    # arrays
    if "items" in r:
        if isinstance(r["items"], dict | bool) and isinstance(w.get("items", True), dict | bool):
            _check(r["items"], w.get("items", True), f"{path}/items", found)
    # combinators and references: equal or not
    for keyword in ("oneOf", "anyOf", "allOf", "not", "$ref"):
        if keyword in r and r.get(keyword) != w.get(keyword):
            _say(found, f"{_upper(keyword.lstrip('$'))}_CHANGED", f"{path}/{keyword}")


def _upper(keyword: str) -> str:
    out = "".join(f"_{c}" if c.isupper() else c.upper() for c in keyword)
    return out.lstrip("_")
