"""Share-partition state in the internal topic ``__share_group_state``, in Kafka's record
layouts (Kafka 4.4's share coordinator writes and reads the same bytes).

A share-partition key is (group id, topic id, partition). Its records go to partition
``abs(java_hash("group:topicId:partition")) % partitions``, the topic id written as Kafka
prints a ``Uuid`` (URL-safe base64 without padding), so one partition of the topic holds a
key's whole history.

Records: the key is an int16 record type (0 ``ShareSnapshotKey``, 1 ``ShareUpdateKey``) and
then the key message at version 0 (group id, topic id, partition); the value is an int16
version (0) and the flexible value message:

* a snapshot (``ShareSnapshotValue``) is the whole state: snapshot epoch, state epoch, leader
  epoch, start offset, create and write timestamps, the delivery-complete count (a tagged
  field, KIP-1226) and every state batch; it replaces what came before;
* an update (``ShareUpdateValue``) carries what one write changed: snapshot epoch, leader
  epoch, start offset (-1: unchanged), delivery-complete count and the written batches; it is
  merged into the state (``state_batches.combine``);
* a snapshot key without a value (a tombstone) deletes the key.

The topic is not compacted (an update means nothing without the snapshot before it, and
compaction keeps only the last record of each key): its records are dropped from the start
instead, below the oldest snapshot any live key still needs (``ShareCoordinator.prune``).

``replay`` reads partitions from their starts in a worker thread when they are loaded.
"""

from __future__ import annotations

import base64
import logging
import struct
import uuid
from dataclasses import dataclass, field

from headrace.broker.coordinator.group.group_offsets import partition_for
from headrace.broker.log.replay import stored_records_at
from headrace.protocol import DecodeError, decode_message, encode_message, messages
from headrace.protocol.records import Record, build_batch

from .state_batches import StateBatch, combine

log = logging.getLogger("headrace.share")

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1  # record types: the int16 before a key

_I16 = struct.Struct(">h")
SK, SV = messages.ShareSnapshotKey, messages.ShareSnapshotValue
UK, UV = messages.ShareUpdateKey, messages.ShareUpdateValue

