"""Compiles a (message class, version) pair into straight-line encode and decode functions.

How this works
--------------
For each message and version, on first use, we walk the ``MessageSpec`` tree and write Python
source for one decoder and one encoder, nested structs and arrays inlined as loops, then
``exec`` it and cache the functions on the class (``cls._decoders[version]``). The generated
code never interprets the schema at run time: it is a fixed sequence of ``struct`` calls,
varint reads and attribute stores. Consecutive fixed-width fields are read and written by one
precompiled ``struct.Struct``.

Wire rules (Kafka's): non-flexible versions use int16-length strings, int32-length bytes and
int32-count arrays, -1 meaning null; flexible versions use unsigned varints holding length + 1
(0 meaning null) and end every struct with a tagged-field section: a varint count, then
(tag, size, value) triples in ascending tag order. A nullable struct field is an int8 marker
(-1 null, 1 present) followed by the struct; as a tagged field, a varint (0 null, 1 present).

Decoders take a memoryview that ends where the message ends (so ``struct`` bounds errors
happen at the message end), check every length and count against the bytes remaining before
using it, and convert every low-level failure into ``DecodeError``. ``records`` come back as
memoryview slices of the input. Encoders append to a bytearray; a ``records`` value of at
least ``RECORDS_CHUNK_MIN`` bytes is not copied but placed in the output list as its own chunk.
A ``records`` value may also be an object that is not a buffer but has a length (a region of a
file, which the connection sends with ``os.sendfile``): it must be at least that size, and is
placed in the output list as it is.
"""

from __future__ import annotations

import struct
import uuid

from headrace.record_format import read_uvarint, uvarint_bytes

from .schema import FieldSpec, StructSpec

__all__ = ["DecodeError", "EncodeError", "get_decoder", "get_encoder", "RECORDS_CHUNK_MIN"]

