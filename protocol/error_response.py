"""An error response for any request: what a broker answers when handling it failed.

``error_response(api_key, version, request, error_code)`` builds the response message a
client can match to its request, as Kafka's ``AbstractRequest.getErrorResponse`` does one
API at a time, but from the schemas alone:

How this works
--------------
Starting at the two root structs (request and response, fields present at ``version`` only):

* every error field of the response (``int16`` named ``ErrorCode`` or ``...ErrorCode``) gets
  ``error_code``; messages stay empty (as Kafka, an unexpected error's text is not sent);
* a response array of structs that holds an error field somewhere gets one element per
  element of the first request array that matches it: an array of structs sharing a key field
  with it (the same name, or another name for the topic or the partition: ``Name``,
  ``Topic``, ``TopicName``; ``PartitionIndex``, ``Partition``, ``Index``), or an array of
  partition numbers or of strings (for the element's partition field, or its first string
  field that is not a message). Key fields are copied, and the elements are filled the same
  way, level by level (a Produce's topics, then their partitions);
* everything else keeps the schema's default.

So a Produce gets every topic and partition it sent back with the error, a DescribeGroups
every group, a JoinGroup its top-level error. A response array with no matching request
array (a DescribeLogDirs' directories) stays empty.
"""

from __future__ import annotations

from typing import Any

from .api import response_class
from .schema import FieldSpec, StructSpec

_ALIASES = (
    frozenset({"name", "topic", "topic_name"}),
    frozenset({"partition_index", "partition", "index", "partition_id"}),
)
_PARTITION = _ALIASES[1]


def error_response(api_key: int, version: int, request: Any, error_code: int) -> Any:
    """The response to ``request`` (a decoded request message of ``api_key`` at ``version``)
    that reports ``error_code`` wherever the response has room for it."""
    cls = response_class(api_key)
    response = cls()
    req_fields = _present(type(request)._spec.root, version)
    _fill(req_fields, request, cls._spec.root, response, version, error_code)
    return response


def _present(spec: StructSpec, version: int) -> list[FieldSpec]:
    return [f for f in spec.fields if version in f.versions]


def _is_error(f: FieldSpec) -> bool:
    return f.type == "int16" and not f.is_array and f.name.endswith("ErrorCode")


def _has_error(spec: StructSpec, version: int, seen: frozenset[int] = frozenset()) -> bool:
    if id(spec) in seen:
        return False
    for f in _present(spec, version):
        if _is_error(f):
            return True
        if f.struct is not None and _has_error(f.struct, version, seen | {id(spec)}):
            return True
    return False


def _keys(spec: StructSpec, version: int) -> dict[str, FieldSpec]:
    return {f.attr: f for f in _present(spec, version) if not f.is_array and f.struct is None}


def _source(resp_attr: str, resp_field: FieldSpec, req_keys: dict[str, FieldSpec]) -> str | None:
    """The request field whose value the response key field ``resp_attr`` takes."""
    same = req_keys.get(resp_attr)
    if same is not None and same.type == resp_field.type:
        return resp_attr
    for group in _ALIASES:
        if resp_attr in group:
            for attr in group:
                other = req_keys.get(attr)
                if other is not None and other.type == resp_field.type:
                    return attr
    return None


def _scalar_key(spec: StructSpec, version: int, element_type: str) -> str | None:
    """The field of a response element that one value of a scalar request array fills."""
    for f in _present(spec, version):
        if f.is_array or f.struct is not None or f.type != element_type:
            continue
        if element_type == "int32" and f.attr in _PARTITION:
            return f.attr
        if element_type == "string" and not f.attr.endswith("message"):
            return f.attr
    return None


def _fill(
    req_fields: list[FieldSpec],
    request: Any,
    resp_spec: StructSpec,
    response: Any,
    version: int,
    error_code: int,
) -> None:
    """Set ``response``'s error fields and build its arrays from ``request``'s fields."""
    for f in _present(resp_spec, version):
        if _is_error(f):
            setattr(response, f.attr, error_code)
        elif f.is_array and f.struct is not None and _has_error(f.struct, version):
            setattr(response, f.attr, _elements(req_fields, request, f.struct, version, error_code))


def _elements(
    req_fields: list[FieldSpec], request: Any, item: StructSpec, version: int, error_code: int
) -> list:
    resp_keys = _keys(item, version)
    for rf in req_fields:
        if not rf.is_array:
            continue
        values = getattr(request, rf.attr)
        if values is None:
            continue
        if rf.struct is not None:
            req_keys = _keys(rf.struct, version)
            copies = {a: s for a, f in resp_keys.items() if (s := _source(a, f, req_keys))}
            if not copies:
                continue
            out = []
            for value in values:
                element = item.cls(**{a: getattr(value, s) for a, s in copies.items()})
                _fill(_present(rf.struct, version), value, item, element, version, error_code)
                out.append(element)
            return out
        key = _scalar_key(item, version, rf.type)
        if key is not None:
            out = []
            for value in values:
                element = item.cls(**{key: value})
                _fill([], None, item, element, version, error_code)
                out.append(element)
            return out
    return []
