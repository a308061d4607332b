"""The records inside a v2 batch, checked as Kafka's LogValidator checks them before a
produce is stored: the reference, in Python. ``headrace._record_check`` (C, built when a
compiler is there) does the same faster; ``check_records`` is whichever is present.

A record (Kafka's DefaultRecord), after the batch's 61-byte header, in order:
  length varint (the bytes after it), attributes int8, timestampDelta varlong, offsetDelta
  varint, keyLength varint (-1: null) + key, valueLength varint (-1: null) + value,
  headerCount varint, then per header: keyLength varint (>= 0) + key, valueLength varint
  (-1: null) + value.
Varints are zigzag-encoded: at most 5 bytes (varint) or 10 (varlong).

``check_records(buf, pos, end, count, need_key, base_timestamp, low, high)`` walks the
``count`` records in ``buf[pos:end]`` and returns ``(problem, index)``: ``OK`` (0, -1), or the
first problem and the index of the record it is in:
  FRAMING    a length or varint inconsistent with the batch (runs past the record or the
             batch, a record that is not exactly its declared length, a negative count or
             header key length, bytes left after the last record, fewer records than
             ``count``)
  OFFSET     an offsetDelta other than the record's index
  NO_KEY     a null key where ``need_key`` (a compacted topic)
  TIMESTAMP  base_timestamp + timestampDelta outside [low, high]
Nothing is allocated per record; the walk stops at the first problem.

``schema_ids(buf, pos, end, count, key_ids, value_ids)`` checks the schema ids records carry,
for the topics that ask (``confluent.value.schema.validation``), against tables of allowed ids
made by ``schema_id_table``; ``schema_ids_py`` is its reference.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Collection

OK, FRAMING, OFFSET, NO_KEY, TIMESTAMP = 0, 1, 2, 3, 4


class _Bad(Exception):
    pass


def _varint(buf, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise _Bad
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + i + 1
        shift += 7
    raise _Bad


def check_records_py(buf, pos, end, count, need_key, base_timestamp, low, high):
    """See the module docstring (the reference implementation)."""
    index = 0
    try:
        while index < count:
            length, pos = _varint(buf, pos, end, 5)
            stop = pos + length
            if length < 1 or stop > end:  # at least the attributes byte
                return FRAMING, index
            pos += 1  # attributes (unused in v2)
            delta, pos = _varint(buf, pos, stop, 10)
            offset_delta, pos = _varint(buf, pos, stop, 5)
            key, pos = _varint(buf, pos, stop, 5)
            if key < -1:
                return FRAMING, index
            if key >= 0:
                pos += key
            value, pos = _varint(buf, pos, stop, 5)
            if value < -1 or pos > stop:
                return FRAMING, index
            if value >= 0:
                pos += value
            headers, pos = _varint(buf, pos, stop, 5)
            if headers < 0 or pos > stop:
                return FRAMING, index
            for _ in range(headers):
                hkey, pos = _varint(buf, pos, stop, 5)
                if hkey < 0:
                    return FRAMING, index
                pos += hkey
                hvalue, pos = _varint(buf, pos, stop, 5)
                if hvalue < -1:
                    return FRAMING, index
                if hvalue >= 0:
                    pos += hvalue
                if pos > stop:
                    return FRAMING, index
            if pos != stop:
                return FRAMING, index
            if offset_delta != index:
                return OFFSET, index
            if need_key and key < 0:
                return NO_KEY, index
            if not low <= base_timestamp + delta <= high:
                return TIMESTAMP, index
            index += 1
    except _Bad:
        return FRAMING, index
    if pos != end:
        return FRAMING, index
    return OK, -1


# ``schema_ids``' problems: a key or value without the wire format's prefix, or with an id
# not among those allowed
KEY_NO_ID, KEY_ID, VALUE_NO_ID, VALUE_ID, IDS_FRAMING = 1, 2, 3, 4, 5
_PREFIX = struct.Struct(">bI")  # the schema registry's wire format: magic byte 0, schema id


def _schema_id(buf, pos: int, length: int, allowed) -> int:
    """-1: no prefix; else the schema id, negated minus 2 when it is not in ``allowed``."""
    if length < 5:
        return -1
    magic, schema_id = _PREFIX.unpack_from(buf, pos)
    if magic != 0:
        return -1
    return schema_id if schema_id in allowed else -2 - schema_id


def schema_ids_py(buf, pos, end, count, key_ids, value_ids) -> tuple[int, int, int]:
    """Walk the ``count`` records in ``buf[pos:end]`` (``check_records`` found them well
    framed) and check that each non-null key (when ``key_ids`` is not None) and value (when
    ``value_ids`` is not None) starts with the schema registry's wire format, magic byte 0 and
    a 4-byte big-endian schema id, the id one of those allowed (``schema_id_table``'s).
    ``(problem, index, schema id)``: ``(OK, -1, -1)``, or the first problem (KEY_NO_ID, KEY_ID,
    VALUE_NO_ID, VALUE_ID; IDS_FRAMING for records ``check_records`` would refuse), the
    record's index and its id (-1 when it has none). Only topics that ask for it pay for this
    walk. The reference; ``schema_ids`` is the compiled one when it was built."""
    index = 0
    try:
        for index in range(count):
            length, pos = _varint(buf, pos, end, 5)
            stop = pos + length
            if length < 1 or stop > end:
                return IDS_FRAMING, index, -1
            _, pos = _varint(buf, pos + 1, stop, 10)  # (after the attributes) timestamp delta
            _, pos = _varint(buf, pos, stop, 5)  # offset delta
            key, pos = _varint(buf, pos, stop, 5)
            if key < -1 or pos + key > stop:
                return IDS_FRAMING, index, -1
            if key >= 0:
                if key_ids is not None:
                    found = _schema_id(buf, pos, key, key_ids)
                    if found < 0:
                        if found == -1:
                            return KEY_NO_ID, index, -1
                        return KEY_ID, index, -2 - found
                pos += key
            value, pos = _varint(buf, pos, stop, 5)
            if value < -1 or pos + value > stop:
                return IDS_FRAMING, index, -1
            if value >= 0 and value_ids is not None:
                found = _schema_id(buf, pos, value, value_ids)
                if found < 0:
                    if found == -1:
                        return VALUE_NO_ID, index, -1
                    return VALUE_ID, index, -2 - found
            pos = stop
    except _Bad:
        return IDS_FRAMING, index, -1
    return OK, -1, -1


def id_table_py(ids) -> Collection[int]:
    """The allowed ids as ``schema_ids_py`` takes them."""
    return frozenset(ids)


def id_table_c(ids) -> Collection[int]:
    """The allowed ids as the compiled ``schema_ids`` takes them: sorted native uint32."""
    return array("I", sorted(i for i in ids if 0 <= i < 1 << 32))


try:
    from headrace._record_check import (  # type: ignore[import-not-found]
        check_records,
        schema_ids,
    )

    schema_id_table = id_table_c
    COMPILED = True
except ImportError:  # no compiler at install time: the reference does the work
    check_records = check_records_py
    schema_ids = schema_ids_py
    schema_id_table = id_table_py
    COMPILED = False