ShareKey = tuple[str, uuid.UUID, int]  # group id, topic id, partition


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """A Uuid as Kafka prints it: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The Uuid Kafka prints as ``text``; ValueError when it is not one."""
    if len(text) != 22:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16 or kafka_uuid(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def coordinator_key(key: ShareKey) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: "group:topicId:partition"."""
    group_id, topic_id, partition = key
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


def parse_coordinator_key(text: str) -> ShareKey:
    """The key FindCoordinator names (Kafka's ``SharePartitionKey.getInstance``: the group id
    may hold colons; the last two parts are the topic id and the partition); ValueError when
    it is not one."""
    parts = text.split(":")
    if len(parts) < 3:
        raise ValueError(f"expected groupId:topicId:partition, found {text!r}")
    group_id = ":".join(parts[:-2])
    if not group_id.strip():
        raise ValueError("empty group id")
    topic_id = parse_kafka_uuid(parts[-2])
    try:
        partition = int(parts[-1])
    except ValueError:
        raise ValueError(f"invalid partition {parts[-1]!r}") from None
    if not -(1 << 31) <= partition < (1 << 31):
        raise ValueError(f"invalid partition {parts[-1]!r}")
    return group_id, topic_id, partition


def state_partition(key: ShareKey, partitions: int) -> int:
    """The partition of ``__share_group_state`` that holds ``key`` (Kafka's
    ``Utils.abs(key.asCoordinatorKey().hashCode()) % partitions``)."""
    return partition_for(coordinator_key(key), partitions)


@dataclass(slots=True)
class ShareGroupOffset:
    """The state of one share-partition key (Kafka's ``ShareGroupOffset``)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    create_ms: int = 0
    write_ms: int = 0


def _encoded(prefix: int, message, version: int = 0) -> bytes:
    """``prefix`` (a key's record type, a value's version) as an int16, then ``message``."""
    return _I16.pack(prefix) + b"".join(bytes(c) for c in encode_message(message, version))


def snapshot_record(key: ShareKey, s: ShareGroupOffset, now_ms: int) -> Record:
    group_id, topic_id, partition = key
    value = SV(
        snapshot_epoch=s.snapshot_epoch,
        state_epoch=s.state_epoch,
        leader_epoch=s.leader_epoch,
        start_offset=s.start_offset,
        delivery_complete_count=s.delivery_complete_count,
        create_timestamp=s.create_ms,
        write_timestamp=s.write_ms,
        state_batches=[SV.StateBatch(**b._asdict()) for b in s.batches],
    )
    k = _encoded(SNAPSHOT, SK(group_id=group_id, topic_id=topic_id, partition=partition))
    return Record(key=k, value=_encoded(0, value), timestamp=now_ms)


def update_record(key: ShareKey, u: ShareGroupOffset, now_ms: int) -> Record:
    group_id, topic_id, partition = key
    value = UV(
        snapshot_epoch=u.snapshot_epoch,
        leader_epoch=u.leader_epoch,
        start_offset=u.start_offset,
        delivery_complete_count=u.delivery_complete_count,
        state_batches=[UV.StateBatch(**b._asdict()) for b in u.batches],
    )
    k = _encoded(UPDATE, UK(group_id=group_id, topic_id=topic_id, partition=partition))
    return Record(key=k, value=_encoded(0, value), timestamp=now_ms)


def tombstone_record(key: ShareKey, now_ms: int) -> Record:
    group_id, topic_id, partition = key
    k = _encoded(SNAPSHOT, SK(group_id=group_id, topic_id=topic_id, partition=partition))
    return Record(key=k, value=None, timestamp=now_ms)


def record_batch(record: Record) -> bytearray:
    return bytearray(build_batch([record]))


def parse_key(data: bytes) -> tuple[int, ShareKey] | None:
    """(record type, key) of a record key; None for a type this coordinator does not know."""
    kind = _I16.unpack_from(data)[0]
    if kind not in (SNAPSHOT, UPDATE):
        return None
    k = decode_message(SK if kind == SNAPSHOT else UK, 0, data, 2)
    return kind, (k.group_id, k.topic_id, k.partition)


def parse_snapshot(data: bytes) -> ShareGroupOffset:
    if _I16.unpack_from(data)[0] != 0:
        raise ValueError("share snapshot value version")
    v = decode_message(SV, 0, data, 2)
    return ShareGroupOffset(
        v.snapshot_epoch,
        v.state_epoch,
        v.leader_epoch,
        v.start_offset,
        v.delivery_complete_count,
        [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in v.state_batches
        ],
        v.create_timestamp,
        v.write_timestamp,
    )


def parse_update(data: bytes) -> ShareGroupOffset:
    """An update as a ``ShareGroupOffset`` (state epoch 0: updates carry none)."""
    if _I16.unpack_from(data)[0] != 0:
        raise ValueError("share update value version")
    v = decode_message(UV, 0, data, 2)
    return ShareGroupOffset(
        v.snapshot_epoch,
        0,
        v.leader_epoch,
        v.start_offset,
        v.delivery_complete_count,
        [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in v.state_batches
        ],
    )


def merged(so_far: ShareGroupOffset, update: ShareGroupOffset) -> ShareGroupOffset:
    """The state after ``update`` (Kafka's ``ShareCoordinatorShard.merge``): a start offset or
    leader epoch of -1 leaves the current one; the batches are combined."""
    start = so_far.start_offset if update.start_offset == -1 else update.start_offset
    leader_epoch = so_far.leader_epoch if update.leader_epoch == -1 else update.leader_epoch
    return ShareGroupOffset(
        so_far.snapshot_epoch,
        so_far.state_epoch,
        leader_epoch,
        start,
        update.delivery_complete_count,
        combine(so_far.batches, update.batches, start),
        so_far.create_ms,
        so_far.write_ms,
    )


@dataclass(slots=True)
class Replayed:
    """What a replay found: each live key's state, the updates written since its last
    snapshot, and the offset of that snapshot (what pruning must keep)."""

    states: dict[ShareKey, ShareGroupOffset] = field(default_factory=dict)
    updates: dict[ShareKey, int] = field(default_factory=dict)
    snapshot_offsets: dict[ShareKey, int] = field(default_factory=dict)


def replay(partition_log) -> Replayed:
    """Every live share-partition key of one partition, read from its start (in a worker
    thread). Records it cannot read are skipped with a warning, as Kafka skips them."""
    found = Replayed()
    for offset, k, v in stored_records_at(partition_log):
        try:
            parsed = None if k is None else parse_key(k)
            if parsed is None:
                continue
            kind, key = parsed
            if kind == SNAPSHOT:
                if v is None:
                    found.states.pop(key, None)
                    found.updates.pop(key, None)
                    found.snapshot_offsets.pop(key, None)
                    continue
                found.states[key] = parse_snapshot(v)
                found.updates[key] = 0
                found.snapshot_offsets[key] = offset
            elif v is not None:
                update = parse_update(v)
                current = found.states.get(key)
                if current is None:  # (Kafka takes a lone update as the state)
                    found.states[key] = update
                else:
                    if current.leader_epoch > update.leader_epoch and update.leader_epoch != -1:
                        update.leader_epoch = current.leader_epoch
                    found.states[key] = merged(current, update)
                found.updates[key] = found.updates.get(key, 0) + 1
        except (ValueError, KeyError, struct.error, DecodeError):
            log.warning("skipping a malformed record in %s", SHARE_STATE_TOPIC)
    return found
