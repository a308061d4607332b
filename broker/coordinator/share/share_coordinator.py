"""The share coordinator: the persisted state of share partitions (KIP-932), for the leaders
of the partitions share groups read.

How this works
--------------
A share-partition key (group id, topic id, partition) belongs to one partition of
``__share_group_state`` (``share_state_log.state_partition``), and the leader of that partition
is the key's coordinator, as in Kafka. The coordinator keeps each key's state in memory
(``states``: state epoch, leader epoch, start offset, state batches) and answers from there;
every change is first a record appended to the partition, flushed and taken by its ISR (acks=all:
at most ``share.coordinator.write.timeout.ms``, else COORDINATOR_NOT_AVAILABLE; an ISR below the
topic's ``min.insync.replicas`` refuses before the append), and made in memory only then, so a
leader that was told a write succeeded never sees it undone by a restart or a coordinator move.
One request per key runs at a time (a lock per key): a key's records are in the order its
changes were made.

The records are Kafka's (share_state_log.py): Initialize writes a snapshot (the whole state);
Write writes an update holding only the written batches, and every
``share.coordinator.snapshot.update.records.per.snapshot`` updates a snapshot with the merged
state instead, so a load replays at most that many updates per key; Delete writes a tombstone.
A write whose record was appended but not acknowledged by the ISR in time may still reach it
later: the key's next write is then a snapshot, which settles the state either way.

The answers are Kafka's (``ShareCoordinatorShard``):

* Initialize (state epoch, start offset): a state epoch below the stored one is
  FENCED_STATE_EPOCH; else the key starts afresh (no batches; the highest leader epoch seen
  is kept, as Kafka keeps it).
* Read (leader epoch): an uninitialized key is INVALID_REQUEST ("Read operation on
  uninitialized share partition not allowed."); a leader epoch below the stored one
  FENCED_LEADER_EPOCH; a newer one is recorded (an update record) before the answer, which
  fences the previous leader's writes.
* Write (state epoch, leader epoch, start offset, batches): uninitialized is INVALID_REQUEST,
  an older leader epoch FENCED_LEADER_EPOCH, an older state epoch FENCED_STATE_EPOCH. The start
  offset only moves forward; the batches are merged into the stored ones and those below the
  start offset dropped (``state_batches.combine``).
* Delete: a tombstone (nothing to do for an unknown key).
* ReadSummary: start offset, leader and state epochs and the delivery-complete count (KIP-1226:
  what Kafka reports the lag from); an uninitialized key answers start offset -1, count -1.

A topic id the cluster does not know, or a partition beyond its count, is
UNKNOWN_TOPIC_OR_PARTITION; negative partitions and epochs INVALID_REQUEST.

Bounds: at most ``share.coordinator.state.max.count`` keys are kept (an Initialize of one more
is INVALID_REQUEST until keys are deleted); a write with more than
``share.coordinator.state.max.batches`` batches, or whose merged state would hold more, or a
batch with its last offset before its first, is INVALID_REQUEST (a leader's batches are
bounded by its record locks; these bounds hold against any client).

The partitions of ``__share_group_state`` are loaded when this broker comes to lead them
(``partitions_moved``; a broker on its own loads them all at start) and their keys forgotten
when it stops; meanwhile their keys answer COORDINATOR_LOAD_IN_PROGRESS, keys of partitions led
elsewhere NOT_COORDINATOR. Every ``share.coordinator.state.topic.prune.interval.ms`` each
partition led here drops its records below the oldest snapshot a live key still needs
(``prune``): the topic is not compacted, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

from headrace.broker.background import run_every, wall_clock_ms
from headrace.broker.log.replay import ReplayError
from headrace.protocol import ErrorCode
from headrace.storage import StorageError

from . import share_state_log
from .share_state_log import (
    SHARE_STATE_TOPIC,
    ShareGroupOffset,
    ShareKey,
    snapshot_record,
    state_partition,
    tombstone_record,
    update_record,
)
from .state_batches import StateBatch, combine

log = logging.getLogger("headrace.share")

E = ErrorCode
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
REQUEST_CONCURRENCY = 32  # partitions of one request answered at once
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReadAnswer:
    error: int
    message: str | None = None
    state_epoch: int = 0
    start_offset: int = 0
    batches: list[StateBatch] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SummaryAnswer:
    error: int
    message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = 0
    delivery_complete_count: int = -1


class ShareCoordinator:
    """Built from what it uses: the topic table (``__share_group_state`` lives there and is
    made on first use), ``partition_count(topic id)`` (the partitions of a topic of the
    cluster, None for an unknown id), this node's id and the settings it reads."""

    def __init__(
        self,
        topics,
        partition_count: Callable[[uuid.UUID], int | None],
        *,
        node_id: int,
        state_partitions: int,
        state_segment_bytes: int,
        updates_per_snapshot: int,
        write_timeout_ms: int,
        max_keys: int,
        max_batches: int,
        prune_interval_ms: int = 300000,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topics = topics
        self.partition_count = partition_count
        self.node_id = node_id
        self.state_partitions = state_partitions
        self.state_segment_bytes = state_segment_bytes
        self.updates_per_snapshot = updates_per_snapshot
        self.write_timeout_s = write_timeout_ms / 1000
        self.max_keys = max_keys
        self.max_batches = max_batches
        self.prune_interval_ms = prune_interval_ms
        self.now_ms = now_ms
        self.states: dict[ShareKey, ShareGroupOffset] = {}
        self._updates: dict[ShareKey, int] = {}  # update records since the key's snapshot
        self._snapshots: dict[ShareKey, int] = {}  # offset of the key's last snapshot
        # partitions of __share_group_state held here whose keys are not served
        # (COORDINATOR_LOAD_IN_PROGRESS): being loaded, or their replay failed
        self.loading: set[int] = set()
        self.unavailable: set[int] = set()
        self._locks: dict[ShareKey, tuple[asyncio.Lock, int]] = {}
        self._tasks: list[asyncio.Task] = []

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self, load: bool = True) -> None:
        """Load the keys (unless ``load`` is False: in a cluster the partitions this broker
        leads are loaded as it comes to lead them) and start pruning."""
        topic = self.topics.get(SHARE_STATE_TOPIC)
        if topic is not None and load:
            await self._load(list(topic.held.values()))
        every_s = self.prune_interval_ms / 1000
        self._tasks.append(
            asyncio.create_task(run_every(every_s, self.prune, "share state pruning"))
        )

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _load(self, partitions) -> None:
        loaded = 0
        for partition in partitions:
            try:
                found = await asyncio.to_thread(share_state_log.replay, partition.log)
            except ReplayError as e:
                log.error(
                    "cannot load the share-partition states of %s-%d: %s; they answer"
                    " COORDINATOR_LOAD_IN_PROGRESS until the partition is repaired (headrace"
                    " verify names the bad position) and the broker restarted",
                    SHARE_STATE_TOPIC,
                    partition.index,
                    e,
                )
                self.unavailable.add(partition.index)
                continue
            self.states.update(found.states)
            self._updates.update(found.updates)
            self._snapshots.update(found.snapshot_offsets)
            loaded += len(found.states)
        if loaded:
            log.info("loaded %d share-partition states", loaded)

    async def partitions_moved(self, gained: list[int], lost: list[int]) -> None:
        """Partitions of ``__share_group_state`` moved here (their keys are loaded) or away
        (their keys are forgotten here)."""
        self.loading.update(gained)
        try:
            self.unavailable.difference_update(lost)
            topic = self.topics.get(SHARE_STATE_TOPIC)
            if topic is None:
                return
            if lost:
                doomed = [k for k in self.states if state_partition(k, topic.count) in lost]
                for key in doomed:
                    self._forget(key)
                if doomed:
                    log.info(
                        "unloaded %d share-partition states (partitions %s moved away)",
                        len(doomed),
                        lost,
                    )
            if gained:
                await self._load([topic.held[i] for i in gained if i in topic.held])
        finally:
            self.loading.difference_update(gained)

    def _forget(self, key: ShareKey) -> None:
        self.states.pop(key, None)
        self._updates.pop(key, None)
        self._snapshots.pop(key, None)

    # where keys are ----------------------------------------------------------------------------

    async def _state_topic(self):
        """``__share_group_state``, made on first use: not compacted, kept for ever (records
        go only by ``prune``), as Kafka makes it."""
        return await self.topics.internal(
            SHARE_STATE_TOPIC,
            self.state_partitions,
            {
                "cleanup.policy": "delete",
                "retention.ms": -1,
                "segment.bytes": self.state_segment_bytes,
            },
        )

    async def coordinator_for(self, key: ShareKey) -> int:
        """The broker that coordinates ``key``: the leader of its partition of
        ``__share_group_state`` (made on first use); -1 when it has none."""
        topic = await self._state_topic()
        return self.topics.cluster.leader(SHARE_STATE_TOPIC, state_partition(key, topic.count))

    def not_served(self, key: ShareKey) -> int:
        """Why a request for ``key`` cannot be served here: NOT_COORDINATOR (its partition is
        led elsewhere), COORDINATOR_LOAD_IN_PROGRESS (being loaded, or failed to load), or
        NONE. Before the topic exists, the leader its partition 0 will have serves."""
        topic = self.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            here = self.topics.cluster.leader(SHARE_STATE_TOPIC, 0) == self.node_id
            return E.NONE if here else E.NOT_COORDINATOR
        index = state_partition(key, topic.count)
        if topic.partition(index) is None:
            return E.NOT_COORDINATOR
        if index in self.loading or index in self.unavailable:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    @asynccontextmanager
    async def _key_lock(self, key: ShareKey):
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def _unknown_partition(self, key: ShareKey) -> bool:
        count = self.partition_count(key[1])
        return count is None or key[2] >= count

    # writing -----------------------------------------------------------------------------------

    async def _append(self, key: ShareKey, record) -> tuple[int, int]:
        """Append ``record`` to ``key``'s partition, flush it and wait for its ISR: (error,
        the record's offset)."""
        try:
            topic = await self._state_topic()
            partition = topic.held_partition(state_partition(key, topic.count))
            if partition.too_few_in_sync():  # NOT_ENOUGH_REPLICAS, as Kafka maps it
                return E.COORDINATOR_NOT_AVAILABLE, -1
            batch = share_state_log.record_batch(record)
            error, offset, _ = partition.append(memoryview(batch), len(batch))
            if error == E.NOT_LEADER_OR_FOLLOWER:
                return E.NOT_COORDINATOR, -1
            if error:
                return error, -1
            end = partition.log.log_end_offset
            await self.topics.flush([partition])
            if partition.gone:  # moved away meanwhile: the new coordinator read the record
                return E.NOT_COORDINATOR, -1
            error = await partition.replicated(end, self.write_timeout_s)
        except StorageError:  # (NotHere too: the partition is led elsewhere now)
            log.warning("writing the share state of %s failed", key, exc_info=True)
            return E.NOT_COORDINATOR, -1
        if error == E.NOT_LEADER_OR_FOLLOWER:
            return E.NOT_COORDINATOR, -1
        if error:
            log.info("share state of %s: the write was not replicated (error %d)", key, error)
            # the record may reach the ISR later: the next write settles it with a snapshot
            self._updates[key] = max(self.updates_per_snapshot, 1) + 1
            return E.COORDINATOR_NOT_AVAILABLE, -1
        return E.NONE, offset

    async def _write_state(
        self, key: ShareKey, new: ShareGroupOffset, write: ShareGroupOffset | None
    ) -> int:
        """Make ``new`` the key's state: as a snapshot of it when ``write`` is None (or a
        snapshot is due), else as an update record of ``write``."""
        now = self.now_ms()
        snapshot = write is None or self._updates.get(key, 0) >= self.updates_per_snapshot
        if snapshot:
            error, offset = await self._append(key, snapshot_record(key, new, now))
        else:
            assert write is not None
            error, offset = await self._append(key, update_record(key, write, now))
        if error:
            return error
        self.states[key] = new
        if snapshot:
            self._updates[key] = 0
            self._snapshots[key] = offset
        else:
            self._updates[key] = self._updates.get(key, 0) + 1
        return E.NONE

    async def _changed(
        self,
        key: ShareKey,
        current: ShareGroupOffset,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: list[StateBatch],
    ) -> tuple[int, str | None]:
        """A write (or a read's new leader epoch): Kafka's ``generateShareStateRecord``."""
        start = max(start_offset, current.start_offset)
        count = delivery_complete_count
        if start_offset == current.start_offset:
            count = max(delivery_complete_count, current.delivery_complete_count)
        elif start_offset < current.start_offset:
            count = current.delivery_complete_count
        merged = combine(current.batches, batches, start)
        if len(merged) > self.max_batches:
            return E.INVALID_REQUEST, (
                f"the state would hold {len(merged)} batches, more than"
                f" share.coordinator.state.max.batches ({self.max_batches})"
            )
        now = self.now_ms()
        due = self._updates.get(key, 0) >= self.updates_per_snapshot
        new = ShareGroupOffset(
            current.snapshot_epoch + (1 if due else 0),
            current.state_epoch,
            leader_epoch,
            start,
            count,
            merged,
            now if due else current.create_ms,
            now if due else current.write_ms,
        )
        update = ShareGroupOffset(
            current.snapshot_epoch,
            current.state_epoch,
            leader_epoch,
            start,
            count,
            combine([], batches, start),
        )
        return await self._write_state(key, new, None if due else update), None

    # requests ----------------------------------------------------------------------------------

    async def initialize(
        self, key: ShareKey, state_epoch: int, start_offset: int
    ) -> tuple[int, str | None]:
        """InitializeShareGroupState for one key: (error, message)."""
        if key[2] < 0:
            return E.INVALID_REQUEST, "The partition id cannot be a negative number."
        if state_epoch < 0:
            return E.INVALID_REQUEST, "The state epoch cannot be a negative number."
        error = self.not_served(key)
        if error:
            return error, None
        async with self._key_lock(key):
            current = self.states.get(key)
            if current is not None and current.state_epoch > state_epoch:
                return E.FENCED_STATE_EPOCH, None
            if self._unknown_partition(key):
                return E.UNKNOWN_TOPIC_OR_PARTITION, None
            if current is None and len(self.states) >= self.max_keys:
                return E.INVALID_REQUEST, (
                    f"{len(self.states)} share-partition states are kept here, the most"
                    " share.coordinator.state.max.count allows"
                )
            now = self.now_ms()
            # the leader epoch seen stays (Kafka keeps the highest seen apart from the state;
            # here the snapshot carries it, so that a load and pruning keep it too)
            new = ShareGroupOffset(
                current.snapshot_epoch + 1 if current is not None else 0,
                state_epoch,
                current.leader_epoch if current is not None else 0,
                start_offset,
                -1 if start_offset == -1 else 0,
                [],
                now,
                now,
            )
            return await self._write_state(key, new, None), None

    async def read(self, key: ShareKey, leader_epoch: int) -> ReadAnswer:
        """ReadShareGroupState for one key (recording a newer leader epoch first)."""
        if key[2] < 0:
            return ReadAnswer(E.INVALID_REQUEST, "The partition id cannot be a negative number.")
        if leader_epoch < 0:
            return ReadAnswer(E.INVALID_REQUEST, "The leader epoch cannot be a negative number.")
        error = self.not_served(key)
        if error:
            return ReadAnswer(error)
        async with self._key_lock(key):
            current = self.states.get(key)
            if current is None:
                return ReadAnswer(E.INVALID_REQUEST, READ_UNINITIALIZED)
            if current.leader_epoch > leader_epoch:
                return ReadAnswer(E.FENCED_LEADER_EPOCH)
            if self._unknown_partition(key):
                return ReadAnswer(E.UNKNOWN_TOPIC_OR_PARTITION)
            if current.leader_epoch != leader_epoch:
                error, message = await self._changed(
                    key,
                    current,
                    leader_epoch,
                    current.start_offset,
                    current.delivery_complete_count,
                    [],
                )
                if error:
                    return ReadAnswer(error, message)
            return ReadAnswer(
                E.NONE, None, current.state_epoch, current.start_offset, list(current.batches)
            )

    async def write(
        self,
        key: ShareKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[Sequence[int]],
        delivery_complete_count: int = -1,
    ) -> tuple[int, str | None]:
        """WriteShareGroupState for one key: (error, message)."""
        if key[2] < 0:
            return E.INVALID_REQUEST, "The partition id cannot be a negative number."
        if leader_epoch < 0:
            return E.INVALID_REQUEST, "The leader epoch cannot be a negative number."
        if state_epoch < 0:
            return E.INVALID_REQUEST, "The state epoch cannot be a negative number."
        if len(batches) > self.max_batches:
            return E.INVALID_REQUEST, (
                f"{len(batches)} state batches, more than share.coordinator.state.max.batches"
                f" ({self.max_batches})"
            )
        written = [StateBatch(*b) for b in batches]
        if any(b.last_offset < b.first_offset or b.first_offset < 0 for b in written):
            return E.INVALID_REQUEST, "A state batch ends before it starts."
        error = self.not_served(key)
        if error:
            return error, None
        async with self._key_lock(key):
            current = self.states.get(key)
            if current is None:
                return E.INVALID_REQUEST, WRITE_UNINITIALIZED
            if current.leader_epoch > leader_epoch:
                return E.FENCED_LEADER_EPOCH, None
            if current.state_epoch > state_epoch:
                return E.FENCED_STATE_EPOCH, None
            if self._unknown_partition(key):
                return E.UNKNOWN_TOPIC_OR_PARTITION, None
            # (a write does not move the stored leader epoch: a read does, as in Kafka)
            return await self._changed(
                key,
                current,
                current.leader_epoch,
                start_offset,
                delivery_complete_count,
                written,
            )

    async def delete(self, key: ShareKey) -> tuple[int, str | None]:
        """DeleteShareGroupState for one key: (error, message)."""
        if key[2] < 0:
            return E.INVALID_REQUEST, "The partition id cannot be a negative number."
        error = self.not_served(key)
        if error:
            return error, None
        async with self._key_lock(key):
            if self._unknown_partition(key):
                return E.UNKNOWN_TOPIC_OR_PARTITION, None
            if key not in self.states:
                return E.NONE, None
            error, _ = await self._append(key, tombstone_record(key, self.now_ms()))
            if error:
                return error, None
            self._forget(key)
            return E.NONE, None

    def read_summary(self, key: ShareKey) -> SummaryAnswer:
        """ReadShareGroupStateSummary for one key."""
        if key[2] < 0:
            return SummaryAnswer(E.INVALID_REQUEST, "The partition id cannot be a negative number.")
        error = self.not_served(key)
        if error:
            return SummaryAnswer(error)
        if self._unknown_partition(key):
            return SummaryAnswer(E.UNKNOWN_TOPIC_OR_PARTITION)
        current = self.states.get(key)
        if current is None:
            return SummaryAnswer(E.NONE, None, 0, 0, -1, -1)
        return SummaryAnswer(
            E.NONE,
            None,
            current.state_epoch,
            current.leader_epoch,
            current.start_offset,
            current.delivery_complete_count,
        )

    def describe(self, key: ShareKey) -> ShareGroupOffset | None:
        """The state kept for ``key`` (a copy), None when it has none here."""
        current = self.states.get(key)
        return None if current is None else replace(current, batches=list(current.batches))

    # pruning -----------------------------------------------------------------------------------

    async def prune(self) -> None:
        """Drop the records of each partition led here below the oldest snapshot a live key
        still needs (all of them up to the high watermark when it holds no live key)."""
        topic = self.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            return
        oldest: dict[int, int] = {}
        for key, offset in self._snapshots.items():
            index = state_partition(key, topic.count)
            oldest[index] = min(offset, oldest.get(index, offset))
        for index in list(topic.held):
            partition = topic.partition(index)
            if partition is None or index in self.loading or index in self.unavailable:
                continue
            keep = min(oldest.get(index, partition.high_watermark), partition.high_watermark)
            if keep > partition.log.log_start_offset:
                try:
                    await asyncio.to_thread(partition.log.delete_records_before, keep)
                except StorageError:
                    log.warning("pruning %s-%d failed", SHARE_STATE_TOPIC, index, exc_info=True)


async def answer_all(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """The answers of ``calls``, in their order, ``REQUEST_CONCURRENCY`` at a time (the
    partitions of one request: a request naming a million is answered a slice at a time)."""
    answers: list[T] = []
    for i in range(0, len(calls), REQUEST_CONCURRENCY):
        answers.extend(await asyncio.gather(*(c() for c in calls[i : i + REQUEST_CONCURRENCY])))
    return answers


__all__ = [
    "READ_UNINITIALIZED",
    "ReadAnswer",
    "ShareCoordinator",
    "SummaryAnswer",
    "answer_all",
]
