"""What the leader of a partition keeps about its followers: their log ends, the ISR, the high
watermark, and the acks=all produces waiting for it.

How this works
--------------
A follower fetches with its broker id and its log end offset (LEO) as the fetch offset
(replica_fetcher.py); ``follower_fetched`` records that offset and when the follower was last
*caught up* (Kafka's rule: a fetch at the leader's LEO makes it caught up now; a fetch at the
LEO the leader had at the follower's previous fetch makes it caught up as of that fetch).

The high watermark (HW) is the smallest LEO over the ISR, the leader's own included; it only
moves forward. With the leader alone in the ISR it is the log end (``Partition.hw`` = -1).
``wait(offset)`` is the purgatory of acks=all: a future completed (with an error code) once
the HW reaches ``offset``; with NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the ISR is smaller
than ``min.insync.replicas``; with NOT_LEADER_OR_FOLLOWER when this broker stops leading or is
fenced (``release``). The
waiters are requests in flight (each bounded by the connection and broker request limits),
kept in offset order; one whose request timed out is removed at once.

ISR changes are written by the leader itself, by compare-and-set on the partition's state
znode (partition_state.py): a follower joins when its LEO reaches the HW (and the start of the
current leader epoch), and from then on the HW waits for it even before the new ISR is
written (Kafka's maximal ISR: an HW that went past its LEO meanwhile would let it be elected
without records already acknowledged); ``shrink`` (every half ``replica.lag.time.max.ms``)
drops followers not caught up for that long. The new ISR takes effect only once written: a
leader that cannot write (ZooKeeper unreachable, or its session ended) cannot drop a follower,
so it cannot acknowledge acks=all writes on its own after the controller has replaced it.
When the write is refused (someone else changed the state: the controller), the state is read
again; if this broker no longer leads at this epoch, the replica manager makes it a follower.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from headrace.broker.cluster.partition_state import PartitionState
from headrace.protocol import ErrorCode

if TYPE_CHECKING:
    from .partition import Partition

log = logging.getLogger("headrace.replicas")


@dataclass(eq=False, slots=True)
class FollowerProgress:
    leo: int = -1  # the follower's log end offset, as its last fetch said (-1: unknown)
    caught_up: float = 0.0  # event-loop time it was last caught up to the leader's LEO
    last_fetch: float = 0.0  # event-loop time of its last fetch
    last_fetch_leader_leo: int = -1  # the leader's LEO at that fetch


# writes the ISR: (new state, the version it replaces) -> the state written
IsrWriter = Callable[[PartitionState, int], Awaitable[PartitionState]]


class LeaderState:
    """The leader's bookkeeping for one partition it leads at one leader epoch."""

    def __init__(
        self,
        partition: Partition,
        node_id: int,
        state: PartitionState,
        replicas: list[int],
        lag_s: float,
        write_isr: IsrWriter,
        reread: Callable[[], Awaitable[None]],
        leaving: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.partition = partition
        self.node_id = node_id
        self.epoch = state.leader_epoch
        self.state = state
        self.replicas = list(replicas)
        self.lag_s = lag_s
        self._write_isr = write_isr
        self._reread = reread
        self._leaving = leaving  # brokers in a controlled shutdown: not taken into the ISR
        now = asyncio.get_running_loop().time()
        self.followers = {
            r: FollowerProgress(caught_up=now) for r in replicas if r != node_id
        }  # ISR members count as caught up when leadership starts (as in Kafka)
        self.epoch_start = partition.log.log_end_offset
        self.waiters: deque[tuple[int, asyncio.Future]] = deque()
        self.active = True
        self._writing = False
        self._joining: tuple[int, ...] = ()  # followers the ISR being written adds
        self._update_hw()

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    @property
    def solo(self) -> bool:
        """Only this broker is in sync, and none is joining: the HW is the log end."""
        return not self._joining and (self.state.isr == (self.node_id,) or not self.state.isr)

    # followers ----------------------------------------------------------------------------

    def follower_fetched(self, replica: int, epoch: int, offset: int) -> int:
        """A replica fetch from ``replica`` at ``offset`` knowing leader epoch ``epoch``;
        its error code (NONE: serve it)."""
        if epoch >= 0 and epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        f = self.followers.get(replica)
        if f is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        leo = self.partition.log.log_end_offset
        now = asyncio.get_running_loop().time()
        if offset >= leo:
            f.caught_up = now
        elif offset >= f.last_fetch_leader_leo >= 0:
            f.caught_up = max(f.caught_up, f.last_fetch)
        f.last_fetch, f.last_fetch_leader_leo = now, leo
        if offset <= leo:
            f.leo = offset
        if replica not in self.state.isr and replica not in self._joining:
            if f.leo >= self.high_watermark and f.leo >= self.epoch_start:
                self._change_isr()
        else:
            self._update_hw()
        return ErrorCode.NONE

    @property
    def high_watermark(self) -> int:
        return self.partition.high_watermark

    def _update_hw(self) -> None:
        """Move the HW to the smallest LEO over the ISR (never back); complete the waiters it
        passes, and wake the fetches waiting for it."""
        p = self.partition
        hw = None
        if not self.solo:
            hw = p.log.log_end_offset
            for r in self.state.isr:
                if r != self.node_id:
                    f = self.followers.get(r)
                    hw = min(hw, f.leo if f is not None else -1)
            for r in self._joining:  # (the ISR being written counts already: see _change_isr)
                f = self.followers.get(r)
                if f is not None:
                    hw = min(hw, f.leo)
        if not p.advance_hw(hw):
            return
        self._complete()
        p.wake_fetches()

    # acks=all ------------------------------------------------------------------------------

    def wait(self, offset: int) -> asyncio.Future:
        """A future completed with an error code once the HW reaches ``offset``."""
        future = asyncio.get_running_loop().create_future()
        if self.high_watermark >= offset:
            future.set_result(self._ack_code())
        else:
            self.waiters.append((offset, future))
        return future

    def forget(self, future: asyncio.Future) -> None:
        """A waiter whose request timed out."""
        for i, (_, f) in enumerate(self.waiters):
            if f is future:
                del self.waiters[i]
                return

    @property
    def min_isr(self) -> int:
        return int(self.partition.topic.setting("min.insync.replicas"))

    def _ack_code(self) -> int:
        if len(self.state.isr) < self.min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _complete(self) -> None:
        hw = self.high_watermark
        code = self._ack_code()
        waiters = self.waiters
        while waiters and waiters[0][0] <= hw:
            _, f = waiters.popleft()
            if not f.done():
                f.set_result(code)

    def stop(self) -> None:
        """This broker no longer leads the partition (at this epoch)."""
        self.active = False
        self.release()

    def release(self) -> None:
        """Answer every acks=all write waiting here NOT_LEADER_OR_FOLLOWER: the broker stops
        leading, or is fenced (its session lost: it may have been replaced, and the clients
        retry at the leader they find, idempotent producers without duplicates)."""
        waiters, self.waiters = self.waiters, deque()
        for _, f in waiters:
            if not f.done():
                f.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # the ISR ------------------------------------------------------------------------------

    def state_changed(self, state: PartitionState) -> None:
        """A newer state of this leader epoch (the controller changed the ISR)."""
        if state.version > self.state.version:
            self.state = state
            self._update_hw()

    def replicas_changed(self, replicas: list[int]) -> None:
        """The partition's replicas changed (a move adds or removes some): new followers are
        tracked (caught up as of now, like ISR members when leadership starts), removed ones
        forgotten, and an ISR naming a broker that is no longer a replica is written again
        without it."""
        self.replicas = list(replicas)
        now = asyncio.get_running_loop().time()
        for r in replicas:
            if r != self.node_id and r not in self.followers:
                self.followers[r] = FollowerProgress(caught_up=now)
        for r in [r for r in self.followers if r not in replicas]:
            del self.followers[r]
        if any(r not in replicas for r in self.state.isr):
            self._change_isr()

    def shrink(self) -> None:
        """Drop the followers not caught up for ``replica.lag.time.max.ms`` (periodic)."""
        now = asyncio.get_running_loop().time()
        lagging = [
            r
            for r in self.state.isr
            if r != self.node_id
            and (f := self.followers.get(r)) is not None
            and now - f.caught_up > self.lag_s
        ]
        if lagging:
            self._change_isr()

    def _wanted_isr(self) -> tuple[int, ...]:
        now = asyncio.get_running_loop().time()
        hw = self.high_watermark
        isr = [self.node_id]
        for r in self.replicas:
            if r == self.node_id:
                continue
            f = self.followers.get(r)
            if f is None:
                continue
            if r in self.state.isr:
                if now - f.caught_up <= self.lag_s:
                    isr.append(r)
            elif (
                f.leo >= hw
                and f.leo >= self.epoch_start
                and now - f.caught_up <= self.lag_s
                and r not in self._leaving()
            ):
                isr.append(r)
        return tuple(isr)

    def _change_isr(self) -> None:
        if self._writing or not self.active:
            return
        wanted = self._wanted_isr()
        if set(wanted) == set(self.state.isr):
            return
        self._writing = True
        # A follower joins with its LEO at the HW. Until the new ISR is written, the HW moves
        # with it as if it were in already (Kafka's maximal ISR): else the HW could pass its
        # LEO meanwhile, and once in the ISR it could be elected without acknowledged records.
        self._joining = tuple(r for r in wanted if r not in self.state.isr)
        asyncio.ensure_future(self._write(wanted))

    async def _write(self, isr: tuple[int, ...]) -> None:
        p = self.partition
        name = f"{p.topic.name}-{p.index}"
        try:
            written = await self._write_isr(self.state.with_isr(isr), self.state.version)
        except BadVersionError:
            log.info("%s: the ISR write was refused (the state changed): reading it again", name)
            self._writing, self._joining = False, ()
            await self._reread()
            return
        except (KazooException, NoNodeError, OSError) as e:
            log.warning("%s: cannot write the ISR %s: %s", name, list(isr), e)
            self._writing, self._joining = False, ()
            return
        except Exception:
            self._writing, self._joining = False, ()
            raise
        self._writing, self._joining = False, ()
        if not self.active:
            return
        log.info("%s: ISR %s -> %s", name, list(self.state.isr), list(written.isr))
        self.state = written
        self._update_hw()
        self._complete()  # the ISR may have shrunk to what has the waiters' offsets
        if set(self._wanted_isr()) != set(self.state.isr):
            self._change_isr()
