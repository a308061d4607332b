"""Java ints as Confluent's registry reads them (a path's schema id too), and its ``offset``
and ``limit`` on the lists (``/subjects``, ``/schemas``,
``/contexts``, a subject's versions, a schema id's subjects and versions, ``referencedby``).

Both are Java ints: an optional sign and ASCII digits in [-2^31, 2^31-1]; anything else is
Confluent's answer to a query parameter that does not convert, 404 ``HTTP 404 Not Found``.
``offset`` (default 0) skips that many items; a negative one skips none (Confluent's fails
with a 500 there). ``limit`` (default -1) is used when in [1, the list's most], else the
list's default (``SCHEMAS_LIMIT`` for ``/schemas`` and ``referencedby``, every item for the
others, as Confluent's defaults ``schema.search.default.limit`` and
``schema.search.max.limit`` are 1000 and the other lists' are 2^31-1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from aiohttp import web

JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
SCHEMAS_LIMIT = 1000  # Confluent's schema.search.default.limit and .max.limit
EVERY = JAVA_INT_MAX
_JAVA_INT = re.compile(r"[+-]?[0-9]+")

T = TypeVar("T")


def parse_java_int(text: str) -> int | None:
    """``text`` as a Java int (a path's schema id, a query's offset), None when it is not one."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if JAVA_INT_MIN <= value <= JAVA_INT_MAX else None


def java_int(query: Mapping[str, str], name: str, default: int) -> int:
    """Query parameter ``name`` as a Java int; 404 when it is not one."""
    text = query.get(name)
    if text is None:
        return default
    value = parse_java_int(text)
    if value is None:
        raise web.HTTPNotFound()
    return value


def page(query: Mapping[str, str], items: Sequence[T], most: int = EVERY) -> list[T]:
    """The part of ``items`` that ``offset`` and ``limit`` in ``query`` ask for."""
    offset = max(0, java_int(query, "offset", 0))
    limit = java_int(query, "limit", -1)
    if not 0 < limit <= most:
        limit = most
    return list(items[offset : offset + limit])
