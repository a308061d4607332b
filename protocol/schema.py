"""Apache Kafka's JSON message schemas, read and turned into message classes.

How this works
--------------
Kafka describes every request and response in a JSON file (``ProduceRequest.json``...). The
installed kafka-python wheel ships those files as package data; we read only the JSON (never
its Python code). ``load_message(name)`` reads one file on first use, strips its ``//``
comments, builds a ``MessageSpec`` tree (``StructSpec`` / ``FieldSpec``) and creates one
Python class per struct. Classes are cached, so each file is parsed at most once per process.
A class's ``__init__`` and ``__eq__`` are generated source, compiled the first time either is
called (``_compiled_on_first_use``).

Class rule: every struct of a message, nested or common, is a class attribute of the
top-level message class under its schema type name, for example
``ProduceResponse.TopicProduceResponse`` and ``ProduceResponse.PartitionProduceResponse``
(Kafka guarantees struct names are unique within one message). Field attributes are the
schema names in snake_case (``ThrottleTimeMs`` -> ``throttle_time_ms``).

Defaults follow the schema: ``default`` when given (``"null"`` gives None), else 0, 0.0,
False, "", b"", a fresh empty list, ``uuid.UUID(int=0)``, a fresh default struct instance;
``records`` fields default to None.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import keyword
import re
import threading
import uuid
from pathlib import Path
from typing import Any

# A class generated from a schema at run time: its fields and class attributes (API_KEY,
# VALID_VERSIONS, ...) are set then, so a static checker cannot know them from here. The
# classes named as ``messages.X`` are declared in messages.pyi (written by stubs.py); a class
# picked by API key and version is this.
GeneratedClass = Any

__all__ = ["VersionRange", "FieldSpec", "StructSpec", "MessageSpec", "load_message", "Struct"]

MAX_VERSION = 0x7FFF
PRIMITIVES = frozenset(
    "int8 int16 int32 int64 uint16 uint32 float64 bool string bytes uuid records".split()
)
ZERO_UUID = uuid.UUID(int=0)


class SchemaError(Exception):
    """A schema file uses something this codec does not understand."""


class VersionRange:
    """A set of versions as the schemas write them: "3+", "0-12", "5", "none"."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    @classmethod
    def parse(cls, text: str | None) -> VersionRange:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __repr__(self) -> str:
        if self.empty:
            return "none"
        return f"{self.lo}+" if self.hi == MAX_VERSION else f"{self.lo}-{self.hi}"


