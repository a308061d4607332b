"""Builds message instances with non-default values in every field present at a version."""

from __future__ import annotations

import random
import uuid

from headrace.protocol.schema import FieldSpec, StructSpec, load_message, schema_names

_INT_RANGES = {
    "int8": (-128, 127), "int16": (-32768, 32767), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint16": (0, 65535), "uint32": (0, 2**32 - 1),
}


def all_message_versions():
    """(schema name, version) for every message schema and valid version."""
    out = []
    for name in schema_names():
        if name in ("RequestHeader", "ResponseHeader"):
            continue
        cls = load_message(name)
        lo, hi = cls.VALID_VERSIONS
        out.extend((name, v) for v in range(lo, hi + 1))
    return out


def _scalar(f: FieldSpec, rng: random.Random, default):
    t = f.type
    while True:
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            v = rng.choice([lo, hi, rng.randint(lo, hi), 1, -1 if lo < 0 else 2])
        elif t == "float64":
            v = rng.choice([0.5, -1.25, 1e300, rng.random()])
        elif t == "bool":
            v = not default
        elif t == "string":
            v = rng.choice(["topic-a", "é€😀", "x" * rng.randint(1, 300), "t"])
        elif t == "bytes":
            v = rng.randbytes(rng.choice([1, 7, 200]))
        elif t == "records":
            v = rng.randbytes(rng.choice([1, 61, 5000]))
        elif t == "uuid":
            v = uuid.UUID(int=rng.getrandbits(128) | 1)
        else:
            raise AssertionError(t)
        if v != default:
            return v


def build_struct(spec: StructSpec, version: int, rng: random.Random, depth: int = 0):
    kw = {}
    for f in spec.fields:
        if version not in f.versions:
            continue
        kw[f.attr] = field_value(f, version, rng, depth)
    return spec.cls(**kw)


def field_value(f: FieldSpec, version: int, rng: random.Random, depth: int):
    default = f.default_value()
    nullable = version in f.nullable
    if nullable and default is not None and rng.random() < 0.25:
        return None
    if f.is_array:
        n = rng.randint(1, 2 if depth < 2 else 1)
        if f.struct is not None:
            return [build_struct(f.struct, version, rng, depth + 1) for _ in range(n)]
        return [_scalar(f, rng, None) for _ in range(n)]
    if f.struct is not None:
        return build_struct(f.struct, version, rng, depth + 1)
    return _scalar(f, rng, default)


def build_message(name: str, version: int, seed: int = 0):
    cls = load_message(name)
    return build_struct(cls._spec.root, version, random.Random(f"{name}:{version}:{seed}"))
