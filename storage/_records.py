"""The little of the record layout (inside a v2 batch) that compaction needs.

Storage never decompresses: the caller of the cleaner supplies the codecs (see cleaner.py).
Given the uncompressed records section of a batch, ``walk_records`` yields where each record
starts and ends and the fields compaction decides on (the record layout is documented in
``headrace.record_format``); the headers are not read.

A record's bytes are copied verbatim when it survives: its deltas are relative to the
batch's baseOffset and baseTimestamp, which a rewritten batch keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from headrace.record_format import CorruptRecordError, read_varint


class RecordInfo(NamedTuple):
    start: int  # position of the length varint in the records section
    end: int  # position after the record
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool  # the value is null


BadRecords = CorruptRecordError  # the records section does not parse


def walk_records(buf, count: int) -> Iterator[RecordInfo]:
    """The ``count`` records of an uncompressed records section ``buf``."""
    pos, end = 0, len(buf)
    for _ in range(count):
        start = pos
        length, pos = read_varint(buf, pos, end)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise BadRecords("record length runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(buf, pos, rec_end)
        off_delta, pos = read_varint(buf, pos, rec_end)
        key_len, pos = read_varint(buf, pos, rec_end)
        key = None
        if key_len >= 0:
            if pos + key_len > rec_end:
                raise BadRecords("key runs past the record")
            key = bytes(buf[pos : pos + key_len])
            pos += key_len
        value_len, pos = read_varint(buf, pos, rec_end)
        yield RecordInfo(start, rec_end, off_delta, ts_delta, key, value_len < 0)
        pos = rec_end
    if pos != end:
        raise BadRecords("bytes left after the last record")
