"""``_schemas``: the compacted topic the registry keeps everything in (one partition, as
Confluent's registry has it), written by its leader and read by every broker that holds a
replica of it.

How this works
--------------
The writer is the leader of ``_schemas`` partition 0 (made on first use: compacted, kept for
ever, ``schema.registry.topic.replication.factor`` replicas). ``append`` writes one batch of
records there, flushes it and waits for the ISR to have it (acks=all, at most
``schema.registry.write.timeout.ms``); any failure is a ``RegistryError`` (a write that was
not acknowledged may still reach the ISR: its records are then applied like any other, and
the next write sees them).

Every broker holding a replica (leader or follower) reads it (``SchemasReader``): records
below the replica's high watermark, in offset order (transactional batches skipped: the
registry never writes any), are applied to the broker's
``RegistryState``; ``applied`` is the offset after the last one applied. A reader task waits
for the partition's next append or high-watermark move (or polls every ``POLL_S``) and
catches up; ``wait_for(offset)`` lets a request wait until what it wrote (or what the writer
said it wrote) is applied here: read-your-writes at the broker that answered the write.
When the replica held here is replaced (moved away and back, or recreated) the state is
rebuilt from the start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Callable

from headrace.broker.background import wall_clock_ms
from headrace.broker.log.replay import ReplayError, stored_records_at
from headrace.protocol import ErrorCode
from headrace.protocol.records import Record, build_batch
from headrace.storage import StorageError

from . import errors
from .records import decode
from .state import RegistryState

log = logging.getLogger("headrace.registry")

SCHEMAS_TOPIC = "_schemas"
POLL_S = 0.25
E = ErrorCode


class SchemasLog:
    """The topic, as the registry writes it: built from the topic table, the cluster metadata,
    this node's id and the write timeout."""

    def __init__(self, topics, cluster, *, node_id: int, write_timeout_ms: int) -> None:
        self.topics, self.cluster, self.node_id = topics, cluster, node_id
        self.write_timeout_s = write_timeout_ms / 1000

    async def topic(self):
        return await self.topics.internal(
            SCHEMAS_TOPIC, 1, {"cleanup.policy": "compact", "retention.ms": -1}
        )

    def leader(self) -> int:
        """The node that leads partition 0 (-1: none now)."""
        return self.cluster.leader(SCHEMAS_TOPIC, 0)

    def replica(self):
        """The replica of partition 0 held here (led or followed), or None."""
        topic = self.topics.get(SCHEMAS_TOPIC)
        if topic is None:
            return None
        p = topic.held.get(0)
        return None if p is None or p.gone else p

    def leads(self) -> bool:
        topic = self.topics.get(SCHEMAS_TOPIC)
        return topic is not None and topic.partition(0) is not None

    async def append(self, pairs: list[tuple[bytes, bytes | None]]) -> int:
        """Write ``pairs`` (key, value) as one batch, acks=all: the offset after them."""
        try:
            topic = await self.topic()
            partition = topic.held_partition(0)
            if partition.too_few_in_sync():
                raise errors.store_error("_schemas has fewer in-sync replicas than it needs")
            now = wall_clock_ms()
            batch = bytearray(build_batch([Record(k, v, timestamp=now) for k, v in pairs]))
            error, _, _ = partition.append(memoryview(batch), len(batch))
            if error == E.NOT_LEADER_OR_FOLLOWER:
                raise errors.unknown_leader("this broker no longer leads _schemas")
            if error:
                raise errors.store_error(f"writing to _schemas failed (Kafka error {error})")
            end = partition.log.log_end_offset
            await self.topics.flush([partition])
            error = await partition.replicated(end, self.write_timeout_s)
        except StorageError as e:
            raise errors.unknown_leader(f"this broker does not lead _schemas: {e}") from None
        if error == E.REQUEST_TIMED_OUT:
            raise errors.timed_out("the write to _schemas was not replicated in time")
        if error == E.NOT_LEADER_OR_FOLLOWER:  # (the write is tried again at the new leader)
            raise errors.unknown_leader("this broker lost the leadership of _schemas")
        if error:
            raise errors.store_error(f"the write to _schemas failed (Kafka error {error})")
        return end


class SchemasReader:
    """Applies the replica's records to ``state``; ``on_reset`` is called when the state is
    rebuilt from the start (a new replica here)."""

    def __init__(self, log_: SchemasLog, on_reset: Callable[[], RegistryState]) -> None:
        self.log = log_
        self.on_reset = on_reset
        self.state = on_reset()
        self.applied = 0
        self._source = None
        self._moved = asyncio.Event()  # the applied offset moved
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.loaded = asyncio.Event()  # the replica held at start is read up to its HW

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def kick(self) -> None:
        self._kick.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.catch_up()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading _schemas failed; trying again")
                await asyncio.sleep(1)
            self.loaded.set()
            await self._wait()

    async def _wait(self) -> None:
        partition = self.log.replica()
        waiter = asyncio.get_running_loop().create_future()
        if partition is not None:
            partition.await_data(waiter)
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait([waiter, kicked], timeout=POLL_S, return_when="FIRST_COMPLETED")
        finally:
            if partition is not None:
                partition.stop_awaiting(waiter)
            kicked.cancel()
            self._kick.clear()

    async def catch_up(self) -> None:
        """Apply what the replica holds below its high watermark and was not applied yet."""
        partition = self.log.replica()
        if partition is None:
            return
        if partition is not self._source:
            if self._source is not None or self.applied:
                log.info("a new replica of _schemas here: reading it from the start")
            self._source = partition
            self.state = self.on_reset()
            self.applied = 0
        end = partition.high_watermark
        if end <= self.applied:
            return
        try:
            found = await asyncio.to_thread(
                lambda: list(
                    stored_records_at(
                        partition.log, start=self.applied, end=end, skip_transactional=True
                    )
                )
            )
        except ReplayError as e:
            log.error("cannot read _schemas: %s", e)
            raise
        if partition is not self._source:
            return
        for offset, key, value in found:
            if offset < self.applied or key is None:
                continue
            try:
                change = decode(key, value)
            except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError):
                log.warning("skipping a malformed record at offset %d of _schemas", offset)
                continue
            if change is not None:
                self.state.apply(change)
        self.applied = max(self.applied, end)
        self._moved.set()
        self._moved = asyncio.Event()

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Until ``offset`` is applied here (True), or ``timeout_s`` passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.applied < offset:
            left = deadline - loop.time()
            if left <= 0:
                return False
            self.kick()
            moved = self._moved
            try:
                async with asyncio.timeout(min(left, POLL_S)):
                    await moved.wait()
            except TimeoutError:
                pass
        return True
