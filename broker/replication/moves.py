"""Moving a partition of one replica from one broker to another (cluster mode).

(A move where the partition has, or gets, more than one replica runs Kafka's way instead:
the adding brokers follow the leader as replicas and the leader ends the move once they are in
the ISR; see replica_manager.py. ``follow`` and ``replica_fetched`` leave those alone.)

How this works
--------------
A move is written in the topic's znode (cluster.py): the partition's ``reassigning`` entry
names the ``target`` replicas, the ``adding`` brokers (the target's new ones) and the
``removing`` ones (the current leader), while ``replicas`` still names the leader, which keeps
serving. Then, loss-free:

1. Copy. The adding broker opens an empty log for the partition (not served: Metadata still
   names the old leader) and fetches it from the leader as a follower does (a
   ``ReplicaFetcher`` per leader, replica_fetcher.py), from the leader's log start offset;
   the batches are appended unchanged with their offsets, and the producer state and the
   aborted-transactions index follow them.
2. Catch up. Each replica fetch tells the leader the copy's log end (``replica_fetched``).
   When it reaches the leader's log end, now or as it was at the copy's previous fetch
   (Kafka's rule for the ISR: under steady writes the end moves between fetches), the
   leader stops taking writes to the partition (``Partition.frozen``: produce, offset
   commits, transaction markers answer NOT_LEADER_OR_FOLLOWER, and clients retry), waits
   for the flush of what was appended before, then for the copy to fetch the final tail
   (the copy flushes before it fetches again, so that fetch shows the tail is on its disk).
3. Switch. The leader writes the znode by compare-and-set: ``replicas`` = the target, the
   leader epoch + 1, the reassignment cleared. Every broker follows the znode
   (``TopicManager.apply``): the new one serves its copy, the old one forgets the partition
   and only then deletes its files, and clients that ask the old one get
   NOT_LEADER_OR_FOLLOWER and find the new leader in the metadata.

If the copy does not fetch the tail within ``replica.lag.time.max.ms``, the leader takes writes
again and tries the switch once more no sooner than that long after, at the copy's next
catch-up: one partition is unavailable for at most that bound per try. A reassignment
cancelled before the switch drops the copy; the leader never stopped serving. A move the
leader cannot finish (it restarted, its session ended) resumes from its znode: the copy
starts again from the leader's log start.

The coordinators follow: when a partition of ``__consumer_offsets`` or
``__transaction_state`` moves, the old broker unloads that partition's groups or
transactions and the new one loads them from its copy (``on_moved``, set by the broker).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.broker.log.partition import Partition
from headrace.broker.log.producer_state import ProducerStateManager
from headrace.protocol import ErrorCode
from headrace.storage import StorageError

from .broker_parts import BrokerParts

if TYPE_CHECKING:
    from headrace.broker.cluster.znodes import TopicRecord
    from headrace.broker.log.topic import Topic

log = logging.getLogger("headrace.moves")

Key = tuple[str, int]


@dataclass(eq=False)
class _Switch:
    """The leader's view of one partition moving away."""

    offset: int = -1  # the copy's log end, as its last fetch said
    leader_end: int = -1  # the leader's log end when that fetch came
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    not_before: float = 0.0  # event-loop time: no new try before it


