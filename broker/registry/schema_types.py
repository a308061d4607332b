"""The schema types (AVRO, JSON, PROTOBUF): parsing a registered text, and whether one schema
can follow others under a compatibility level.

Each type's module has ``parse(text, references, normalize) -> (kept text, model)`` (a
ValueError says why a text is not a schema of its type) and ``incompatibilities(reader,
writer) -> [message]``. Their libraries (fastavro, jsonschema, proto-schema-parser,
protobuf) are imported with the module, when the registry first parses a schema of that type.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

TYPES = ("JSON", "PROTOBUF", "AVRO")  # as GET /schemas/types lists them
_MODULES = {"AVRO": "avro_schema", "JSON": "json_schema", "PROTOBUF": "protobuf_schema"}

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    schema_type: str
    text: str  # as kept, and compared: two registrations of one text share an id
    model: Any


def _module(schema_type: str):
    return importlib.import_module(f"{__package__}.{_MODULES[schema_type]}")


def parse(schema_type: str, text: str, references: list[str], normalize: bool) -> ParsedSchema:
    """``text`` as a schema of ``schema_type`` (one of TYPES), ``references`` the texts of the
    schemas it refers to; ValueError says why it is not one."""
    try:
        kept, model = _module(schema_type).parse(text, references, normalize)
    except RecursionError:  # (a document nested thousands deep)
        raise ValueError("nested too deep") from None
    return ParsedSchema(schema_type, kept, model)


def incompatibilities(level: str, new: ParsedSchema, olds: list[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``olds`` (the subject's live versions, oldest first) under
    ``level``; empty when it may. BACKWARD: ``new`` reads what the latest wrote; FORWARD: the
    latest reads what ``new`` writes; FULL: both; _TRANSITIVE: against every version."""
    if level == "NONE" or not olds:
        return []
    against = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    base = level.removesuffix("_TRANSITIVE")
    found: list[str] = []
    for old in reversed(against):
        if old.schema_type != new.schema_type:
            found.append(
                f"{{errorType:'TYPE_MISMATCH', description:'Incompatible schema type:"
                f" {new.schema_type} is not {old.schema_type}'}}"
            )
            continue
        check = _module(new.schema_type).incompatibilities
        try:
            if base in ("BACKWARD", "FULL"):
                found += check(new.model, old.model)
            if base in ("FORWARD", "FULL"):
                found += check(old.model, new.model)
        except RecursionError:
            found.append("{errorType:'TOO_DEEP', description:'nested too deep to compare'}")
    return found
