"""The error codes a response carries: every non-zero ``...ErrorCode`` field, at any depth.

``response_error_codes(api_key, version, response)`` runs a function made once per API and
version from the schema (and cached) that visits only the fields leading to an error field, in
nested loops, so a Fetch response's records are never looked at: the cost is one step per
topic, partition or group.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from .api import response_class
from .schema import StructSpec


def response_error_codes(api_key: int, version: int, response: Any) -> list[int]:
    """The non-zero error codes in ``response`` (a response message of ``api_key``)."""
    found: list[int] = []
    _walker(api_key, version)(response, found)
    return found


@cache
def _walker(api_key: int, version: int) -> Callable[[Any, list[int]], None]:
    """A function ``(response, found)`` appending the response's non-zero error codes."""
    lines = ["def walk(v0, found):"]
    _emit(response_class(api_key)._spec.root, version, "v0", 1, lines, frozenset())
    if len(lines) == 1:
        lines.append("    pass")
    ns: dict = {}
    exec(compile("\n".join(lines) + "\n", f"<error codes {api_key} v{version}>", "exec"), ns)
    return ns["walk"]


def _emit(spec: StructSpec, version: int, var: str, depth: int, lines: list[str], seen) -> bool:
    """Append to ``lines`` the statements that collect the error codes of ``var`` (a ``spec``
    struct); False when none of its fields leads to an error code (nothing appended)."""
    if id(spec) in seen:
        return False
    seen = seen | {id(spec)}
    pad, start = "    " * depth, len(lines)
    for f in spec.fields:
        if version not in f.versions:
            continue
        if f.type == "int16" and not f.is_array and f.name.endswith("ErrorCode"):
            lines += [f"{pad}if {var}.{f.attr}:", f"{pad}    found.append({var}.{f.attr})"]
        elif f.struct is not None:
            child, mark = f"v{depth}", len(lines)
            if f.is_array:
                lines.append(f"{pad}for {child} in {var}.{f.attr} or ():")
            else:
                lines += [f"{pad}{child} = {var}.{f.attr}", f"{pad}if {child} is not None:"]
            if not _emit(f.struct, version, child, depth + 1, lines, seen):
                del lines[mark:]
    return len(lines) > start
