"""Transaction coordinator state in the internal compacted topic ``__transaction_state``, in
Kafka's record layouts.

A transactional id's records go to partition ``abs(java_hash(id)) % partitions``, so one
partition holds an id's whole history; the latest record for a key wins (what compaction
keeps) and a record without a value (a tombstone) removes the id.

Key (version 0), big-endian:
    int16 version=0, string transactional id           (string = int16 length + UTF-8)
Value (version 0):
    int16 version=0, int64 producer id, int16 producer epoch, int32 timeout ms,
    int8 state (``transaction_state.TxnState.code``),
    int32 topic count, then per topic: string topic, int32 count, int32 partitions...,
    int64 last update timestamp ms, int64 transaction start timestamp ms

``replay`` reads every partition from its start in a worker thread at start-up.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from headrace.broker.log.replay import stored_records
from headrace.protocol.records import Record, build_batch

from .transaction_state import BY_CODE, TxnState

log = logging.getLogger("headrace.transactions")

TRANSACTION_TOPIC = "__transaction_state"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TAIL = struct.Struct(">qq")


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


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def value(m: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_HEAD.pack(0, m.producer_id, m.producer_epoch, m.timeout_ms, m.state.code))
    out += _I32.pack(len(by_topic))
    for topic, parts in by_topic.items():
        out += _string(topic) + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _TAIL.pack(m.update_ms, m.start_ms)
    return bytes(out)


def record_batch(transactional_id: str, m: TransactionMetadata | None, now_ms: int) -> bytearray:
    """One batch with the id's new record (a tombstone when ``m`` is None)."""
    v = None if m is None else value(m)
    return bytearray(build_batch([Record(key=key(transactional_id), value=v, timestamp=now_ms)]))


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, s: struct.Struct):
        v = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v if len(v) > 1 else v[0]

    def string(self) -> str:
        n = self.take(_I16)
        raw = self.buf[self.pos : self.pos + max(n, 0)]
        if len(raw) != max(n, 0):
            raise ValueError("string runs past the record")
        self.pos += len(raw)
        return raw.decode()


def parse_key(data: bytes) -> str | None:
    r = _Reader(data)
    if r.take(_I16) != 0:
        return None
    return r.string()


def parse_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    r = _Reader(data)
    version, pid, epoch, timeout, code = r.take(_HEAD)
    if version != 0:
        raise ValueError(f"transaction value version {version}")
    partitions = set()
    for _ in range(r.take(_I32)):
        topic = r.string()
        for _ in range(r.take(_I32)):
            partitions.add((topic, r.take(_I32)))
    update_ms, start_ms = r.take(_TAIL)
    return TransactionMetadata(
        transactional_id, pid, epoch, timeout, BY_CODE[code], partitions, update_ms, start_ms
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
            except (ValueError, KeyError, struct.error, UnicodeDecodeError):
                log.warning("skipping a malformed record in %s", TRANSACTION_TOPIC)
    return found
