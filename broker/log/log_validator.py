"""What Kafka's LogValidator checks in a produced payload before anything of it is stored,
beyond the batch framing and CRC that ``Partition.append`` checks.

How this works
--------------
``validate(records, batches, topic, now_ms)`` looks at the payload's batches (their headers,
parsed once by the caller for this and for the append) and, for each, the records inside
(``headrace.record_check``: C when it was built, else the Python reference; no per-record
objects either way): every length and varint consistent with the batch, offset deltas
0..n-1, exactly ``records_count`` records and no bytes after them, a key on every record of a
compacted topic, and on a CreateTime topic every timestamp within
``message.timestamp.before.max.ms`` before and ``message.timestamp.after.max.ms`` after the
broker's clock. A compressed batch is decompressed first (bounded, as every decompression
is: ``protocol.compression``). It returns None when all is well, else a ``Rejection``: Kafka's
error code (INVALID_RECORD; INVALID_TIMESTAMP for a timestamp; CORRUPT_MESSAGE for a CRC
that does not match, or a batch that cannot be decompressed), its message, and the index of
the first bad record in its batch (Kafka's ``record_errors``, Produce v8+). The batches'
framing (the caller's ``iter_batches``) and each batch's size and CRC (``Partition.produce``)
are checked elsewhere. A batch compressed with a codec this installation lacks cannot be
looked into: its records are not checked.

Schema ids (Confluent Server's ``confluent.key.schema.validation`` and
``confluent.value.schema.validation``, read once per change of the topic's settings into
``ProduceConfig.key_strategy`` / ``value_strategy``): on a topic that asks, every non-null key
(value) must start with the schema registry's wire format, magic byte 0 and a 4-byte schema
id, and the id must be registered under the subject its subject name strategy gives (any
version, soft-deleted ones too), as ``schemas`` (the broker's view of ``_schemas``, a
``SchemaIds``) knows it; else
INVALID_RECORD with the record's index, and nothing of the payload is written. Topics that do
not ask pay nothing for it; a batch that cannot be decompressed here is refused on such a
topic, since its records cannot be checked.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from headrace.protocol import ErrorCode
from headrace.protocol.compression import UnsupportedCompressionError, decompress
from headrace.protocol.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    crc_matches,
)
from headrace.record_check import (
    FRAMING,
    IDS_FRAMING,
    KEY_ID,
    KEY_NO_ID,
    NO_KEY,
    OFFSET,
    TIMESTAMP,
    VALUE_ID,
    VALUE_NO_ID,
    check_records,
    schema_id_table,
    schema_ids,
)

log = logging.getLogger(__name__)

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_MESSAGES = {
    FRAMING: "malformed record: a length or varint does not fit the batch",
    OFFSET: "invalid offset delta: records must be numbered 0..n-1 in their batch",
}


class SchemaIds(Protocol):
    """What the schema id checks ask of the broker's view of the schema registry (the
    registry's ``SchemaRegistry``)."""

    def unavailable(self) -> tuple[int, str] | None:
        """(Kafka's error code, why) schema ids cannot be checked here now: no view of
        ``_schemas`` on this broker (INVALID_RECORD), or one still loading (a retriable
        code); None when they can."""
        ...

    def allowed_ids(self, topic: str, part: str, strategy: str) -> Collection[int]:
        """The ids a key (``part`` "key") or value ("value") of ``topic`` may carry: those
        registered (any version, soft-deleted ones included) under the subject the subject
        name ``strategy`` (TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy)
        gives for the schema."""
        ...

    def schema_known(self, schema_id: int) -> bool: ...

    def may_lag(self) -> bool:
        """Whether the view may trail what the registry holds (this broker does not write
        ``_schemas``): a refused id is worth a second look once it has caught up."""
        ...


@dataclass(frozen=True, slots=True)
class Rejection:
    error_code: int
    message: str
    record_index: int  # the first bad record's index in its batch (-1: the batch itself)
    # a schema id this broker's view of the registry does not allow: a view that trails the
    # leader of _schemas may not have it yet (``SchemaIds.may_lag``)
    schema_id_refused: bool = False


