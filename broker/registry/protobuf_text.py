"""PROTOBUF schemas between their two forms: ``.proto`` text (what Confluent's registry keeps
and answers by default) and a ``FileDescriptorProto`` (what confluent-kafka's Python
serializer registers, base64-encoded, and what ``format=serialized`` answers).

``to_text`` prints a descriptor as proto2/proto3 text: package, imports, messages (nested
ones inside), enums, fields with their labels, maps (the descriptor's ``*Entry`` messages),
oneofs (proto3 ``optional`` fields as ``optional``, not as their synthetic oneofs); named
types fully qualified (``.pkg.Type``), file options (``FileOptions``) kept.
``to_descriptor`` parses text (proto-schema-parser)
back into a descriptor that protobuf's ``DescriptorPool`` builds: type names resolved by
protobuf's scoping rules within the file (a name it cannot resolve is taken as a message of an
imported file, qualified as written). Custom and field options, extensions, services,
reserved ranges and comments are left out of both: they do not change what a record's bytes
mean.
"""

from __future__ import annotations

import base64
import binascii

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

F = descriptor_pb2.FieldDescriptorProto
SCALAR_TYPES = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64,
    "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64,
    "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL, "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}  # fmt: skip
SCALAR_NAMES = {number: name for name, number in SCALAR_TYPES.items()}


def decode_base64(text: str) -> descriptor_pb2.FileDescriptorProto:
    """A base64 ``FileDescriptorProto``; ValueError when ``text`` is not one."""
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError) as e:
        raise ValueError(f"neither .proto text nor a FileDescriptorProto: {e}") from None


