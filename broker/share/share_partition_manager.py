"""The share partitions this broker keeps, and the share sessions of the consumers fetching
from them: one ``SharePartition`` per share group and partition it leads, made at the group's
first ShareFetch there.

How this works
--------------
A new share partition starts where the group's ``share.auto.offset.reset`` says (group
configs, default ``latest``): the log start (``earliest``), the high watermark (``latest``),
or the first batch written in the last ``by_duration:<ISO 8601 duration>``. The group's
``share.delivery.count.limit``, ``share.record.lock.duration.ms`` and
``share.partition.max.record.locks`` are read at each use, so a change applies at once.

At most ``group.share.max.partitions`` share partitions are kept; one more is refused until
a group's partitions go (the group is deleted, the topic deleted or moved away).

Persistence (with a ``persister``: the share coordinator's client): a share partition is read
from the persister when made here, so a new leader or a restarted broker goes on where the
last one stopped (a partition never written starts as above, and is initialized so). Its
changes (acknowledgements, releases, with their delivery counts: ``SharePartition.changes``)
are written in the background, one write at a time per share partition, each carrying all
changes made while the previous one was on its way (a group commit), with the count of
records done past the start offset (the delivery-complete count the lag is computed from),
after the dead letters it archives are copied to the group's dead-letter queue
(dead_letters.py); ``durable`` waits until the changes made so far are written, and
ShareAcknowledge and ShareFetch answer only then, so an acknowledgement answered is never
undone by a restart or a leader change. A write fenced by a newer leader or state epoch
(AlterShareGroupOffsets initializes the state afresh with a newer one), or refused because
the state is gone (DeleteShareGroupOffsets, DeleteGroups), drops the share partition here: it
is read afresh at the next fetch. Those admin APIs also drop the group's share partitions at
the broker that answers them; a leader elsewhere that only hands out records and writes
nothing serves its old state until its next write, as in Kafka, which relies on the same
fencing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from headrace.broker.coordinator.group.group_configs import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_ISOLATION_LEVEL,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    SHARE_RECORD_LOCK_DURATION,
    auto_offset_reset,
)
from headrace.protocol import ErrorCode

from .share_partition import SharePartition
from .share_sessions import ShareSession, ShareSessions

log = logging.getLogger("headrace.share")


class SharePartitionLimit(Exception):
    pass


class ShareStateError(Exception):
    """The persister could not read or initialize a share partition's state."""

    def __init__(self, code: int) -> None:
        super().__init__(ErrorCode(code).name)
        self.code = code


