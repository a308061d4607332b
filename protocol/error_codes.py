"""The error codes a response carries: every non-zero ``...ErrorCode`` field, at any depth.

``response_error_codes(api_key, version, response)`` walks only the fields that lead to an
error field (a plan per API and version, made from the schema once and cached), so a Fetch
response's records are never looked at: the cost is one step per topic, partition or group.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from .api import response_class
from .schema import StructSpec

# (error field attributes, (child attribute, is array, child plan), ...)
_Plan = tuple[tuple[str, ...], tuple[tuple[str, bool, Any], ...]]


def response_error_codes(api_key: int, version: int, response: Any) -> list[int]:
    """The non-zero error codes in ``response`` (a response message of ``api_key``)."""
    plan = _plan_for(api_key, version)
    found: list[int] = []
    if plan is not None:
        _walk(plan, response, found)
    return found


@cache
def _plan_for(api_key: int, version: int) -> _Plan | None:
    return _plan(response_class(api_key)._spec.root, version, frozenset())


def _plan(spec: StructSpec, version: int, seen: frozenset[int]) -> _Plan | None:
    if id(spec) in seen:
        return None
    errors, children = [], []
    for f in spec.fields:
        if version not in f.versions:
            continue
        if f.type == "int16" and not f.is_array and f.name.endswith("ErrorCode"):
            errors.append(f.attr)
        elif f.struct is not None:
            child = _plan(f.struct, version, seen | {id(spec)})
            if child is not None:
                children.append((f.attr, f.is_array, child))
    if not errors and not children:
        return None
    return tuple(errors), tuple(children)


def _walk(plan: _Plan, value: Any, found: list[int]) -> None:
    errors, children = plan
    for attr in errors:
        code = getattr(value, attr, 0)
        if code:
            found.append(code)
    for attr, is_array, child in children:
        item = getattr(value, attr, None)
        if item is None:
            continue
        if is_array:
            for element in item:
                _walk(child, element, found)
        else:
            _walk(child, item, found)
