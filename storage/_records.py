"""The little of the record layout (inside a v2 batch) that compaction needs.

Storage never decompresses: the caller of the cleaner supplies the codecs (see cleaner.py).
Given the uncompressed records section of a batch, ``walk_records`` yields where each record
starts and ends and the fields compaction decides on. Record layout (varints are zigzag
encoded, 7 bits per byte, least significant group first)::

    length          varint   bytes after this field
    attributes      int8     unused
    timestampDelta  varlong  added to the batch's baseTimestamp
    offsetDelta     varint   added to the batch's baseOffset
    keyLength       varint   -1: null key
    key             bytes
    valueLength     varint   -1: null value (a tombstone)
    value           bytes
    headerCount     varint, then the headers (not read here)

A record's bytes are copied verbatim when it survives: its deltas are relative to the
batch's baseOffset and baseTimestamp, which a rewritten batch keeps.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple


class RecordInfo(NamedTuple):
    start: int          # position of the length varint in the records section
    end: int            # position after the record
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool     # the value is null


class BadRecords(ValueError):
    """The records section does not parse."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    z = shift = 0
    for _ in range(10):
        if pos >= end:
            raise BadRecords("truncated varint")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    raise BadRecords("varint too long")


def walk_records(buf, count: int) -> Iterator[RecordInfo]:
    """The ``count`` records of an uncompressed records section ``buf``."""
    pos, end = 0, len(buf)
    for _ in range(count):
        start = pos
        length, pos = _varint(buf, pos, end)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise BadRecords("record length runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = _varint(buf, pos, rec_end)
        off_delta, pos = _varint(buf, pos, rec_end)
        key_len, pos = _varint(buf, pos, rec_end)
        key = None
        if key_len >= 0:
            if pos + key_len > rec_end:
                raise BadRecords("key runs past the record")
            key = bytes(buf[pos:pos + key_len])
            pos += key_len
        value_len, pos = _varint(buf, pos, rec_end)
        yield RecordInfo(start, rec_end, off_delta, ts_delta, key, value_len < 0)
        pos = rec_end
    if pos != end:
        raise BadRecords("bytes left after the last record")
