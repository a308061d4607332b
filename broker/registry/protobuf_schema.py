"""PROTOBUF schemas: ``.proto`` text (parsed by ``proto-schema-parser``) or, as
confluent-kafka's Python serializers send it, a base64 ``FileDescriptorProto`` (read by
``protobuf``), compared by Confluent's rules for the common cases.

A schema is kept as canonical ``.proto`` text, as Confluent's registry keeps it: text is
read into a descriptor and printed back, a descriptor printed (protobuf_text.py), so any
form of one schema (white space, comments, a descriptor) has one id. The model holds the
package and, per message (full name), its fields by number: name, kind (scalar, message,
enum, map), type (the scalar's name, the named type's full name, or ``map<k,v>``), label
(repeated, optional, required) and oneof.

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
    from .protobuf_text import decode_base64, to_descriptor, to_text

    given = text.strip()
    kept = to_text(decode_base64(given) if _looks_base64(given) else to_descriptor(given))
    return kept, _from_text(kept)


def _looks_base64(text: str) -> bool:
    return bool(text) and " " not in text and "\n" not in text and "{" not in text


def _from_text(text: str) -> ProtoModel:
    from proto_schema_parser import ast

    from .protobuf_text import parse_text

    parsed = parse_text(text)
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