def validate(
    records, batches, topic, now_ms: int, schemas: SchemaIds | None = None
) -> Rejection | None:
    """See the module docstring. ``batches``: ``iter_batches(records)``, walked once by the
    caller for this and for the append; ``schemas``: the registry's view, None when the
    registry is off on this broker."""
    config = topic.produce_config
    key_strategy, value_strategy = config.key_strategy, config.value_strategy
    key_ids: Collection[int] | None = None
    value_ids: Collection[int] | None = None
    if key_strategy is not None or value_strategy is not None:
        off = (ErrorCode.INVALID_RECORD, "the schema registry is off on this broker")
        why = off if schemas is None else schemas.unavailable()
        if why is not None or schemas is None:
            code, reason = why or off
            return Rejection(
                code,
                f"Topic {topic.name} validates schema ids, but {reason}: its records cannot be"
                " checked.",
                -1,
            )
        if key_strategy is not None:
            key_ids = schema_id_table(schemas.allowed_ids(topic.name, "key", key_strategy))
        if value_strategy is not None:
            value_ids = schema_id_table(schemas.allowed_ids(topic.name, "value", value_strategy))
    need_key = config.keys_required
    if config.log_append_time:  # the broker's clock replaces the timestamps
        low, high = LONG_MIN, LONG_MAX
    else:
        low = max(LONG_MIN, now_ms - config.timestamp_before_ms)
        high = min(LONG_MAX, now_ms + config.timestamp_after_ms)
    for pos, size, h in batches:
        if h.is_control:
            continue  # refused by Partition.append (clients may not write control batches)
        start, end = pos + BATCH_HEADER_SIZE, pos + size
        body, first = records, start
        if h.compression > 4:
            return Rejection(ErrorCode.CORRUPT_MESSAGE, f"unknown compression {h.compression}", -1)
        if h.compression:
            if not crc_matches(records[pos:end]):
                return Rejection(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch", -1)
            try:
                body = decompress(h.compression, records[start:end])
            except UnsupportedCompressionError as e:
                if key_ids is not None or value_ids is not None:
                    return Rejection(
                        ErrorCode.INVALID_RECORD,
                        f"cannot check the schema ids of a batch this broker cannot"
                        f" decompress: {e}",
                        -1,
                    )
                continue  # not looked into (see the module docstring)
            except (CorruptRecordError, ValueError) as e:
                return Rejection(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress: {e}", -1)
            first, end = 0, len(body)
        problem, index = check_records(
            body, first, end, h.records_count, need_key, h.base_timestamp, low, high
        )
        if problem:
            if problem == FRAMING or problem == OFFSET:
                if not crc_matches(records[pos : pos + size]):
                    return Rejection(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch", -1)
                return Rejection(ErrorCode.INVALID_RECORD, _MESSAGES[problem], index)
            if problem == NO_KEY:
                return Rejection(
                    ErrorCode.INVALID_RECORD,
                    f"Compacted topic cannot accept message without key in topic {topic.name}.",
                    index,
                )
            if problem == TIMESTAMP:
                return Rejection(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"Timestamp of the record at index {index} is out of range: it must be"
                    f" within [{low}, {high}]",
                    index,
                )
        if key_ids is not None or value_ids is not None:
            problem, index, schema_id = schema_ids(
                body, first, end, h.records_count, key_ids, value_ids
            )
            if problem == IDS_FRAMING:  # (check_records refuses these first)
                return Rejection(ErrorCode.INVALID_RECORD, _MESSAGES[FRAMING], index)
            if problem:
                assert schemas is not None
                return _schema_rejection(
                    problem, index, schema_id, topic.name, key_strategy, value_strategy, schemas
                )
    return None


def _schema_rejection(problem, index, schema_id, name, key_strategy, value_strategy, schemas):
    part = "key" if problem in (KEY_NO_ID, KEY_ID) else "value"
    strategy = key_strategy if part == "key" else value_strategy
    subject = {
        "TopicNameStrategy": f"subject {name}-{part}",
        "RecordNameStrategy": "the subject of its record name (RecordNameStrategy)",
        "TopicRecordNameStrategy": f"subject {name}-<its record name> (TopicRecordNameStrategy)",
    }.get(strategy, strategy)
    if problem in (KEY_NO_ID, VALUE_NO_ID):
        why = (
            f"its {part} does not start with a schema id (the schema registry's wire format:"
            " magic byte 0, then a 4-byte schema id)"
        )
    elif schemas.schema_known(schema_id):
        why = f"the schema id {schema_id} of its {part} is not registered under {subject}"
    else:
        why = f"the schema id {schema_id} of its {part} is unknown to the schema registry"
    return Rejection(
        ErrorCode.INVALID_RECORD,
        f"Record {index} failed schema validation and the batch was refused: {why}.",
        index,
        problem in (KEY_ID, VALUE_ID),
    )