@functools.lru_cache(maxsize=1024)  # (the schemas' field names: about 400 different ones)
def snake_case(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


class FieldSpec:
    """One field of a struct. ``type`` is the element type for arrays."""

    __slots__ = (
        "name",
        "attr",
        "type",
        "is_array",
        "struct",
        "versions",
        "nullable",
        "tagged",
        "tag",
        "ignorable",
        "default_text",
        "flexible_override",
    )

    def __init__(self, raw: dict):
        self.name = raw["name"]
        self.attr = snake_case(self.name)
        t = raw["type"]
        self.is_array = t.startswith("[]")
        self.type = t[2:] if self.is_array else t
        self.struct: StructSpec | None = None
        self.nullable = VersionRange.parse(raw.get("nullableVersions"))
        self.tagged = VersionRange.parse(raw.get("taggedVersions"))
        # a tagged field without "versions" is present in its tagged versions (as Kafka reads it)
        self.versions = VersionRange.parse(raw.get("versions", raw.get("taggedVersions")))
        self.tag = raw.get("tag")
        self.ignorable = bool(raw.get("ignorable", False))
        self.default_text = raw.get("default")
        fo = raw.get("flexibleVersions")
        self.flexible_override = VersionRange.parse(fo) if fo is not None else None
        if self.tag is not None and self.tagged.empty:
            raise SchemaError(f"field {self.name} has a tag but no taggedVersions")

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def default_is_null(self) -> bool:
        return self.default_text == "null"

    def default_value(self):
        """The default as a value (a new object each call for lists and structs)."""
        d = self.default_text
        if d is not None and not isinstance(d, str):
            d = str(d)
        if self.is_array:
            return None if d == "null" else []
        if self.struct is not None:
            return None if d == "null" else self.struct.cls()
        t = self.type
        if d == "null":
            return None
        if t == "records":
            return None
        if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
            return int(d, 0) if d not in (None, "") else 0
        if t == "float64":
            return float(d) if d not in (None, "") else 0.0
        if t == "bool":
            return str(d).lower() == "true" if d is not None else False
        if t == "string":
            return d if d is not None else ""
        if t == "bytes":
            return b""
        if t == "uuid":
            return uuid.UUID(d) if d else ZERO_UUID
        raise SchemaError(f"no default for type {t}")

    def default_is_mutable(self) -> bool:
        return (self.is_array or self.struct is not None) and self.default_text != "null"

    def __repr__(self) -> str:
        return (
            f"FieldSpec({self.name}: {'[]' if self.is_array else ''}{self.type} v{self.versions})"
        )


class StructSpec:
    __slots__ = ("name", "fields", "versions", "cls")

    def __init__(self, name: str, fields: list[FieldSpec], versions: VersionRange):
        self.name, self.fields, self.versions = name, fields, versions
        self.cls: GeneratedClass = None  # built by load_message


class MessageSpec:
    __slots__ = ("name", "api_key", "kind", "valid", "flexible", "root", "structs")

    def __init__(self, raw: dict):
        self.name = raw["name"]
        self.api_key = raw.get("apiKey")
        self.kind = raw["type"]
        self.valid = VersionRange.parse(raw["validVersions"])
        self.flexible = VersionRange.parse(raw.get("flexibleVersions"))
        self.structs: dict[str, StructSpec] = {}
        pending: list[FieldSpec] = []
        for common in raw.get("commonStructs", ()):
            self._struct(common["name"], common["fields"], common.get("versions", "0+"), pending)
        self.root = self._struct(self.name, raw["fields"], "0+", pending, register=False)
        for f in pending:
            try:
                f.struct = self.structs[f.type]
            except KeyError:
                raise SchemaError(f"{self.name}: unknown type {f.type}") from None

    def _struct(self, name, raw_fields, versions, pending, register=True) -> StructSpec:
        fields = []
        for rf in raw_fields:
            f = FieldSpec(rf)
            if f.type not in PRIMITIVES:
                if "fields" in rf:
                    f.struct = self._struct(f.type, rf["fields"], rf.get("versions", "0+"), pending)
                else:
                    pending.append(f)
            fields.append(f)
        spec = StructSpec(name, fields, VersionRange.parse(versions))
        if register:
            if name in self.structs:
                raise SchemaError(f"{self.name}: struct {name} defined twice")
            self.structs[name] = spec
        return spec


# -- reading the JSON files -------------------------------------------------------------------

_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')


def _strip_comments(text: str) -> str:
    """``text`` without its ``//`` comments: whole lines (most of them) dropped, the rest cut
    where the comment starts (not inside a string: an ``about`` may hold a URL)."""
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("//"):
            continue
        if "//" in line:
            line = _COMMENT_OR_STRING.sub(_keep_strings, line)
        lines.append(line)
    return "\n".join(lines)


def _keep_strings(m: re.Match) -> str:
    return m.group(0) if m.group(0)[0] == '"' else ""


_dir = None


def _resource_dir() -> Path:
    """The schema folder inside the installed kafka-python, found without importing it."""
    global _dir
    if _dir is None:
        spec = importlib.util.find_spec("kafka")
        if spec is None or not spec.submodule_search_locations:
            raise SchemaError("kafka-python (which ships Kafka's JSON schemas) is not installed")
        _dir = Path(list(spec.submodule_search_locations)[0]) / "protocol" / "schemas" / "resources"
    return _dir


# Apache Kafka's schemas of messages the shipped ones lack or hold in older versions (KIP-848's
# ConsumerGroupHeartbeat, Kafka 4.4's share and streams groups, newer versions of ApiVersions,
# TxnOffsetCommit...), in the same JSON form: a file here wins over a shipped one of the same
# name.
_OWN_DIR = Path(__file__).parent / "schemas"


def read_schema_json(name: str) -> dict:
    """The parsed JSON of ``{name}.json``; raises KeyError when there is no such file."""
    for folder in (_OWN_DIR, _resource_dir()):
        try:
            text = (folder / f"{name}.json").read_text(encoding="utf-8")
        except (FileNotFoundError, OSError):
            continue
        return json.loads(_strip_comments(text))
    raise KeyError(name)


def schema_names() -> list[str]:
    """Names of all schema files (shipped and our own, without ``.json``)."""
    names = {p.name[:-5] for p in _resource_dir().iterdir() if p.name.endswith(".json")}
    if _OWN_DIR.is_dir():
        names |= {p.name[:-5] for p in _OWN_DIR.iterdir() if p.name.endswith(".json")}
    return sorted(names)


# -- classes -----------------------------------------------------------------------------------


class Struct:
    """Base of every generated message and struct class."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    # a slot of every generated class: (tag, bytes) of the tagged fields the decoder met that
    # the schema does not define, else None
    _unknown_tags: list[tuple[int, bytes]] | None
    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as for a list

    def __repr__(self) -> str:
        parts = []
        for name in self._fields:
            v = getattr(self, name)
            if isinstance(v, memoryview):
                v = f"<{v.nbytes} bytes>"
            elif isinstance(v, (bytes, bytearray)) and len(v) > 64:
                v = f"<{len(v)} bytes>"
            else:
                v = repr(v)
            parts.append(f"{name}={v}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def _asdict(self) -> dict:
        return {name: getattr(self, name) for name in self._fields}


_MISSING = object()


def _struct_maker(spec: StructSpec):
    """Makes a ``spec`` struct with its defaults (``spec.cls`` is looked up on the call: the
    class may be built after the one that holds it)."""
    return lambda: spec.cls()


def _methods(spec: StructSpec) -> dict:
    """``__init__`` (keyword-only, every field with its default) and ``__eq__`` of ``spec``'s
    class, compiled from generated source: as fast as hand-written ones."""
    fields = spec.fields
    names = [f.attr for f in fields]
    ns: dict = {"_MISSING": _MISSING}
    params, body = [], []
    for i, f in enumerate(fields):
        if f.default_is_mutable():
            # a new object each time: an empty list, or the struct with its defaults
            ns[f"_F{i}"] = list if f.is_array or f.struct is None else _struct_maker(f.struct)
            params.append(f"{f.attr}=_MISSING")
            body.append(f"    self.{f.attr} = _F{i}() if {f.attr} is _MISSING else {f.attr}")
        else:
            ns[f"_D{i}"] = f.default_value()
            params.append(f"{f.attr}=_D{i}")
            body.append(f"    self.{f.attr} = {f.attr}")
    body.append("    self._unknown_tags = None")
    src = [f"def __init__(self{', *, ' if params else ''}{', '.join(params)}):", *body]
    cmp = " and ".join(f"self.{n} == other.{n}" for n in names) or "True"
    src += [
        "def __eq__(self, other):",
        "    if other.__class__ is not self.__class__:",
        "        return NotImplemented",
        f"    return {cmp}",
    ]
    exec("\n".join(src), ns)
    return {"__init__": ns["__init__"], "__eq__": ns["__eq__"]}


def _compiled_on_first_use(spec: StructSpec):
    """Stand-ins for ``__init__`` and ``__eq__`` that put the compiled ones (``_methods``) in
    the class on the first call, then make it. Compiling them was about half of what loading a
    message cost, and a process uses few of the structs it loads (a broker's start-up loads
    some 270 and makes a handful before its first request)."""

    def compile_methods():
        with _lock:
            for name, method in _methods(spec).items():
                setattr(spec.cls, name, method)

    def __init__(self, **fields):
        compile_methods()
        spec.cls.__init__(self, **fields)

    def __eq__(self, other):
        compile_methods()
        return spec.cls.__eq__(self, other)

    return __init__, __eq__


def _make_class(spec: StructSpec, qualname: str, module: str):
    names = [f.attr for f in spec.fields]
    init, eq = _compiled_on_first_use(spec)
    return type(
        spec.name,
        (Struct,),
        {
            "__slots__": (*names, "_unknown_tags"),
            "_fields": tuple(names),
            "__init__": init,
            "__eq__": eq,
            "__module__": module,
            "__qualname__": qualname,
            "__doc__": f"Kafka struct {qualname}: fields {', '.join(names) or '(none)'}.",
        },
    )


_lock = threading.RLock()
_messages: dict[str, GeneratedClass] = {}


def load_message(name: str) -> GeneratedClass:
    """The class for schema ``name`` (e.g. "FetchResponse"), built on first use."""
    cls = _messages.get(name)
    if cls is not None:
        return cls
    with _lock:
        cls = _messages.get(name)
        if cls is not None:
            return cls
        spec = MessageSpec(read_schema_json(name))
        module = "headrace.protocol.messages"
        # Build leaf structs first so that struct defaults can construct them.
        order: list[StructSpec] = []
        seen: set[int] = set()

        def visit(s: StructSpec):
            if id(s) in seen:
                return
            seen.add(id(s))
            for f in s.fields:
                if f.struct is not None:
                    visit(f.struct)
            order.append(s)

        visit(spec.root)
        for s in spec.structs.values():
            visit(s)
        for s in order:
            qual = spec.name if s is spec.root else f"{spec.name}.{s.name}"
            s.cls = _make_class(s, qual, module)
        cls = spec.root.cls
        for s in spec.structs.values():
            setattr(cls, s.name, s.cls)
        cls._spec = spec
        cls.API_KEY = spec.api_key
        cls.KIND = spec.kind
        cls.VALID_VERSIONS = (spec.valid.lo, spec.valid.hi)
        cls._decoders = {}
        cls._encoders = {}
        _messages[name] = cls
        return cls
