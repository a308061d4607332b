"""Schema GUIDs as Confluent's Schema Registry 8.x gives them: a UUID whose 16 bytes are the
MD5 digest of a schema as stored (``Schema.updateHash`` in Confluent's client entities).

Bytes digested, in this order (strings as UTF-8, a lone surrogate as ``?`` as Java encodes it;
absent parts add nothing):

1. the schema text;
2. per reference, in the schema's order: name, subject, version (int32 big-endian);
3. with metadata: byte 0x01, then per tag (keys sorted) the key and its values (sorted), per
   property (keys sorted) the key and the value, then each ``sensitive`` name (sorted);
4. with a rule set: byte 0x01, then each rule of ``migrationRules``, ``domainRules``,
   ``encodingRules`` in their order: name, doc, kind, mode, type, tags (sorted), params
   (keys sorted: key, value), expr, onSuccess, onFailure, and byte 0x01 when disabled.

Sorting is Java's ``String`` order (UTF-16 code units). The schema type is not digested. A
GUID is written as a UUID (lowercase, dashes); ``parse`` also takes the 32 hex digits
Confluent's ``MD5.fromString`` takes.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from typing import Any

_PHASES = ("migrationRules", "domainRules", "encodingRules")
_RULE_TEXTS_BEFORE_TAGS = ("name", "doc", "kind", "mode", "type")
_RULE_TEXTS_AFTER_PARAMS = ("expr", "onSuccess", "onFailure")
_PRESENT = b"\x01"


def _java_order(strings: Iterable[str]) -> list[str]:
    return sorted(strings, key=lambda s: s.encode("utf-16-be", "surrogatepass"))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


def of(
    text: str,
    references: Iterable[tuple[str, str, int]],
    metadata: str | None,
    rule_set: str | None,
) -> str:
    """The GUID of a schema: its text, references (name, subject, version), and metadata and
    rule set as kept (JSON text, contracts.kept; None for none)."""
    md5 = hashlib.md5(_utf8(text))
    for name, subject, version in references:
        md5.update(_utf8(name))
        md5.update(_utf8(subject))
        md5.update(version.to_bytes(4, "big", signed=True))
    if metadata is not None:
        md5.update(_PRESENT)
        _metadata(md5, json.loads(metadata))
    if rule_set is not None:
        md5.update(_PRESENT)
        for phase in _PHASES:
            for rule in json.loads(rule_set).get(phase, ()):
                _rule(md5, rule)
    return str(uuid.UUID(bytes=md5.digest()))


def _metadata(md5: Any, document: dict) -> None:
    tags = document.get("tags", {})
    for key in _java_order(tags):
        md5.update(_utf8(key))
        for value in _java_order(tags[key]):
            md5.update(_utf8(value))
    properties = document.get("properties", {})
    for key in _java_order(properties):
        md5.update(_utf8(key))
        md5.update(_utf8(properties[key]))
    for name in _java_order(document.get("sensitive", ())):
        md5.update(_utf8(name))


def _rule(md5: Any, rule: dict) -> None:
    for key in _RULE_TEXTS_BEFORE_TAGS:
        if rule.get(key) is not None:
            md5.update(_utf8(rule[key]))
    for tag in _java_order(rule.get("tags", ())):
        md5.update(_utf8(tag))
    params = rule.get("params", {})
    for key in _java_order(params):
        md5.update(_utf8(key))
        md5.update(_utf8(params[key]))
    for key in _RULE_TEXTS_AFTER_PARAMS:
        if rule.get(key) is not None:
            md5.update(_utf8(rule[key]))
    if rule.get("disabled") is True:
        md5.update(_PRESENT)


def parse(text: str) -> str | None:
    """``text`` as a GUID in its written form, None when it is not one: a UUID in the
    8-4-4-4-12 form or 32 hex digits, any case."""
    if len(text) == 36 and all(text[i] == "-" for i in (8, 13, 18, 23)):
        digits = text.replace("-", "")
    elif len(text) == 32:
        digits = text
    else:
        return None
    if len(digits) != 32 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    return str(uuid.UUID(hex=digits))
