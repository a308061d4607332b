"""KIP-848 consumer, KIP-932 share and KIP-1071 streams groups' records in
``__consumer_offsets``, in Kafka's layouts (Kafka 4.4's group coordinator writes and reads
the same bytes).

A record's key is an int16 *record type* and then the key message at version 0 (not
flexible); its value is an int16 version (0) and then the flexible value message. The
messages are Kafka's JSON schemas (``headrace/protocol/schemas``); a key without a value (a
tombstone) deletes the key. The types:

    3  ConsumerGroupMetadata              (group)          group epoch, metadata hash
    4  ConsumerGroupPartitionMetadata     (group)          not written since Kafka 4.0
    5  ConsumerGroupMemberMetadata        (group, member)  subscription, ids, timeouts
    6  ConsumerGroupTargetAssignmentMetadata (group)       assignment epoch
    7  ConsumerGroupTargetAssignmentMember   (group, member) its target partitions
    8  ConsumerGroupCurrentMemberAssignment  (group, member) epochs, state, assigned,
                                                           pending revocation
    10-15 the ShareGroup* records of the same names (15: ShareGroupStatePartitionMetadata,
       the partitions whose share state is initialized, initializing or being deleted)
    16 ConsumerGroupRegularExpression     (group, regex)   read and dropped
    17, 19-23 the StreamsGroup* records (metadata, topology, member metadata, target
       assignment metadata and members, current member assignment)

Types 0-2 are the committed offsets and classic groups' metadata (``group_offsets``).
A group's records are grouped by *part*: None for the group's own keys, a member id for a
member's (``part_of``), so that a member's records can be diffed and tombstoned together.
"""

from __future__ import annotations

import struct
from typing import Any

from headrace.protocol import DecodeError, decode_message, encode_message, messages

_I16 = struct.Struct(">h")

_NAMES = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression",
    17: "StreamsGroupMetadata",
    19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata",
    21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment",
    23: "StreamsGroupTopology",
}
KINDS = {
    "consumer": frozenset({3, 4, 5, 6, 7, 8, 16}),
    "share": frozenset(range(10, 16)),
    "streams": frozenset({17, 19, 20, 21, 22, 23}),
}
MODERN_TYPES = frozenset(_NAMES)

CONSUMER_METADATA, CONSUMER_MEMBER, CONSUMER_TARGET_METADATA = 3, 5, 6
CONSUMER_TARGET_MEMBER, CONSUMER_CURRENT = 7, 8
SHARE_MEMBER, SHARE_METADATA, SHARE_TARGET_METADATA = 10, 11, 12
SHARE_TARGET_MEMBER, SHARE_CURRENT, SHARE_STATE_PARTITIONS = 13, 14, 15
STREAMS_METADATA, STREAMS_MEMBER, STREAMS_TARGET_METADATA = 17, 19, 20
STREAMS_TARGET_MEMBER, STREAMS_CURRENT, STREAMS_TOPOLOGY = 21, 22, 23


def key_class(record_type: int) -> Any:
    return getattr(messages, _NAMES[record_type] + "Key")


def value_class(record_type: int) -> Any:
    return getattr(messages, _NAMES[record_type] + "Value")


def _encoded(prefix: int, message) -> bytes:
    return _I16.pack(prefix) + b"".join(bytes(c) for c in encode_message(message, 0))


def key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    """A group's (``member_id`` None) or a member's key of ``record_type``."""
    cls = key_class(record_type)
    if member_id is None:
        return _encoded(record_type, cls(group_id=group_id))
    return _encoded(record_type, cls(group_id=group_id, member_id=member_id))


def value(message) -> bytes:
    """A value message (version 0) as stored."""
    return _encoded(0, message)


def record_type(raw_key: bytes) -> int:
    """The record type of a key (any key in ``__consumer_offsets``)."""
    return _I16.unpack_from(raw_key)[0]


def parse_key(raw_key: bytes) -> tuple[int, str, str | None]:
    """(record type, group id, part) of a modern group's key; DecodeError when malformed."""
    kind = record_type(raw_key)
    if kind not in MODERN_TYPES:
        raise DecodeError(f"record type {kind}")
    k = decode_message(key_class(kind), 0, raw_key, 2)
    return kind, k.group_id, getattr(k, "member_id", None)


def parse_value(kind: int, raw_value: bytes):
    """The value message of a record of type ``kind``; DecodeError when malformed."""
    version = _I16.unpack_from(raw_value)[0]
    if version != 0:
        raise DecodeError(f"{_NAMES[kind]} value version {version}")
    # newer writers may add tagged fields: ignored by the decoder
    return decode_message(value_class(kind), 0, raw_value, 2)


Stored = dict[str | None, dict[bytes, bytes]]  # part -> key -> value, as in the log


def stored_groups(records: dict[bytes, bytes]) -> dict[str, tuple[str, Stored]]:
    """The modern groups in replayed records (key -> value, the latest of each key):
    group id -> (its kind, part -> key -> value). Malformed keys are skipped, and a group
    whose records are of two kinds is taken as the kind of its group metadata record."""
    found: dict[str, dict[str, Stored]] = {}
    for raw_key, raw_value in records.items():
        try:
            kind, group_id, part = parse_key(raw_key)
        except (DecodeError, struct.error):
            continue
        group_kind = next(k for k, types in KINDS.items() if kind in types)
        by_kind = found.setdefault(group_id, {})
        by_kind.setdefault(group_kind, {}).setdefault(part, {})[raw_key] = raw_value
    out: dict[str, tuple[str, Stored]] = {}
    for group_id, by_kind in found.items():
        for kind_name, metadata_type in (
            ("consumer", CONSUMER_METADATA),
            ("share", SHARE_METADATA),
            ("streams", STREAMS_METADATA),
        ):
            stored = by_kind.get(kind_name)
            if stored and key(metadata_type, group_id) in stored.get(None, {}):
                out[group_id] = (kind_name, stored)
                break
    return out


def values(stored: Stored, part: str | None) -> dict[int, Any]:
    """Record type -> decoded value of one part (group or member) of a stored group."""
    out = {}
    for raw_key, raw_value in stored.get(part, {}).items():
        kind = record_type(raw_key)
        out[kind] = parse_value(kind, raw_value)
    return out