RECORDS_CHUNK_MIN = 4096


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the message (truncated, bad length, bad UTF-8...)."""


class EncodeError(ValueError):
    """A message cannot be encoded at the requested version (bad value or type)."""


# Fixed-width types: struct format character and size.
_FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}
_FIXED_SIZE = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "I": 4, "d": 8, "?": 1}

_NULL16 = repr(b"\xff\xff")
_NULL32 = repr(b"\xff\xff\xff\xff")
_S_I8 = struct.Struct(">b")
_S_I16 = struct.Struct(">h")
_S_I32 = struct.Struct(">i")
_S_UUID = struct.Struct(">16s")


def _uuid_from(b: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=b)


def _unpack_array(fmt: str, n: int, buf, pos):
    return list(struct.unpack_from(f">{n}{fmt}", buf, pos))


def _pack_array(fmt: str, values) -> bytes:
    return struct.pack(f">{len(values)}{fmt}", *values)


def _records_len(v) -> int:
    t = type(v)
    if t is list or t is tuple:
        return sum(_records_len(c) for c in v)
    if t is bytes or t is bytearray:
        return len(v)
    try:
        return memoryview(v).nbytes
    except TypeError:
        return len(v)  # not a buffer: a chunk the caller writes itself (a file region)


class _Source:
    def __init__(self):
        self.lines: list[str] = []
        self.ns: dict = {
            "DecodeError": DecodeError,
            "EncodeError": EncodeError,
            "_new": object.__new__,
            "_uvr": read_uvarint,
            "_uvb": uvarint_bytes,
            "_uuid": _uuid_from,
            "_ua": _unpack_array,
            "_pa": _pack_array,
            "_rlen": _records_len,
            "_I8": _S_I8,
            "_I16": _S_I16,
            "_I32": _S_I32,
            "_UUID": _S_UUID,
            "_CHUNK": RECORDS_CHUNK_MIN,
        }
        self._n = 0
        self._consts: dict = {}

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value, prefix="_K") -> str:
        key = (
            (type(value), id(value))
            if not isinstance(value, (int, str, bytes, float))
            else (type(value), value)
        )
        name = self._consts.get(key)
        if name is None:
            name = self.var(prefix)
            self.ns[name] = value
            self._consts[key] = name
        return name

    def emit(self, indent: int, line: str):
        self.lines.append("    " * indent + line)

    def compile(self, fname: str, filename: str):
        src = "\n".join(self.lines) + "\n"
        code = compile(src, filename, "exec")
        exec(code, self.ns)
        fn = self.ns[fname]
        fn.__source__ = src
        return fn


def _struct_fmt(fmt: str) -> struct.Struct:
    return struct.Struct(">" + fmt)


def _field_flexible(f: FieldSpec, version: int, flexible: bool) -> bool:
    return flexible and (f.flexible_override is None or version in f.flexible_override)


def _present(f: FieldSpec, version: int) -> bool:
    return version in f.versions


def _is_tagged(f: FieldSpec, version: int) -> bool:
    return f.tag is not None and version in f.tagged


class _Gen:
    """What the decoder and encoder generators share: one message version and the source of
    the one function being written for it."""

    def __init__(self, spec, version: int):
        self.spec = spec
        self.v = version
        self.flex = version in spec.flexible
        self.label = f"{spec.name} v{version}"
        self.src = _Source()

    def fixed_struct(self, fields) -> tuple[str, int]:
        """The name of a precompiled Struct for these fixed-width fields, and its size."""
        fmt = "".join(_FIXED[f.type] for f in fields)
        return self.src.const(_struct_fmt(fmt), "_S"), sum(_FIXED_SIZE[c] for c in fmt)


# -- decoding ----------------------------------------------------------------------------------


class _DecoderGen(_Gen):
    def err(self, indent, msg_expr: str):
        self.src.emit(indent, f"raise DecodeError({msg_expr})")

    def read_uvarint(self, ind: int, target: str):
        e = self.src.emit
        e(ind, f"{target} = buf[pos]; pos += 1")
        e(ind, f"if {target} & 0x80: {target}, pos = _uvr(buf, pos - 1)")

    def read_length(self, ind, target, flex, wide: bool):
        """Reads a length/count into ``target``; -1 means null."""
        if flex:
            self.read_uvarint(ind, target)
            self.src.emit(ind, f"{target} -= 1")
        else:
            s = "_I32" if wide else "_I16"
            self.src.emit(ind, f"{target}, = {s}.unpack_from(buf, pos); pos += {4 if wide else 2}")

    def null_check(self, ind, f: FieldSpec, n: str, lhs: str) -> None:
        """Emits 'if n < 0: lhs = None' or an error; caller emits the else branch."""
        e = self.src.emit
        e(ind, f"if {n} < 0:")
        if self.v in f.nullable:
            e(ind + 1, f"{lhs} = None")
        else:
            self.err(ind + 1, repr(f"{self.label}: non-nullable field {f.name} is null"))

    def value(
        self, ind: int, f: FieldSpec, lhs: str, end: str, flex: bool, elem=False, tagged=False
    ):
        """Emit code decoding one value of field f (an element when elem, a tagged field's
        when tagged) into lhs."""
        e = self.src.emit
        t = f.type
        if elem or not f.is_array:
            if f.struct is not None:
                if not elem and self.v in f.nullable:
                    m = self.src.var("m")
                    e(ind, f"{m}, = _I8.unpack_from(buf, pos); pos += 1")
                    # a tagged field's marker is Kafka's varint 0 (int8 -1 also read as null)
                    e(ind, f"if {m} {'<=' if tagged else '<'} 0:")
                    e(ind + 1, f"{lhs} = None")
                    e(ind, "else:")
                    self.struct(ind + 1, f.struct, lhs, end)
                else:
                    self.struct(ind, f.struct, lhs, end)
            elif t in _FIXED:
                s, size = self.fixed_struct([f])
                e(ind, f"{lhs}, = {s}.unpack_from(buf, pos); pos += {size}")
            elif t == "uuid":
                e(ind, f"{lhs} = _uuid(_UUID.unpack_from(buf, pos)[0]); pos += 16")
            elif t in ("string", "bytes", "records"):
                n = self.src.var("n")
                self.read_length(ind, n, flex, wide=(t != "string"))
                if elem:
                    e(ind, f"if {n} < 0:")
                    self.err(ind + 1, repr(f"{self.label}: null element in {f.name}"))
                else:
                    self.null_check(ind, f, n, lhs)
                e(ind, "else:")
                x = self.src.var("x")
                e(ind + 1, f"{x} = pos + {n}")
                e(ind + 1, f"if {x} > {end}:")
                self.err(
                    ind + 2,
                    f"'{self.label}: {f.name} length %d exceeds the %d bytes left'"
                    f" % ({n}, {end} - pos)",
                )
                if t == "string":
                    e(ind + 1, f"{lhs} = str(buf[pos:{x}], 'utf-8')")
                elif t == "bytes":
                    e(ind + 1, f"{lhs} = bytes(buf[pos:{x}])")
                else:
                    e(ind + 1, f"{lhs} = buf[pos:{x}]")
                e(ind + 1, f"pos = {x}")
            else:
                raise AssertionError(t)
            return
        # arrays
        n = self.src.var("n")
        self.read_length(ind, n, flex, wide=True)
        self.null_check(ind, f, n, lhs)
        e(ind, f"elif {n} > {end} - pos:")
        self.err(
            ind + 1,
            f"'{self.label}: {f.name} count %d exceeds the %d bytes left' % ({n}, {end} - pos)",
        )
        e(ind, "else:")
        if t in _FIXED:
            fmt = _FIXED[t]
            size = _FIXED_SIZE[fmt]
            e(ind + 1, f"{lhs} = _ua({fmt!r}, {n}, buf, pos); pos += {n} * {size}")
            return
        lst = self.src.var("l")
        item = self.src.var("e")
        e(ind + 1, f"{lst} = []")
        e(ind + 1, f"for _ in range({n}):")
        self.value(ind + 2, f, item, end, flex, elem=True)
        e(ind + 2, f"{lst}.append({item})")
        e(ind + 1, f"{lhs} = {lst}")

    def default_expr(self, f: FieldSpec) -> str:
        if f.default_is_mutable():
            if f.is_array:
                return "[]"
            assert f.struct is not None  # a mutable default that is not an array is a struct
            return self.src.const(f.struct.cls, "_C") + "()"
        return self.src.const(f.default_value(), "_D") if f.default_value() is not None else "None"

    def struct(self, ind: int, spec: StructSpec, target: str, end: str):
        e = self.src.emit
        v = self.v
        cls = self.src.const(spec.cls, "_C")
        e(ind, f"{target} = _new({cls})")
        group: list[FieldSpec] = []

        def flush():
            if not group:
                return
            s, size = self.fixed_struct(group)
            lhs = ", ".join(f"{target}.{g.attr}" for g in group)
            e(ind, f"{lhs}, = {s}.unpack_from(buf, pos); pos += {size}")
            group.clear()

        tagged: list[FieldSpec] = []
        for f in spec.fields:
            if not _present(f, v):
                flush()
                e(ind, f"{target}.{f.attr} = {self.default_expr(f)}")
            elif _is_tagged(f, v):
                flush()
                e(ind, f"{target}.{f.attr} = {self.default_expr(f)}")
                tagged.append(f)
            elif not f.is_array and f.struct is None and f.type in _FIXED:
                group.append(f)
            else:
                flush()
                self.value(ind, f, f"{target}.{f.attr}", end, _field_flexible(f, v, self.flex))
        flush()
        if not self.flex:
            e(ind, f"{target}._unknown_tags = None")
            return
        self.tag_section(ind, tagged, target, end)

    def tag_section(self, ind, tagged, target, end):
        e = self.src.emit
        nt = self.src.var("t")
        e(ind, f"{target}._unknown_tags = None")
        self.read_uvarint(ind, nt)
        e(ind, f"if {nt}:")
        e(ind + 1, f"if {nt} > {end} - pos:")
        self.err(ind + 2, f"'{self.label}: tagged field count %d exceeds the bytes left' % {nt}")
        e(ind + 1, f"for _ in range({nt}):")
        i2 = ind + 2
        tag, size, te = self.src.var("g"), self.src.var("z"), self.src.var("x")
        self.read_uvarint(i2, tag)
        self.read_uvarint(i2, size)
        e(i2, f"{te} = pos + {size}")
        e(i2, f"if {te} > {end}:")
        self.err(
            i2 + 1,
            f"'{self.label}: tagged field %d size %d exceeds the bytes left' % ({tag}, {size})",
        )
        kw = "if"
        for f in sorted(tagged, key=lambda f: f.tag or 0):  # tagged fields have tags
            e(i2, f"{kw} {tag} == {f.tag}:")
            kw = "elif"
            self.value(i2 + 1, f, f"{target}.{f.attr}", te, True, tagged=True)
            e(i2 + 1, f"if pos != {te}:")
            self.err(i2 + 2, repr(f"{self.label}: tagged field {f.name} has the wrong size"))
        if tagged:
            e(i2, "else:")
            i3 = i2 + 1
        else:
            i3 = i2
        e(i3, f"if {target}._unknown_tags is None: {target}._unknown_tags = []")
        e(i3, f"{target}._unknown_tags.append(({tag}, bytes(buf[pos:{te}])))")
        e(i3, f"pos = {te}")

    def function(self):
        """The compiled ``decode(buf, pos)``."""
        e = self.src.emit
        e(0, "def decode(buf, pos):")
        e(1, "end = len(buf)")
        self.struct(1, self.spec.root, "o", "end")
        e(1, "return o, pos")
        return self.src.compile("decode", f"<decode {self.label}>")


def get_decoder(cls, version: int):
    """``decode(buf: memoryview, pos: int) -> (message, end_pos)`` for cls at version."""
    fn = cls._decoders.get(version)
    if fn is None:
        fn = cls._decoders[version] = _DecoderGen(cls._spec, version).function()
    return fn


# -- encoding ----------------------------------------------------------------------------------


class _EncoderGen(_Gen):
    def write_uvarint(self, ind, out, expr):
        e = self.src.emit
        n = self.src.var("u")
        e(ind, f"{n} = {expr}")
        e(ind, f"if {n} < 0x80: {out}.append({n})")
        e(ind, f"else: {out} += _uvb({n})")

    def write_length(self, ind, out, expr, flex, wide):
        if flex:
            self.write_uvarint(ind, out, f"{expr} + 1")
        else:
            self.src.emit(ind, f"{out} += {'_I32' if wide else '_I16'}.pack({expr})")

    def write_null(self, ind, out, flex, wide):
        if flex:
            self.src.emit(ind, f"{out}.append(0)")
        else:
            self.src.emit(ind, f"{out} += {_NULL32 if wide else _NULL16}")

    def value(
        self,
        ind,
        f: FieldSpec,
        val: str,
        out: str,
        flex: bool,
        can_split: bool,
        elem=False,
        tagged=False,
    ):
        e = self.src.emit
        t = f.type
        nullable = (not elem) and self.v in f.nullable
        if elem or not f.is_array:
            if f.struct is not None:
                if nullable:  # int8 -1, or a tagged field's varint 0 (Kafka's markers)
                    e(ind, f"if {val} is None: {out}.append({0 if tagged else 255})")
                    e(ind, "else:")
                    e(ind + 1, f"{out}.append(1)")
                    self.struct(ind + 1, f.struct, val, out, can_split)
                else:
                    self.struct(ind, f.struct, val, out, can_split)
            elif t in _FIXED:
                s, _ = self.fixed_struct([f])
                e(ind, f"{out} += {s}.pack({val})")
            elif t == "uuid":
                e(ind, f"{out} += {val}.bytes")
            elif t in ("string", "bytes", "records"):
                wide = t != "string"
                if nullable:
                    e(ind, f"if {val} is None:")
                    self.write_null(ind + 1, out, flex, wide)
                    e(ind, "else:")
                    ind += 1
                if t == "string":
                    b = self.src.var("b")
                    e(ind, f"{b} = {val}.encode('utf-8')")
                    self.write_length(ind, out, f"len({b})", flex, wide)
                    e(ind, f"{out} += {b}")
                elif t == "bytes":
                    self.write_length(ind, out, f"len({val})", flex, wide)
                    e(ind, f"{out} += {val}")
                else:
                    n = self.src.var("n")
                    e(ind, f"{n} = _rlen({val})")
                    self.write_length(ind, out, n, flex, wide)
                    lst = f"(type({val}) is list or type({val}) is tuple)"
                    if can_split:
                        e(ind, f"if {n} >= _CHUNK:")
                        e(ind + 1, f"chunks.append({out})")
                        e(ind + 1, f"if {lst}: chunks.extend({val})")
                        e(ind + 1, f"else: chunks.append({val})")
                        e(ind + 1, f"{out} = bytearray()")
                        e(ind, f"elif {lst}:")
                    else:
                        e(ind, f"if {lst}:")
                    c = self.src.var("c")
                    e(ind + 1, f"for {c} in {val}: {out} += {c}")
                    e(ind, f"else: {out} += {val}")
            else:
                raise AssertionError(t)
            return
        # arrays
        if nullable:
            e(ind, f"if {val} is None:")
            self.write_null(ind + 1, out, flex, True)
            e(ind, "else:")
            ind += 1
        self.write_length(ind, out, f"len({val})", flex, True)
        if t in _FIXED:
            e(ind, f"if {val}: {out} += _pa({_FIXED[t]!r}, {val})")
            return
        item = self.src.var("e")
        e(ind, f"for {item} in {val}:")
        self.value(ind + 1, f, item, out, flex, can_split, elem=True)

    def nondefault_expr(self, f: FieldSpec, val: str) -> str:
        d = f.default_value()
        if d is None:
            return f"{val} is not None"
        if f.is_array:
            return f"({val} is None or len({val}) > 0)"
        return f"{val} != {self.src.const(d, '_D')}"

    def struct(self, ind, spec: StructSpec, obj: str, out: str, can_split: bool):
        e = self.src.emit
        v = self.v
        group: list[FieldSpec] = []

        def flush():
            if not group:
                return
            s, _ = self.fixed_struct(group)
            e(ind, f"{out} += {s}.pack({', '.join(f'{obj}.{g.attr}' for g in group)})")
            group.clear()

        tagged = []
        for f in spec.fields:
            if not _present(f, v):
                continue
            if _is_tagged(f, v):
                tagged.append(f)
            elif not f.is_array and f.struct is None and f.type in _FIXED:
                group.append(f)
            else:
                flush()
                self.value(
                    ind, f, f"{obj}.{f.attr}", out, _field_flexible(f, v, self.flex), can_split
                )
        flush()
        if not self.flex:
            return
        unk = f"{obj}._unknown_tags"
        if not tagged:
            e(ind, f"if {unk}: _tags({out}, [], {unk})")
            e(ind, f"else: {out}.append(0)")
            self.src.ns["_tags"] = _write_tags
            return
        tl = self.src.var("tl")
        e(ind, f"{tl} = []")
        for f in sorted(tagged, key=lambda f: f.tag or 0):  # tagged fields have tags
            val = self.src.var("w")
            e(ind, f"{val} = {obj}.{f.attr}")
            e(ind, f"if {self.nondefault_expr(f, val)}:")
            tb = self.src.var("tb")
            e(ind + 1, f"{tb} = bytearray()")
            self.value(ind + 1, f, val, tb, True, False, tagged=True)
            e(ind + 1, f"{tl}.append(({f.tag}, {tb}))")
        e(ind, f"_tags({out}, {tl}, {unk})")
        self.src.ns["_tags"] = _write_tags

    def function(self):
        """The compiled ``encode(o)``."""
        e = self.src.emit
        e(0, "def encode(o):")
        e(1, "chunks = []")
        e(1, "out = bytearray()")
        self.struct(1, self.spec.root, "o", "out", True)
        e(1, "if out: chunks.append(out)")
        e(1, "return chunks")
        return self.src.compile("encode", f"<encode {self.label}>")


def _write_tags(out: bytearray, known: list, unknown) -> None:
    if unknown:
        known = sorted(known + list(unknown), key=lambda kv: kv[0])
    out += uvarint_bytes(len(known))
    for tag, data in known:
        out += uvarint_bytes(tag)
        out += uvarint_bytes(len(data))
        out += data


def get_encoder(cls, version: int):
    """``encode(message) -> list of bytes-like chunks`` for cls at version."""
    fn = cls._encoders.get(version)
    if fn is None:
        fn = cls._encoders[version] = _EncoderGen(cls._spec, version).function()
    return fn
