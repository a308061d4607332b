"""Committed offsets of every group, classic and KIP-848, kept in ``__consumer_offsets``.

How this works
--------------
A group's offsets are cached on the group object (``group.offsets``: (topic, partition) ->
``CommittedOffset``); the log is the truth. ``write`` appends one record batch to the group's
partition of ``__consumer_offsets`` (a record per offset; a tombstone, no value, for a deleted
one) and answers once the group commit has flushed that log and, in a cluster, once the
partition's ISR has the batch (its high watermark passed it: Kafka writes commits with
acks=-1, waiting at most ``offsets.commit.timeout.ms``), so an acknowledged commit survives
``kill -9`` of its coordinator: the next leader of the partition was in the ISR and loads its
whole log. The cache is updated only then, in log order (a group's writes apply one after the
other), so OffsetFetch never shows an offset that a failover could take back. A write the ISR
did not take in time gets COORDINATOR_NOT_AVAILABLE (as NOT_ENOUGH_REPLICAS before the
append), a write whose partition stopped being led here NOT_COORDINATOR; clients retry both.
``load`` replays the topic at start-up and when this broker becomes a partition's leader (see
``group_offsets`` for the record layouts).

Offsets go away three ways, each written as tombstones so a restart does not bring them back:
deleted by an admin (DeleteGroups, OffsetDelete), expired (``expired``: groups without members
keep them ``offsets.retention.minutes`` after they emptied, or after the commit for groups that
never had members) and purged with their topic (``for_topics``, after DeleteTopics).

The classic groups' metadata records share the partition and the write path (``append`` and
``flush``, see ``group_membership``), and so do the records of consumer, share and streams
groups (``modern_group_log``).

Offsets committed in a transaction (TxnOffsetCommit) are written as the producer's
transactional batches, which the replay skips; ``load_pending`` reads back those of
transactions still open (no marker yet) for the group coordinator to hold until the marker.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from headrace.broker.log.replay import ReplayError
from headrace.protocol import ErrorCode
from headrace.protocol.records import decode_records, iter_batches
from headrace.storage import StorageError

from . import group_offsets
from .group_offsets import OFFSETS_TOPIC, CommittedOffset, StoredGroup

log = logging.getLogger("headrace.groups")

E = ErrorCode
Entry = tuple[str, int, CommittedOffset | None]  # topic, partition, offset (None: delete it)
# producer id -> group id -> offsets committed in its open transaction
PendingOffsets = dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]]


class OffsetStore:
    def __init__(
        self, topics, num_partitions: int, retention_ms: int, now_ms, commit_timeout_ms: int = 5000
    ) -> None:
        self.topics = topics
        self.num_partitions = num_partitions  # offsets.topic.num.partitions
        self.retention_ms = retention_ms  # offsets.retention.minutes
        self.now_ms = now_ms
        self.commit_timeout_s = commit_timeout_ms / 1000  # offsets.commit.timeout.ms
        # group id -> its latest write, done once applied (or failed): the next one waits
        self._writes: dict[str, asyncio.Future] = {}

    def _partitions(self, indexes: list[int] | None) -> list:
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return []
        if indexes is None:
            return topic.partitions
        return [topic.held[i] for i in indexes if i in topic.held]

    async def load(
        self, indexes: list[int] | None = None
    ) -> tuple[dict[str, dict], dict[str, StoredGroup], dict[bytes, bytes], dict[int, ReplayError]]:
        """Replay the topic (or its partitions ``indexes``, moved here), partition by
        partition: (group -> its offsets, group -> its last classic metadata, the consumer,
        share and streams groups' records (key -> value), partition -> why it could not be
        read whole). A partition that fails gives none of its groups."""
        loaded: dict[str, dict] = {}
        stored: dict[str, StoredGroup] = {}
        modern: dict[bytes, bytes] = {}
        failed: dict[int, ReplayError] = {}
        for partition in self._partitions(indexes):
            metadata: dict[str, StoredGroup] = {}
            records: dict[bytes, bytes] = {}
            try:
                found = await asyncio.to_thread(
                    group_offsets.replay, [partition.log], metadata, records
                )
            except ReplayError as e:
                failed[partition.index] = e
                continue
            loaded.update(found)  # a group's records are all in its one partition
            stored.update(metadata)
            modern.update(records)
        return loaded, stored, modern, failed

    async def load_pending(
        self, indexes: list[int] | None = None, skip: frozenset[int] = frozenset()
    ) -> PendingOffsets:
        """The offsets of transactions still open in the topic's partitions (or those of
        ``indexes``; not those of ``skip``), at start-up or when partitions move here."""
        pending: PendingOffsets = {}
        for partition in self._partitions(indexes):
            if partition.index in skip:
                continue
            ongoing = dict(partition.producers.ongoing)  # producer id -> first offset
            if ongoing:
                await asyncio.to_thread(_read_txn_offsets, partition.log, ongoing, pending)
        return pending

    async def topic(self):
        """``__consumer_offsets``, made on first use with ``offsets.topic.num.partitions``
        partitions (in a cluster, placed over the brokers like any topic)."""
        return await self.topics.internal(
            OFFSETS_TOPIC,
            self.num_partitions,
            {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024},
        )

    async def partition(self, group_id: str):
        """The partition of ``__consumer_offsets`` holding ``group_id``; ``NotHere`` when it
        is on another broker."""
        topic = await self.topic()
        return topic.held_partition(group_offsets.partition_for(group_id, topic.count))

    def append(self, partition, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append (key, value-or-None) records as one batch; an error code."""
        if partition.too_few_in_sync():
            return E.COORDINATOR_NOT_AVAILABLE  # NOT_ENOUGH_REPLICAS, as Kafka maps it
        batch = group_offsets.build_commit_batch(records, self.now_ms())
        error, _, _ = partition.append(memoryview(batch), len(batch))
        if error == E.NOT_LEADER_OR_FOLLOWER:  # the partition is moving away
            return E.NOT_COORDINATOR
        return error

    async def flush(self, partition, end: int | None = None) -> int:
        """Flush, then wait for the ISR to have the log up to ``end`` (default: the log end
        now); an error code."""
        if end is None:
            end = partition.log.log_end_offset
        try:
            await self.topics.flush([partition])
        except Exception:
            log.exception("flushing %s failed", OFFSETS_TOPIC)
            return E.KAFKA_STORAGE_ERROR
        error = await partition.replicated(end, self.commit_timeout_s)
        if error == E.NOT_LEADER_OR_FOLLOWER:
            return E.NOT_COORDINATOR
        if error:
            log.info(
                "%s-%d: a write was not replicated (error %d)",
                OFFSETS_TOPIC,
                partition.index,
                error,
            )
            return E.COORDINATOR_NOT_AVAILABLE
        return E.NONE

    async def write(self, group, entries: list[Entry]) -> int:
        """Append and flush; update the cache in log order. Returns an error code."""
        if not entries:
            return E.NONE
        try:
            partition = await self.partition(group.group_id)
        except StorageError:
            log.exception("cannot create %s", OFFSETS_TOPIC)
            return E.COORDINATOR_NOT_AVAILABLE
        error = self.append(
            partition,
            [
                (
                    group_offsets.offset_key(group.group_id, t, p),
                    None if c is None else group_offsets.offset_value(c),
                )
                for t, p, c in entries
            ],
        )
        if error:
            return error
        end = partition.log.log_end_offset
        group_id = group.group_id
        previous = self._writes.get(group_id)
        applied = asyncio.get_running_loop().create_future()
        self._writes[group_id] = applied
        try:
            error = await self.flush(partition, end)
            if previous is not None:
                await asyncio.wait([previous])  # the group's earlier writes apply first
            if not error:
                for t, p, c in entries:
                    if c is None:
                        group.offsets.pop((t, p), None)
                    else:
                        group.offsets[(t, p)] = c
            return error
        finally:
            applied.set_result(None)
            if self._writes.get(group_id) is applied:
                del self._writes[group_id]

    async def delete_all(self, group) -> int:
        return await self.write(group, [(t, p, None) for t, p in list(group.offsets)])

    def expired(self, group, now: int) -> list[Entry]:
        """Tombstones for the offsets of ``group`` (one without members) past retention."""
        doomed: list[Entry] = []
        for (t, p), c in group.offsets.items():
            if c.expire_timestamp >= 0:
                deadline = c.expire_timestamp
            else:
                base = c.commit_timestamp
                if group.protocol_type is not None and group.empty_since_ms is not None:
                    base = group.empty_since_ms
                deadline = base + self.retention_ms
            if now >= deadline:
                doomed.append((t, p, None))
        return doomed

    @staticmethod
    def for_topics(group, names) -> list[Entry]:
        """Tombstones for the offsets of ``group`` in the topics ``names``."""
        doomed: list[Entry] = [(t, p, None) for t, p in group.offsets if t in names]
        return doomed


def _read_txn_offsets(plog, ongoing: dict[int, int], found: PendingOffsets) -> None:
    """Add to ``found`` the offsets in the transactional batches of the ``ongoing`` producers
    (producer id -> first offset of its open transaction), reading from the first of them."""
    offset, end = min(ongoing.values()), plog.log_end_offset
    while offset < end:
        data = plog.read(offset, 1 << 20, max_offset=end)
        start = offset
        for pos, size, h in iter_batches(data) if data else ():
            offset = h.base_offset + h.last_offset_delta + 1
            first = ongoing.get(h.producer_id)
            if first is None or h.base_offset < first or not h.is_transactional or h.is_control:
                continue
            try:
                for _, _, k, v, _ in decode_records(memoryview(data)[pos : pos + size]):
                    parsed = group_offsets.parse_key(k) if k is not None else None
                    if parsed is None or v is None:
                        continue
                    group, topic, part = parsed
                    groups = found.setdefault(h.producer_id, {})
                    groups.setdefault(group, {})[(topic, part)] = group_offsets.parse_value(v)
            except (ValueError, struct.error, UnicodeDecodeError):
                log.warning("skipping a malformed transactional batch in %s", OFFSETS_TOPIC)
        if offset <= start:
            break  # nothing readable there