class SharePartitionManager:
    def __init__(
        self,
        configs,
        max_partitions: int,
        max_sessions: int,
        read_pool,
        persister=None,
        dead_letters=None,
    ) -> None:
        self.configs = configs  # group configs (coordinator/group/group_configs.py)
        self.max_partitions = max_partitions
        self.read_pool = read_pool
        self.persister = persister  # None: the state lives in memory only
        self.dead_letters = dead_letters  # the share groups' dead-letter queues (or None)
        self.partitions: dict[tuple[str, object, int], SharePartition] = {}
        # the key, Partition and state epoch of each share partition led here
        self._led: dict[SharePartition, tuple[tuple, Any, int]] = {}
        self._next: dict[SharePartition, asyncio.Future] = {}  # the write being gathered
        self._writing: dict[SharePartition, asyncio.Future] = {}  # the write on its way
        self._opening: dict[tuple, asyncio.Future] = {}
        self.sessions = ShareSessions(max_sessions, self.session_ended)

    def get(self, group_id: str, topic_id, index: int) -> SharePartition | None:
        return self.partitions.get((group_id, topic_id, index))

    async def open(self, group_id: str, partition) -> SharePartition:
        """The group's share partition of ``partition`` (a Partition led here), made if
        new; SharePartitionLimit when there is no room for one more."""
        key = (group_id, partition.topic.topic_id, partition.index)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        opening = self._opening.get(key)
        if opening is not None:  # another fetch is making it
            return await asyncio.shield(opening)
        if len(self.partitions) + len(self._opening) >= self.max_partitions:
            raise SharePartitionLimit(
                f"{self.max_partitions} share partitions kept (group.share.max.partitions)"
            )
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            made = SharePartition(
                group_id,
                0,
                delivery_limit=lambda: self.configs.value(group_id, SHARE_DELIVERY_COUNT_LIMIT),
                on_change=lambda: self._changed(made),
            )
            state_epoch = await self._load(made, key, partition)
            self.partitions[key] = made
            self._led[made] = (key, partition, state_epoch)
            future.set_result(made)
            return made
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a waiter may not exist
            raise
        finally:
            del self._opening[key]

    async def _load(self, sp: SharePartition, key: tuple, partition) -> int:
        """Set ``sp`` up from the persister (or the reset policy); its state epoch."""
        group_id, topic_id, index = key
        if self.persister is None:
            sp.restore(await self._start_offset(group_id, partition), ())
            return 0
        read = await self.persister.read(group_id, topic_id, index, _epoch(partition))
        if read.error:
            raise ShareStateError(read.error)
        if read.start_offset >= 0:
            sp.restore(read.start_offset, read.batches)
            return read.state_epoch
        # never initialized, or initialized without a start offset: start where the reset
        # policy says, at the state epoch read (an older one would be fenced)
        start = await self._start_offset(group_id, partition)
        error = await self.persister.initialize(group_id, topic_id, index, read.state_epoch, start)
        if error:
            raise ShareStateError(error)
        sp.restore(start, ())
        return read.state_epoch

    def _changed(self, sp: SharePartition) -> None:
        """``sp`` has changes to write: gather them into the next write."""
        if self.persister is None or sp not in self._led:
            sp.changes.clear()
            sp.dead.clear()
            return
        if sp not in self._next:
            self._next[sp] = asyncio.get_running_loop().create_future()
            if sp not in self._writing:
                asyncio.get_running_loop().create_task(self._write(sp))

    async def durable(self, sp: SharePartition) -> int:
        """NONE once the changes made to ``sp`` so far are written; else the write's error."""
        future = self._next.get(sp) or self._writing.get(sp)
        return ErrorCode.NONE if future is None else await asyncio.shield(future)

    async def _write(self, sp: SharePartition) -> None:
        while sp in self._next:
            future = self._writing[sp] = self._next.pop(sp)
            batches, sp.changes = sp.changes, []
            led = self._led.get(sp)
            if led is None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                (group_id, topic_id, index), led_partition, state_epoch = led
                dead, sp.dead = sp.dead, []
                letters = self.dead_letters
                if dead and letters is not None and letters.enabled(group_id):
                    await letters.send(group_id, led_partition, dead)  # before they are archived
                try:
                    error = await self.persister.write(
                        group_id,
                        topic_id,
                        index,
                        state_epoch,
                        _epoch(led_partition),
                        sp.start,
                        batches,
                        sp.delivery_complete(),
                    )
                except Exception:
                    log.exception("writing the share state of %s failed", led[0])
                    error = ErrorCode.UNKNOWN_SERVER_ERROR
                if error in (
                    ErrorCode.FENCED_LEADER_EPOCH,
                    ErrorCode.FENCED_STATE_EPOCH,
                    ErrorCode.INVALID_REQUEST,  # the state was deleted meanwhile
                ):
                    self.forget(group_id, topic_id, index)  # read afresh next time
            del self._writing[sp]
            future.set_result(error)

    def lock_ms(self, group_id: str) -> int:
        return self.configs.value(group_id, SHARE_RECORD_LOCK_DURATION)

    def isolation(self, group_id: str) -> str:
        return str(self.configs.value(group_id, SHARE_ISOLATION_LEVEL))

    def max_locks(self, group_id: str) -> int:
        return self.configs.value(group_id, SHARE_PARTITION_MAX_RECORD_LOCKS)

    def session_ended(self, session: ShareSession) -> None:
        """Give back what the member of an ended share session holds on its partitions."""
        for topic_id, index in session.partitions:
            sp = self.partitions.get((session.group_id, topic_id, index))
            if sp is not None:
                sp.release(session.member_id)

    def forget_topics(self, gone) -> None:
        """Drop the share partitions of the topics ``gone(topic id)`` says are deleted."""
        for topic_id in {t for _, t, _ in self.partitions}:
            if gone(topic_id):
                self.forget(topic_id=topic_id)

    def forget(self, group_id: str | None = None, topic_id=None, index: int | None = None):
        """Drop the share partitions of a group, of a topic, or of one partition."""
        for key in list(self.partitions):
            g, t, i = key
            if (
                (group_id is None or g == group_id)
                and (topic_id is None or t == topic_id)
                and (index is None or i == index)
            ):
                sp = self.partitions.pop(key)
                self._led.pop(sp, None)
                sp.close()

    def close(self) -> None:
        self.sessions.close()
        for sp in self.partitions.values():
            sp.close()
        self.partitions.clear()
        self._led.clear()

    async def _start_offset(self, group_id: str, partition) -> int:
        strategy, back_ms = auto_offset_reset(
            str(self.configs.value(group_id, SHARE_AUTO_OFFSET_RESET))
        )
        log = partition.log
        if strategy == "earliest":
            return log.log_start_offset
        if strategy == "by_duration" and back_ms is not None:
            found = await asyncio.wrap_future(
                self.read_pool.submit(log.offset_for_timestamp, int(time.time() * 1000) - back_ms)
            )
            if found is not None:
                return max(found[0], log.log_start_offset)
        return partition.high_watermark


def _epoch(partition) -> int:
    """The leader epoch the share coordinator fences by (a broker on its own has none: 0)."""
    return max(partition.leader_epoch, 0)
