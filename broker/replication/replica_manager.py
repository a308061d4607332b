"""This broker's role for each partition it holds a replica of: leader, follower, or neither.

How this works
--------------
In a cluster every partition has replicas (the topic's znode) and a state (leader, leader
epoch, ISR: partition_state.py). This broker holds a log for every partition it is a replica
of (topics.py opens them); ``apply`` makes its role follow the state, one partition at a time
under one lock, whenever the topic or the state changes:

* **Leader** (the state names this broker): the partition is served to clients
  (``Partition.leader``), its appends are stamped with the leader epoch, the epoch's start
  goes into the leader-epoch cache, and a ``LeaderState`` (leader_state.py) tracks the
  followers, the ISR and the high watermark. A newer state of the same epoch only updates the
  ISR there.
* **Follower** (another broker leads): not served to clients (NOT_LEADER_OR_FOLLOWER); its log
  is fetched from the leader by the ``ReplicaFetcher`` for that leader (replica_fetcher.py,
  follower mode: it first asks OffsetForLeaderEpoch and truncates the log where it diverges).
* **Neither** (no leader, or this broker is no longer a replica): not served, not fetched.

When this broker starts or stops leading a partition of ``__consumer_offsets`` or
``__transaction_state``, ``on_leadership`` tells the coordinators (they load or unload the
groups and transactions of that partition), in order, by one task, from ``serve`` on (the
changes made during start-up are told then: that is how the coordinators load at start).

Moves (Kafka's reassignment, the one way for every replication factor, a single replica
moving to another broker included): while a move runs, the partition's replicas here are its
current ones plus the adding ones (``TopicRecord.assigned``, Kafka's RS = ORS + TRS), so the
adding brokers open an empty log and follow the leader like any follower (from its log start:
batches kept as they are, producer state and aborted transactions rebuilt), and the leader
tracks them and takes them into the ISR once they have caught up. When every target replica
is in the ISR, the leader ends the move (``_finish``: ``Cluster.finish_reassignment`` writes
the target as the replicas and the ISR without the removed ones, by compare-and-set). A
leader that is itself removed first stops taking writes (``Partition.frozen``; clients retry
NOT_LEADER_OR_FOLLOWER) until the ISR has its whole log, at most ``replica.lag.time.max.ms``
(then it takes writes again and tries once more later), and hands leadership to the first
target replica in the ISR in the same write (leader epoch + 1): not even an acks=1 record is
lost. Removed replicas stop following and delete their copy (``TopicManager._lose``); a
cancelled move's adding replicas do the same. The coordinators follow leadership
(``on_leadership``), so the groups and transactions of a moved ``__consumer_offsets`` or
``__transaction_state`` partition move with it.

``shrink`` runs every half ``replica.lag.time.max.ms``: each led partition drops the followers
that have not caught up for that long from its ISR (by compare-and-set).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.broker.cluster.partition_state import PartitionState
from headrace.broker.log.leader_state import LeaderState
from headrace.storage import LeaderEpochCache

from . import hw_checkpoint
from .replica_fetcher import ReplicaFetchers

if TYPE_CHECKING:
    from headrace.broker.cluster.cluster import Cluster
    from headrace.broker.log.partition import Partition
    from headrace.broker.log.topic import Topic
    from headrace.broker.log.topics import TopicManager

log = logging.getLogger("headrace.replicas")

Key = tuple[str, int]
FINISH_BACKOFF_S = 1.0  # after a move's end could not be written, before trying again


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        topics: TopicManager,
        cluster: Cluster,
        fetchers: ReplicaFetchers,
        config,
    ):
        self.node_id = node_id
        self.topics = topics
        self.cluster = cluster
        self.fetchers = fetchers  # the broker's replica fetchers (replica_fetcher.py)
        self.config = config
        self.lag_s = int(config["replica.lag.time.max.ms"]) / 1000
        self.following: dict[Key, int] = {}  # partition -> the leader it is fetched from
        self.on_leadership: Callable[[str, list[int], list[int]], Awaitable[None]] | None = None
        # called in the step this broker starts to lead a partition, before it is served: the
        # coordinators hold back a state partition's requests until they have loaded it
        self.on_gaining: Callable[[str, int], None] | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._pending: set[Key] = set()
        # leadership changes for the coordinators, told in order by one task (never under
        # the lock: a coordinator loading may create a topic, which applies roles again)
        self._told: asyncio.Queue[tuple[str, list[int], list[int]]] = asyncio.Queue()
        self._teller: asyncio.Task | None = None
        self._serving = asyncio.Event()  # the coordinators have started: tell them from now
        # moves this broker leads: the task writing a move's end, and when to try
        # again after one that did not
        self._finishing: dict[Key, asyncio.Task] = {}
        self._not_before: dict[Key, float] = {}
        # the high watermarks read from replication-offset-checkpoint at start, taken by each
        # replica at its first role (hw_checkpoint.py)
        self._start_hw: dict[Key, int] = {}
        self._hw_interval_s = (
            int(self.config["replica.high.watermark.checkpoint.interval.ms"]) / 1000
        )
        self._hw_task: asyncio.Task | None = None

    def fenced(self) -> None:
        """The broker is fenced (its session lost): the acks=all writes waiting on the
        partitions it leads are answered NOT_LEADER_OR_FOLLOWER now, as new ones are (the
        controller may elect other leaders; a client that waited for its request to time out
        would keep its partition away from the new leader meanwhile)."""
        for t in self.topics.all_topics():
            for p in t.partitions:
                if p.leader_state is not None:
                    p.leader_state.release()

    async def load(self) -> None:
        """Read the high-watermark checkpoint (before any partition gets a role)."""
        self._start_hw = await asyncio.to_thread(hw_checkpoint.read, self.topics.data_dir)

    def start(self) -> None:
        if self._hw_task is None:
            self._hw_task = asyncio.create_task(self._checkpoint_every(), name="hw-checkpoint")
        if self._task is None:
            self._task = asyncio.create_task(self._shrink_every(), name="isr-shrink")
        if self._teller is None:
            self._teller = asyncio.create_task(self._tell_in_order(), name="leadership")

    async def stop(self) -> None:
        for task in (self._task, self._teller, self._hw_task, *self._finishing.values()):
            if task is not None:
                task.cancel()
        self._hw_task = None
        await self.checkpoint_hw()
        self._task = self._teller = None
        await self.fetchers.stop()
        for t in self.topics.all_topics():
            for p in t.partitions:
                if p.leader_state is not None:
                    p.leader_state.stop()

    # roles -------------------------------------------------------------------------------

    def state_changed(self, name: str, index: int) -> None:
        """A partition's state changed (a watch, or this broker's own write)."""
        key = (name, index)
        if key in self._pending:
            return
        self._pending.add(key)
        asyncio.ensure_future(self._apply_later(key))

    async def _apply_later(self, key: Key) -> None:
        try:
            async with self._lock:
                self._pending.discard(key)
                topic = self.topics.get(key[0])
                if topic is not None:
                    await self._apply(topic, key[1])
        except Exception:
            log.exception("applying the state of %s-%d failed", *key)

    def opened(self, p: Partition) -> None:
        """(Any thread.) A partition opened here leads nothing until its state says so."""
        p.leader = False

    async def topic_applied(self, topic: Topic) -> None:
        """The topic's partitions here follow the cluster (``TopicManager._follow``)."""
        async with self._lock:
            for index in sorted(topic.held):
                await self._apply(topic, index)

    async def _apply(self, topic: Topic, index: int) -> None:
        p = topic.held.get(index)
        if p is None or p.gone:
            return
        name = topic.name
        record = self.cluster.topics.get(name)
        state = self.cluster.states.get((name, index))
        if record is None or state is None or index >= len(record.replicas):
            return
        replicas = record.assigned(index)
        if self.node_id not in replicas and not (state.leader == self.node_id):
            await self._stop_leading(p)
            await self._unfollow(name, index)
            return
        if state.leader == self.node_id:
            ls = p.leader_state
            if ls is not None and ls.epoch == state.leader_epoch and ls.active:
                ls.state_changed(state)
                ls.replicas_changed(replicas)
            else:
                await self._become_leader(p, state, replicas)
            move = record.reassigning.get(index)
            if move is not None:
                self._finish_later(p, move["target"])
        else:
            await self._stop_leading(p)
            if state.leader < 0:
                await self._unfollow(name, index)
            else:
                await self._follow(p, state)

    async def _become_leader(self, p: Partition, state: PartitionState, replicas) -> None:
        name, index = p.topic.name, p.index
        was_leading = p.leader_state is not None and p.leader
        await self._unfollow(name, index)
        await self._load_epochs(p)
        assert p.epochs is not None
        p.epochs.assign(state.leader_epoch, p.log.log_end_offset)
        if p.leader_state is not None:
            p.leader_state.stop()
        p.leader_state = LeaderState(
            p,
            self.node_id,
            state,
            replicas,
            self.lag_s,
            lambda new, version: self.cluster.write_state(name, index, new, version),
            lambda: self._reread(name, index),
            lambda: self.cluster.shutting_down,
        )
        p.leader_epoch = state.leader_epoch
        if not was_leading and self.on_gaining is not None:
            self.on_gaining(name, index)
        p.leader = True
        log.info(
            "%s-%d: leader at epoch %d (ISR %s, log end %d)",
            name,
            index,
            state.leader_epoch,
            list(state.isr),
            p.log.log_end_offset,
        )
        if p.epochs.dirty:  # (OffsetForLeaderEpoch answers from memory meanwhile)
            try:
                await asyncio.to_thread(p.epochs.write)
            except OSError:
                log.exception("%s-%d: cannot write the leader-epoch checkpoint", name, index)
        if not was_leading:
            await self._tell(name, [index], [])

    async def _load_epochs(self, p: Partition) -> None:
        """The partition's leader-epoch cache (read in a thread; a new, empty log has none)."""
        if p.epochs is not None:
            return
        # its first role: the high watermark it had before the restart (0: none known)
        start_hw = self._start_hw.pop((p.topic.name, p.index), 0)
        p.follow_hw(start_hw)
        directory = Path(p.log.directory)
        if p.log.log_end_offset == 0 and p.log.log_start_offset == 0:
            p.epochs = LeaderEpochCache(directory)
        else:
            p.epochs = await asyncio.to_thread(LeaderEpochCache.load, directory)

    async def _reread(self, name: str, index: int) -> None:
        try:
            await self.cluster.read_state(name, index)
        except Exception:
            log.exception("%s-%d: cannot read the state again", name, index)
        self.state_changed(name, index)

    async def _stop_leading(self, p: Partition) -> None:
        was_leading = p.leader and p.leader_state is not None
        if p.leader_state is not None:
            p.keep_hw()
            p.leader_state.stop()
            p.leader_state = None
        p.leader = False
        p.leader_epoch = -1
        p.wake_fetches()
        if was_leading:
            log.info("%s-%d: no longer the leader", p.topic.name, p.index)
            await self._tell(p.topic.name, [], [p.index])

    async def _follow(self, p: Partition, state: PartitionState) -> None:
        name, index = p.topic.name, p.index
        key = (name, index)
        if self.following.get(key) not in (None, state.leader):
            await self._unfollow(name, index)
        await self._load_epochs(p)
        self.following[key] = state.leader
        self.fetchers.add(state.leader, name, index, p, state.leader_epoch, follower=True)

    async def _unfollow(self, name: str, index: int) -> None:
        """Stop fetching the partition, once its fetcher is done changing the log."""
        leader = self.following.pop((name, index), None)
        if leader is None:
            return
        await self.fetchers.remove(leader, name, index)

    async def forget(self, p: Partition) -> None:
        """The partition is gone from this broker (moved away, deleted)."""
        await self._stop_leading(p)
        await self._unfollow(p.topic.name, p.index)

    def serve(self) -> None:
        """The coordinators have started: tell them every leadership change, those made
        before too (they load what this broker leads from these, at start-up as later)."""
        self._serving.set()

    async def _tell(self, name: str, gained: list[int], lost: list[int]) -> None:
        if self.on_leadership is not None:
            self._told.put_nowait((name, gained, lost))

    async def _tell_in_order(self) -> None:
        await self._serving.wait()
        while True:
            name, gained, lost = await self._told.get()
            if self.on_leadership is None:
                continue
            try:
                await self.on_leadership(name, gained, lost)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the coordinators could not follow %s %s/%s", name, gained, lost)

    # moves -------------------------------------------------------------------------------

    def _finish_later(self, p: Partition, target: list[int]) -> None:
        """(The leader of a partition that moves.) Once every target replica is in
        the ISR, end the move (``_finish``), unless that is under way or tried too lately."""
        ls = p.leader_state
        key = (p.topic.name, p.index)
        if ls is None or not set(target) <= set(ls.isr) or key in self._finishing:
            return
        if asyncio.get_running_loop().time() < self._not_before.get(key, 0.0):
            return
        self._finishing[key] = asyncio.create_task(self._finish(p, ls, list(target)))

    async def _finish(self, p: Partition, ls: LeaderState, target: list[int]) -> None:
        """Write the move's end (``Cluster.finish_reassignment``). A leader that is not in the
        target first stops taking writes and waits (at most ``replica.lag.time.max.ms``) for
        the ISR to have its whole log, so the next leader has every record, acks=1 ones
        included; it then hands leadership over in the same write."""
        name, index = p.topic.name, p.index
        key = (name, index)
        loop = asyncio.get_running_loop()
        leaving = self.node_id not in target
        started = loop.time()
        done = False
        try:
            if leaving:
                p.frozen = True
                await p.writes_done()
                await self.topics.flush([p])
                code = await p.replicated(p.log.log_end_offset, self.lag_s)
                if code:
                    log.warning(
                        "%s-%d: the ISR did not take the last writes (error %d)", *key, code
                    )
                    return
            done = await self.cluster.admin.finish_reassignment(
                name, index, self.node_id, ls.epoch, target
            )
            if done and leaving:
                log.info(
                    "%s-%d moved to %s at offset %d (writes stopped %.0f ms)",
                    name,
                    index,
                    target,
                    p.log.log_end_offset,
                    (loop.time() - started) * 1000,
                )
            elif done:
                log.info("%s-%d moved to %s", name, index, target)
        except Exception:
            log.exception("%s-%d: cannot finish the reassignment", name, index)
        finally:
            if leaving and not done:
                p.frozen = False
            del self._finishing[key]
            if not done:  # look again a little later
                self._not_before[key] = loop.time() + FINISH_BACKOFF_S
                loop.call_later(FINISH_BACKOFF_S, self.state_changed, name, index)
            else:
                self._not_before.pop(key, None)

    # the high-watermark checkpoint -----------------------------------------------------------

    async def checkpoint_hw(self) -> None:
        """Write every replica's high watermark (hw_checkpoint.py)."""
        entries: dict[Key, int] = {}
        for t in self.topics.all_topics():
            for p in t.partitions:
                key = (t.name, p.index)
                hw = hw_checkpoint.known(p) if p.epochs is not None else None
                if hw is None:  # no role yet: what it had at start
                    hw = self._start_hw.get(key)
                if hw is not None:
                    entries[key] = hw
        try:
            await asyncio.to_thread(hw_checkpoint.write, self.topics.data_dir, entries)
        except OSError as e:
            log.warning("cannot write %s: %s", hw_checkpoint.FILE_NAME, e)

    async def _checkpoint_every(self) -> None:
        while True:
            await asyncio.sleep(self._hw_interval_s)
            await self.checkpoint_hw()

    # the ISR -----------------------------------------------------------------------------

    async def _shrink_every(self) -> None:
        interval = max(self.lag_s / 2, 0.05)
        while True:
            await asyncio.sleep(interval)
            for t in self.topics.all_topics():
                for p in t.partitions:
                    ls = p.leader_state
                    if ls is not None and ls.active:
                        ls.shrink()
