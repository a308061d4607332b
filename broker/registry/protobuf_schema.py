"""PROTOBUF schemas: ``.proto`` text (parsed by ``proto-schema-parser``) or, as
confluent-kafka's Python serializers send it, a base64 ``FileDescriptorProto`` (read by
``protobuf``); both become one model, compared by Confluent's rules for the common cases.

A schema is kept as registered. The model holds the package and, per message (full name),
its fields by number: name, kind (scalar, message, enum, map), type (the scalar's name, the
named type's full name, or ``map<k,v>``), label (repeated, optional, required) and oneof.

Compatibility (``incompatibilities(reader, writer)``), fields matched by number as the wire
matches them, each difference named with Confluent's ``errorType``: PACKAGE_CHANGED,
MESSAGE_REMOVED (a message of the writer the reader lacks), FIELD_KIND_CHANGED (scalar,
message, enum or map changed into another), FIELD_SCALAR_KIND_CHANGED (outside the groups
the wire reads alike: int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32,
fixed64/sfixed64, string/bytes), FIELD_NAMED_TYPE_CHANGED, REQUIRED_FIELD_ADDED and
REQUIRED_FIELD_REMOVED (proto2), ONEOF_FIELD_REMOVED. Adding and removing optional fields,
and renaming or renumbering them (a removal and an addition), are compatible.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

SCALARS = {
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string",
    "bytes", "uint32", "sfixed32", "sfixed64", "sint32", "sint64",
}  # fmt: skip
_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]
# FieldDescriptorProto.Type -> scalar name (11 message, 14 enum, 10 group)
_DESCRIPTOR_TYPES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
    8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
    17: "sint32", 18: "sint64",
}  # fmt: skip
_LABELS = {1: "optional", 2: "required", 3: "repeated"}


@dataclass(frozen=True, slots=True)
class ProtoField:
    name: str
    kind: str  # scalar, message, enum, map
    type: str
    label: str = ""
    oneof: str = ""


@dataclass(slots=True)
class ProtoModel:
    package: str = ""
    messages: dict[str, dict[int, ProtoField]] = field(default_factory=dict)
    enums: set[str] = field(default_factory=set)


def parse(text: str, references: list[str], normalize: bool) -> tuple[str, ProtoModel]:
    """(The text to keep, the model); ValueError with the parser's message."""
    stripped = text.strip()
    if _looks_base64(stripped):
        return stripped, _from_descriptor(stripped)
    return stripped, _from_text(stripped)


def _looks_base64(text: str) -> bool:
    return bool(text) and " " not in text and "\n" not in text and "{" not in text


# .proto text ------------------------------------------------------------------------------


