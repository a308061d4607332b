"""Transaction coordinator state in the internal compacted topic ``__transaction_state``, in
Kafka's record layouts.

A transactional id's records go to partition ``abs(java_hash(id)) % partitions``, so one
partition holds an id's whole history; the latest record for a key wins (what compaction
keeps) and a record without a value (a tombstone) removes the id.

Key and value are Kafka's ``TransactionLogKey`` (version 0) and ``TransactionLogValue``, each
an int16 version and then the message in that version (protocol/schemas/, encoded by the
protocol's codec). Version 0 of the value holds the producer id and epoch, the timeout, the
state (``transaction_state.TxnState.code``), the partitions and two timestamps; version 1
(flexible, KIP-890) adds tagged fields: the client's transaction version, the producer id of
the last committed transaction and the next producer id (an epoch running out at EndTxn).
A record is written in version 1 only when it holds one of those, so an id that never used
transactions v2 stays readable by older brokers.

``replay`` reads every partition from its start in a worker thread at start-up.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from headrace.broker.log.replay import stored_records
from headrace.protocol import DecodeError, decode_message, encode_message, messages
from headrace.protocol.records import Record, build_batch

from .transaction_state import BY_CODE, TxnState

log = logging.getLogger("headrace.transactions")

TRANSACTION_TOPIC = "__transaction_state"
MAX_EPOCH = (1 << 15) - 1  # a producer epoch is an int16

_I16 = struct.Struct(">h")
K = messages.TransactionLogKey
V = messages.TransactionLogValue


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id (see ``transaction_state``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    update_ms: int = -1
    start_ms: int = -1
    pending: bool = False  # a change is being written: other requests wait (CONCURRENT_...)
    # transactions v2 (KIP-890): the transaction version the client uses (2: the epoch is
    # bumped at every EndTxn), the producer id before the last rotation, and the one the
    # decided transaction completes with when the epoch ran out (-1: none)
    client_version: int = 0
    previous_producer_id: int = -1
    next_producer_id: int = -1


def _encoded(version: int, message) -> bytes:
    return _I16.pack(version) + b"".join(bytes(c) for c in encode_message(message, version))


def key(transactional_id: str) -> bytes:
    return _encoded(0, K(transactional_id=transactional_id))


def value(m: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    flexible = m.client_version > 0 or m.previous_producer_id >= 0 or m.next_producer_id >= 0
    return _encoded(
        1 if flexible else 0,
        V(
            producer_id=m.producer_id,
            previous_producer_id=m.previous_producer_id,
            next_producer_id=m.next_producer_id,
            producer_epoch=m.producer_epoch,
            transaction_timeout_ms=m.timeout_ms,
            transaction_status=m.state.code,
            transaction_partitions=[
                V.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()
            ],
            transaction_last_update_timestamp_ms=m.update_ms,
            transaction_start_timestamp_ms=m.start_ms,
            client_transaction_version=m.client_version,
        ),
    )


def record_batch(transactional_id: str, m: TransactionMetadata | None, now_ms: int) -> bytearray:
    """One batch with the id's new record (a tombstone when ``m`` is None)."""
    v = None if m is None else value(m)
    return bytearray(build_batch([Record(key=key(transactional_id), value=v, timestamp=now_ms)]))


def parse_key(data: bytes) -> str | None:
    if _I16.unpack_from(data)[0] != 0:
        return None
    return decode_message(K, 0, data, 2).transactional_id


def parse_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    version = _I16.unpack_from(data)[0]
    if version not in (0, 1):
        raise ValueError(f"transaction value version {version}")
    v = decode_message(V, version, data, 2)
    return TransactionMetadata(
        transactional_id,
        v.producer_id,
        v.producer_epoch,
        v.transaction_timeout_ms,
        BY_CODE[v.transaction_status],
        {(t.topic, p) for t in v.transaction_partitions or () for p in t.partition_ids},
        v.transaction_last_update_timestamp_ms,
        v.transaction_start_timestamp_ms,
        client_version=v.client_transaction_version,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
    )


def replay(partition_logs) -> dict[str, TransactionMetadata]:
    """Every live transactional id, read from the logs' starts (in a worker thread)."""
    found: dict[str, TransactionMetadata] = {}
    for plog in partition_logs:
        for k, v in stored_records(plog):
            try:
                tid = None if k is None else parse_key(k)
                if tid is None:
                    continue
                if v is None:
                    found.pop(tid, None)
                else:
                    found[tid] = parse_value(tid, v)
            except (ValueError, KeyError, struct.error, DecodeError):
                log.warning("skipping a malformed record in %s", TRANSACTION_TOPIC)
    return found