def encode_base64(fd: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.standard_b64encode(fd.SerializeToString()).decode("ascii")


# descriptor -> text -------------------------------------------------------------------------


def to_text(fd: descriptor_pb2.FileDescriptorProto) -> str:
    syntax = fd.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if fd.package:
        lines.append(f"package {fd.package};")
    for dep in fd.dependency:
        lines.append(f'import "{dep}";')
    for option, value in fd.options.ListFields():
        lines.append(f"option {option.name} = {_option_value(option, value)};")
    for e in fd.enum_type:
        lines += _enum(e, "")
    for m in fd.message_type:
        lines += _message(m, "", syntax)
    return "\n".join(lines) + "\n"


def _option_value(option, value) -> str:
    if option.enum_type is not None:
        return option.enum_type.values_by_number[value].name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def _enum(e, indent: str) -> list[str]:
    out = [f"{indent}enum {e.name} {{"]
    out += [f"{indent}  {v.name} = {v.number};" for v in e.value]
    return out + [f"{indent}}}"]


def _type_name(f) -> str:
    return SCALAR_NAMES.get(f.type) or f.type_name


def _message(m, indent: str, syntax: str) -> list[str]:
    inner = indent + "  "
    out = [f"{indent}message {m.name} {{"]
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    printed: set[int] = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index not in printed:  # the whole oneof, where its first field is
                printed.add(f.oneof_index)
                out.append(f"{inner}oneof {m.oneof_decl[f.oneof_index].name} {{")
                out += [
                    f"{inner}  {_type_name(g)} {g.name} = {g.number};"
                    for g in m.field
                    if g.HasField("oneof_index")
                    and g.oneof_index == f.oneof_index
                    and not g.proto3_optional
                ]
                out.append(f"{inner}}}")
            continue
        entry = entries.get(f.type_name.rpartition(".")[2]) if f.type == F.TYPE_MESSAGE else None
        if entry is not None and f.label == F.LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            out.append(f"{inner}map<{_type_name(key)}, {_type_name(value)}> {f.name} = {f.number};")
            continue
        label = ""
        if f.label == F.LABEL_REPEATED:
            label = "repeated "
        elif f.label == F.LABEL_REQUIRED:
            label = "required "
        elif syntax == "proto2" or f.proto3_optional:
            label = "optional "
        out.append(f"{inner}{label}{_type_name(f)} {f.name} = {f.number};")
    for e in m.enum_type:
        out += _enum(e, inner)
    for n in m.nested_type:
        if not n.options.map_entry:
            out += _message(n, inner, syntax)
    return out + [f"{indent}}}"]


# text -> descriptor -------------------------------------------------------------------------


def _set_option(options, name: str, value) -> None:
    """A file option of ``FileOptions`` (java_package, go_package, optimize_for, ...); other
    (custom) options are left out."""
    field = options.DESCRIPTOR.fields_by_name.get(name)
    if field is None:
        return
    if field.enum_type is not None:
        known = field.enum_type.values_by_name.get(getattr(value, "name", str(value)))
        if known is not None:
            setattr(options, name, known.number)
        return
    try:
        setattr(options, name, value)
    except (TypeError, ValueError):
        pass


def parse_text(text: str):
    """The proto-schema-parser AST of ``text``; ValueError on a syntax error."""
    from antlr4.error.ErrorListener import ErrorListener
    from proto_schema_parser.parser import Parser

    class Strict(ErrorListener):  # antlr's default prints syntax errors and goes on
        def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # noqa: N802
            raise ValueError(f"line {line}:{column} {msg}")

    def strict(recognizer) -> None:
        recognizer.removeErrorListeners()
        recognizer.addErrorListener(Strict())

    try:
        return Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except Exception as failure:  # the parser raises its own and antlr's errors
        raise ValueError(f"not a .proto file: {failure}") from None


def to_descriptor(text: str, name: str = "schema.proto") -> descriptor_pb2.FileDescriptorProto:
    from proto_schema_parser import ast

    parsed = parse_text(text)
    fd = descriptor_pb2.FileDescriptorProto(name=name, syntax=parsed.syntax or "proto2")
    for e in parsed.file_elements:
        if isinstance(e, ast.Package):
            fd.package = e.name
        elif isinstance(e, ast.Import):
            fd.dependency.append(e.name)
        elif isinstance(e, ast.Option):
            _set_option(fd.options, e.name, e.value)
    prefix = f"{fd.package}." if fd.package else ""
    messages: set[str] = set()
    enums: set[str] = set()

    def names(elements, scope: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                messages.add(f"{scope}{e.name}")
                names(e.elements, f"{scope}{e.name}.")
            elif isinstance(e, ast.Enum):
                enums.add(f"{scope}{e.name}")

    names(parsed.file_elements, prefix)

    def resolve(type_: str, scope: str) -> tuple[int, str]:
        if type_ in SCALAR_TYPES:
            return SCALAR_TYPES[type_], ""
        full = type_[1:] if type_.startswith(".") else None
        if full is None:
            parts = scope.rstrip(".").split(".") if scope else []
            for i in range(len(parts), -1, -1):
                candidate = ".".join([*parts[:i], type_])
                if candidate in messages or candidate in enums:
                    full = candidate
                    break
            else:
                full = type_
        kind = F.TYPE_ENUM if full in enums else F.TYPE_MESSAGE
        return kind, f".{full}"

    def enum(e, target) -> None:
        d = target.add(name=e.name)
        for v in e.elements:
            if isinstance(v, ast.EnumValue):
                d.value.add(name=v.name, number=v.number)

    def field(m, f, scope: str, syntax: str, oneof: int | None = None) -> None:
        kind, type_name = resolve(f.type, scope)
        label = F.LABEL_OPTIONAL
        card = f.cardinality.value if f.cardinality is not None else ""
        if card == "REPEATED":
            label = F.LABEL_REPEATED
        elif card == "REQUIRED":
            label = F.LABEL_REQUIRED
        d = m.field.add(name=f.name, number=f.number, label=label, type=kind)
        if type_name:
            d.type_name = type_name
        if oneof is not None:
            d.oneof_index = oneof
        elif card == "OPTIONAL" and syntax == "proto3":
            d.proto3_optional = True
            d.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{f.name}")

    def message(e, target, scope: str) -> None:
        m = target.add(name=e.name)
        own = f"{scope}{e.name}."
        synthetic = []
        for x in e.elements:
            if isinstance(x, ast.Field):
                if x.cardinality is not None and x.cardinality.value == "OPTIONAL":
                    synthetic.append(x)  # (their synthetic oneofs come after the real ones)
                    continue
                field(m, x, own, fd.syntax)
            elif isinstance(x, ast.MapField):
                entry = "".join(p[:1].upper() + p[1:] for p in x.name.split("_")) + "Entry"
                nested = m.nested_type.add(name=entry)
                nested.options.map_entry = True
                for number, (fname, ftype) in enumerate(
                    (("key", x.key_type), ("value", x.value_type)), 1
                ):
                    kind, type_name = resolve(ftype, own)
                    d = nested.field.add(
                        name=fname, number=number, label=F.LABEL_OPTIONAL, type=kind
                    )
                    if type_name:
                        d.type_name = type_name
                m.field.add(
                    name=x.name,
                    number=x.number,
                    label=F.LABEL_REPEATED,
                    type=F.TYPE_MESSAGE,
                    type_name=f".{own}{entry}",
                )
            elif isinstance(x, ast.OneOf):
                index = len(m.oneof_decl)
                m.oneof_decl.add(name=x.name)
                for inner in x.elements:
                    if isinstance(inner, ast.Field):
                        field(m, inner, own, fd.syntax, index)
            elif isinstance(x, ast.Message):
                message(x, m.nested_type, own)
            elif isinstance(x, ast.Enum):
                enum(x, m.enum_type)
        for x in synthetic:
            field(m, x, own, fd.syntax)

    for e in parsed.file_elements:
        if isinstance(e, ast.Message):
            message(e, fd.message_type, prefix)
        elif isinstance(e, ast.Enum):
            enum(e, fd.enum_type)
    return fd