def _from_text(text: str) -> ProtoModel:
    from antlr4.error.ErrorListener import ErrorListener
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    class Strict(ErrorListener):  # antlr's default prints syntax errors and goes on
        def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # noqa: N802
            raise ValueError(f"line {line}:{column} {msg}")

    def strict(recognizer) -> None:
        recognizer.removeErrorListeners()
        recognizer.addErrorListener(Strict())

    try:
        parsed = Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except Exception as failure:  # the parser raises its own and antlr's errors
        raise ValueError(f"not a .proto file: {failure}") from None
    if not any(isinstance(e, ast.Message | ast.Enum) for e in parsed.file_elements):
        raise ValueError("a .proto file with neither a message nor an enum")
    model = ProtoModel()
    for element in parsed.file_elements:
        if isinstance(element, ast.Package):
            model.package = element.name
    prefix = f"{model.package}." if model.package else ""
    raw: dict[str, list] = {}

    def collect(elements, scope: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                name = f"{scope}{e.name}"
                raw[name] = e.elements
                collect(e.elements, f"{name}.")
            elif isinstance(e, ast.Enum):
                model.enums.add(f"{scope}{e.name}")

    collect(parsed.file_elements, prefix)
    for name, elements in raw.items():
        fields: dict[int, ProtoField] = {}
        for e, oneof in _fields(elements):
            if isinstance(e, ast.MapField):
                value = _resolve(e.value_type, name, raw, model)
                fields[e.number] = ProtoField(e.name, "map", f"map<{e.key_type},{value[1]}>")
            else:
                kind, type_ = _resolve(e.type, name, raw, model)
                label = e.cardinality.value.lower() if e.cardinality is not None else ""
                fields[e.number] = ProtoField(e.name, kind, type_, label, oneof)
        model.messages[name] = fields
    return model


def _fields(elements):
    from proto_schema_parser import ast

    for e in elements:
        if isinstance(e, ast.Field | ast.MapField):
            yield e, ""
        elif isinstance(e, ast.OneOf):
            for inner in e.elements:
                if isinstance(inner, ast.Field):
                    yield inner, e.name


def _resolve(type_: str, scope: str, messages: dict, model: ProtoModel) -> tuple[str, str]:
    """(kind, full name) of a type as written inside message ``scope``."""
    if type_ in SCALARS:
        return "scalar", type_
    if type_.startswith("."):
        full = type_[1:]
    else:
        full = type_
        parts = scope.split(".")
        for i in range(len(parts), -1, -1):
            candidate = ".".join([*parts[:i], type_])
            if candidate in messages or candidate in model.enums:
                full = candidate
                break
    return ("enum" if full in model.enums else "message"), full


# FileDescriptorProto ----------------------------------------------------------------------


def _from_descriptor(text: str) -> ProtoModel:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        raw = base64.b64decode(text, validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError) as e:
        raise ValueError(f"neither .proto text nor a FileDescriptorProto: {e}") from None
    if not fd.message_type and not fd.enum_type:
        raise ValueError("a FileDescriptorProto with neither a message nor an enum")
    model = ProtoModel(package=fd.package)
    prefix = f"{fd.package}." if fd.package else ""
    maps: dict[str, str] = {}
    all_messages: dict[str, object] = {}

    def collect(messages, enums, scope: str) -> None:
        for e in enums:
            model.enums.add(f"{scope}{e.name}")
        for m in messages:
            name = f"{scope}{m.name}"
            if m.options.map_entry:
                key, value = m.field[0], m.field[1]
                maps[name] = f"map<{_type_of(key)[1]},{_type_of(value)[1]}>"
            else:
                all_messages[name] = m
            collect(m.nested_type, m.enum_type, f"{name}.")

    collect(fd.message_type, fd.enum_type, prefix)
    for name, m in all_messages.items():
        fields: dict[int, ProtoField] = {}
        oneofs = [o.name for o in m.oneof_decl]  # type: ignore[attr-defined]
        for f in m.field:  # type: ignore[attr-defined]
            kind, type_ = _type_of(f)
            label = _LABELS.get(f.label, "")
            oneof = ""
            if f.HasField("oneof_index") and not f.proto3_optional:
                oneof = oneofs[f.oneof_index]
            if kind == "message" and type_ in maps:
                fields[f.number] = ProtoField(f.name, "map", maps[type_])
                continue
            if fd.syntax == "proto3" and label == "optional" and not f.proto3_optional:
                label = ""
            fields[f.number] = ProtoField(f.name, kind, type_, label, oneof)
        model.messages[name] = fields
    return model


def _type_of(f) -> tuple[str, str]:
    if f.type in _DESCRIPTOR_TYPES:
        return "scalar", _DESCRIPTOR_TYPES[f.type]
    return ("enum" if f.type == 14 else "message"), f.type_name.lstrip(".")


# compatibility ----------------------------------------------------------------------------


def _same_group(a: str, b: str) -> bool:
    return a == b or any(a in g and b in g for g in _GROUPS)


def incompatibilities(reader: ProtoModel, writer: ProtoModel) -> list[str]:
    found: list[str] = []

    def say(kind: str, where: str) -> None:
        found.append(f"{{errorType:'{kind}', description:'at {where}'}}")

    if reader.package != writer.package:
        say("PACKAGE_CHANGED", "#/")
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            say("MESSAGE_REMOVED", f"#/{name}")
            continue
        for number, w in wfields.items():
            where = f"#/{name}/{number}"
            r = rfields.get(number)
            if r is None:
                if w.label == "required":
                    say("REQUIRED_FIELD_REMOVED", where)
                if w.oneof:
                    say("ONEOF_FIELD_REMOVED", where)
                continue
            if r.kind != w.kind:
                say("FIELD_KIND_CHANGED", where)
            elif r.kind == "scalar" and not _same_group(r.type, w.type):
                say("FIELD_SCALAR_KIND_CHANGED", where)
            elif r.kind != "scalar" and r.type != w.type:
                say("FIELD_NAMED_TYPE_CHANGED", where)
            if (r.label == "repeated") != (w.label == "repeated") and r.kind != "map":
                say("FIELD_KIND_CHANGED", where)
            if w.oneof and not r.oneof:
                say("ONEOF_FIELD_REMOVED", where)
        for number, r in rfields.items():
            if number not in wfields and r.label == "required":
                say("REQUIRED_FIELD_ADDED", f"#/{name}/{number}")
    return found
