"""Committed offsets in the internal topic ``__consumer_offsets``, in Kafka's record layouts.

A group's records go to partition ``abs(java_hash(group id)) % partitions`` of the topic, as
in Kafka, so one partition holds a group's whole history. Each commit is one record batch of
records keyed by (group, topic, partition); a deletion is a record with that key and no value
(a tombstone). The latest record for a key wins, which is what compaction keeps.

Offset commit key (version 1), big-endian:
    int16 version=1, string group, string topic, int32 partition
    (string = int16 length + UTF-8 bytes)
Offset commit value (we write version 3; versions 0-3 are read):
    v0: int16 0, int64 offset, string metadata, int64 commit timestamp
    v1: int16 1, int64 offset, string metadata, int64 commit timestamp, int64 expire timestamp
    v2: int16 2, int64 offset, string metadata, int64 commit timestamp
    v3: int16 3, int64 offset, int32 leader epoch, string metadata, int64 commit timestamp
Group metadata key (version 2): int16 version=2, string group
Group metadata value (we write version 3; versions 0-3 are read), as Kafka writes it when a
classic group's rebalance completes (the leader's SyncGroup), when it becomes Empty and when a
static member takes over its old place; a tombstone when the group is deleted:
    int16 version, string protocol type, int32 generation, nullable string protocol,
    nullable string leader, [v2+] int64 current state timestamp,
    int32 member count, then per member: string member id, [v3+] nullable string instance id,
    string client id, string client host, [v1+] int32 rebalance timeout,
    int32 session timeout, bytes subscription, bytes assignment (bytes = int32 length + data)
so that a classic group's membership survives a restart, as in Kafka.
Record types 3-23 are consumer, share and streams groups' (``modern_records``).

``replay`` reads every partition from its start in a worker thread at start-up and returns the
surviving offsets. Transactional batches (TxnOffsetCommit) and their markers are skipped:
when a transaction commits, the transaction coordinator writes its offsets again as a plain
commit before the markers, so replay never depends on markers (which compaction may drop).
``append`` writes on the event loop (page cache); the caller then waits for
the group commit before it acknowledges, so an acknowledged commit survives ``kill -9``.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from headrace.broker.log.replay import stored_records
from headrace.protocol.records import Record, build_batch

from .modern_records import MODERN_TYPES

log = logging.getLogger("headrace.groups")

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_V3_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    return (h & 0x7FFFFFFF if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _I16.pack(1) + _string(group_id) + _string(topic) + _I32.pack(partition)


def offset_value(c: CommittedOffset) -> bytes:
    return (
        _V3_HEAD.pack(3, c.offset, c.leader_epoch)
        + _string(c.metadata or "")
        + _I64.pack(c.commit_timestamp)
    )


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0:
            return ""
        raw = self.buf[self.pos : self.pos + n]
        if len(raw) != n:
            raise ValueError("string runs past the record")
        self.pos += n
        return raw.decode()


def parse_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit key; None for other record kinds."""
    r = _Reader(key)
    version = r.take(_I16)
    if version not in (0, 1):
        return None
    return r.string(), r.string(), r.take(_I32)


def parse_value(value: bytes) -> CommittedOffset:
    r = _Reader(value)
    version = r.take(_I16)
    offset = r.take(_I64)
    epoch = r.take(_I32) if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.take(_I64)
    expire_ts = r.take(_I64) if version == 1 else -1
    return CommittedOffset(offset, epoch, metadata, commit_ts, expire_ts)


GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[StoredMember, ...]


def _nullable(text: str | None) -> bytes:
    return _I16.pack(-1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + bytes(data)


def group_key(group_id: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(group_id)


def group_value(g: StoredGroup) -> bytes:
    out = [
        _I16.pack(GROUP_VALUE_VERSION),
        _string(g.protocol_type),
        _I32.pack(g.generation),
        _nullable(g.protocol),
        _nullable(g.leader),
        _I64.pack(g.state_timestamp),
        _I32.pack(len(g.members)),
    ]
    for m in g.members:
        out += [
            _string(m.member_id),
            _nullable(m.instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _I32.pack(m.rebalance_timeout_ms),
            _I32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(out)


def parse_group_key(key: bytes) -> str | None:
    """The group id of a group metadata key; None for other record kinds."""
    r = _Reader(key)
    if r.take(_I16) != GROUP_KEY_VERSION:
        return None
    return r.string()


def parse_group_value(value: bytes) -> StoredGroup:
    r = _Reader(value)
    version = r.take(_I16)
    if not 0 <= version <= 3:
        raise ValueError(f"group metadata value version {version}")

    def nullable() -> str | None:
        if _I16.unpack_from(r.buf, r.pos)[0] < 0:
            r.pos += 2
            return None
        return r.string()

    def data() -> bytes:
        n = r.take(_I32)
        raw = r.buf[r.pos : r.pos + max(n, 0)]
        if len(raw) != max(n, 0):
            raise ValueError("bytes run past the record")
        r.pos += len(raw)
        return bytes(raw)

    protocol_type = r.string()
    generation = r.take(_I32)
    protocol, leader = nullable(), nullable()
    timestamp = r.take(_I64) if version >= 2 else -1
    members = []
    for _ in range(r.take(_I32)):
        member_id = r.string()
        instance_id = nullable() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance = r.take(_I32) if version >= 1 else -1
        session = r.take(_I32)
        members.append(
            StoredMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance if rebalance >= 0 else session,
                session,
                data(),
                data(),
            )
        )
    return StoredGroup(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def build_commit_batch(entries: list[tuple[bytes, bytes | None]], now_ms: int) -> bytearray:
    """One record batch of (key, value-or-None) records, writable so offsets can be set."""
    return bytearray(build_batch([Record(key=k, value=v, timestamp=now_ms) for k, v in entries]))


def replay(
    partition_logs,
    metadata: dict[str, StoredGroup] | None = None,
    modern: dict[bytes, bytes] | None = None,
) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    """Read every log from its start (in a worker thread): group -> {(topic, p): offset}.
    Classic groups' stored membership goes into ``metadata`` when one is given, the
    surviving records of consumer, share and streams groups (``modern_records``) into
    ``modern``, key -> value."""
    groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
    for plog in partition_logs:
        # transactional batches are skipped: see the module docstring
        for key, value in stored_records(plog, skip_transactional=True):
            if key is None:
                continue
            try:
                parsed = parse_key(key)
                if parsed is None and _I16.unpack_from(key)[0] in MODERN_TYPES:
                    if modern is not None:
                        if value is None:
                            modern.pop(bytes(key), None)
                        else:
                            modern[bytes(key)] = bytes(value)
                    continue
                if parsed is None:
                    group_id = parse_group_key(key)
                    if group_id is not None and metadata is not None:
                        if value is None:
                            metadata.pop(group_id, None)
                        else:
                            metadata[group_id] = parse_group_value(value)
                    continue
                group, topic, part = parsed
                if value is None:
                    offsets = groups.get(group)
                    if offsets is not None:
                        offsets.pop((topic, part), None)
                else:
                    groups.setdefault(group, {})[(topic, part)] = parse_value(value)
            except (ValueError, struct.error, UnicodeDecodeError):
                log.warning("skipping a malformed record in %s", OFFSETS_TOPIC)
    return {g: o for g, o in groups.items() if o}