class Moves(BrokerParts):
    """This broker's part in moves: the copies it makes, and the switches it leads."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.copies: dict[Key, tuple[int, Partition]] = {}  # (leader, the local copy)
        self.switches: dict[Key, _Switch] = {}

    async def stop(self) -> None:
        for s in self.switches.values():
            if s.task is not None:
                s.task.cancel()
        await self.fetchers.stop()  # (first: no fetcher changes a copy once it is closed)
        copies, self.copies = self.copies, {}
        await asyncio.to_thread(_close_all, [p for _, p in copies.values()])

    # the new owner: copies -----------------------------------------------------------------

    async def take_copy(self, name: str, index: int) -> Partition | None:
        """The copy of a partition that is now this broker's, handed over (no longer
        fetched); None when there is none."""
        entry = self.copies.pop((name, index), None)
        if entry is None:
            return None
        leader, copy = entry
        await self.fetchers.remove(leader, name, index)
        return copy

    async def follow(self, topic: Topic, record: TopicRecord | None) -> None:
        """Make the copies of ``topic`` (and only those) that its record asks of this
        broker: start the new ones, drop the cancelled ones (``TopicManager.apply``, under
        its lock)."""
        name = topic.name
        wanted: dict[int, tuple[int, int]] = {}  # index -> (leader, leader epoch)
        if record is not None:
            for index, move in record.reassigning.items():
                replicas = record.replicas[index] if index < len(record.replicas) else []
                if record.replicated_move(index):
                    continue  # the adding brokers are followers (replica_manager.py)
                if self.node_id in move["adding"] and self.node_id not in replicas and replicas:
                    wanted[index] = (replicas[0], self.cluster.leader_epoch(name, index))
        for (t, index), (leader, copy) in list(self.copies.items()):
            if t == name and (index not in wanted or wanted[index][0] != leader):
                self.copies.pop((t, index))
                await self.fetchers.remove(leader, t, index)
                log.info("copy of %s-%d dropped (the move was cancelled)", t, index)
                await asyncio.to_thread(_drop, copy)
        for index, (leader, epoch) in wanted.items():
            entry = self.copies.get((name, index))
            if entry is None:
                try:
                    copy = await asyncio.to_thread(self._open_copy, topic, index)
                except (OSError, StorageError) as e:
                    log.error("cannot copy %s-%d here: %s", name, index, e)
                    continue
                self.copies[(name, index)] = (leader, copy)
                log.info("copying %s-%d from node %d", name, index, leader)
            else:
                copy = entry[1]
            self.fetchers.add(leader, name, index, copy, epoch)

    def _open_copy(self, topic: Topic, index: int) -> Partition:
        """(In a worker thread.) An empty log for a copy; a directory left there (by a copy a
        restart interrupted, or a partition that moved away) is removed first."""
        path = self.topics.data_dir / f"{topic.name}-{index}"
        if path.exists():
            shutil.rmtree(path)
        plog = self.topics.open_log(topic, index)
        return Partition(topic, index, plog, ProducerStateManager())

    # the old owner: switches -----------------------------------------------------------------

    def replica_fetched(self, name: str, index: int, replica: int, epoch: int, offset: int) -> int:
        """A replica fetch of partition ``index`` of ``name`` (held here) from broker
        ``replica`` at ``offset`` with leader epoch ``epoch``: its error code, NONE to serve it.
        A copy of a move that has reached the log end starts the switch."""
        record = self.cluster.topics.get(name)
        if record is None or not 0 <= index < len(record.leader_epochs):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        current = self.cluster.leader_epoch(name, index)
        if 0 <= epoch < current:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > current:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        move = record.reassigning.get(index)
        if move is None or replica not in move["adding"] or record.replicated_move(index):
            return ErrorCode.NONE
        key = (name, index)
        switch = self.switches.get(key)
        if switch is None:
            switch = self.switches[key] = _Switch()
        partition = self.topics.partition(name, index)
        if partition is None:
            return ErrorCode.NONE
        end = partition.log.log_end_offset
        # caught up: the copy has all the log had, now or when it last fetched (under
        # steady writes a fetch rarely finds the log end unchanged)
        caught_up = offset >= end or offset >= switch.leader_end >= 0
        switch.offset, switch.leader_end = offset, end
        switch.fetched.set()
        if (
            switch.task is None
            and caught_up
            and asyncio.get_running_loop().time() >= switch.not_before
        ):
            switch.task = asyncio.create_task(self._switch(key, partition, switch, move["target"]))
        return ErrorCode.NONE

    async def _switch(self, key: Key, partition: Partition, switch: _Switch, target) -> None:
        name, index = key
        loop = asyncio.get_running_loop()
        started = loop.time()
        partition.frozen = True
        done = False
        try:
            await partition.writes_done()
            await self.topics.flush([partition])
            end = partition.log.log_end_offset
            deadline = loop.time() + self.lag_s
            while switch.offset < end:
                switch.fetched.clear()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        await switch.fetched.wait()
                except TimeoutError:
                    break
            if switch.offset >= end:
                done = await self.cluster.admin.finish_move(name, index, self.node_id, target)
                if done:
                    log.info(
                        "%s-%d moved to %s at offset %d (writes stopped %.0f ms)",
                        name,
                        index,
                        target,
                        end,
                        (loop.time() - started) * 1000,
                    )
            else:
                log.warning(
                    "%s-%d: the copy did not fetch the last of it within %.1f s; "
                    "taking writes again",
                    name,
                    index,
                    self.lag_s,
                )
        except StorageError:
            log.exception("%s-%d: the move's flush failed", name, index)
        except Exception:
            log.exception("%s-%d: the move could not switch", name, index)
        finally:
            if not done:
                partition.frozen = False
                switch.not_before = loop.time() + self.lag_s
            switch.task = None
            if done and self.switches.get(key) is switch:
                del self.switches[key]

    def forget(self, name: str, index: int) -> None:
        """The partition is no longer led here."""
        switch = self.switches.pop((name, index), None)
        task = switch.task if switch is not None else None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()


def _drop(copy: Partition) -> None:
    """(In a worker thread.) Close a copy and remove its files."""
    path = Path(copy.log.directory)
    try:
        copy.log.close(removing=True)
    except (OSError, StorageError):
        log.exception("cannot close the copy in %s", path)
    shutil.rmtree(path, ignore_errors=True)


def _close_all(copies: list[Partition]) -> None:
    """(In a worker thread, at stop.) Close the copies; their files stay for the next start
    to remove (a copy is not listed in ``topics.json``)."""
    for copy in copies:
        try:
            copy.log.close()
        except (OSError, StorageError):
            log.exception("cannot close the copy in %s", copy.log.directory)
