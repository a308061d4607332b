"""Replica fetchers: copy partitions from their leader with the Fetch API, as a Kafka follower.

How this works
--------------
One ``ReplicaFetcher`` per leader runs one loop for all the partitions this broker copies from
it, over a connection of its own (its owner gives it a ``BrokerClient.channel``: no other
request waits behind its long polls, and it waits behind none): a Fetch (v12) with this broker's
id as ``replica_id``, and for each partition the leader epoch this broker knows
(``current_leader_epoch``) and the copy's log end offset as the fetch offset. The leader answers
up to its log end, long-polling ``replica.fetch.wait.max.ms``; the request asks for at most
``replica.fetch.max.bytes`` per partition and ``replica.fetch.response.max.bytes`` in all
(within the inter-broker client's frame limit, which is checked before a response is read).

Each answer's batches are appended unchanged on the event loop (``Partition.append_copied``:
offsets kept, producer state and aborted-transaction entries rebuilt from the headers). A copy
whose log is empty starts at the first batch the leader sends (the leader's log start offset
may lie inside it), and every copy follows the leader's log start offset (DeleteRecords,
retention). OFFSET_OUT_OF_RANGE means the leader's log start passed the copy's end: the copy
starts again at the leader's log start. Disk work other than the append (those truncations,
flushes) runs in a worker thread; ``remove`` and ``stop`` return only once what is being
done to a copy (an answer applied, a truncation) is done, so that the partition's next role
(leader, the follower of another leader) starts from a log no fetcher changes any more. A copy
that has caught up (an answer without records at the leader's end) is flushed before the next
fetch, so the fetch that tells the leader it has caught up comes after the flush.

Errors: a request that fails (the leader unreachable, a request-level error) makes the whole
fetcher wait ``replica.fetch.backoff.ms``; a partition's error (NOT_LEADER_OR_FOLLOWER, a
fenced leader epoch, a storage error) keeps only that partition out of the fetches for as long
(``Copy.retry_at``; UNKNOWN_LEADER_EPOCH, a leader that has not yet seen its own election, only
``EPOCH_BACKOFF_S``), while the others go on, as Kafka's fetcher delays only the partitions in
error: a partition the leader cannot serve must not hold back the high watermark of those it
can (the follower stays in their ISRs). ``ReplicaFetchers`` keeps one fetcher per leader for
replica_manager.py, and stops a fetcher once its last partition is removed.

Followers (``follower=True``: a replica of the partition, replica_manager.py; the broker adds
only these) differ from plain copies (``follower=False``, what test_replica_fetcher.py
exercises) in three ways. Before their first fetch from a leader at a new leader epoch they
ask it OffsetForLeaderEpoch for their own latest epoch and truncate their log where it
diverges (``Partition.truncate_to``: the part an old leader wrote that the new one does not
have, which was never acknowledged to acks=all producers); an OFFSET_OUT_OF_RANGE answer asks
again. They keep the leader's high watermark (capped at their log end) as theirs. And they
flush by the topic's ``flush.messages`` like a leader, before the next fetch: the fetch offset
that lets the leader advance the high watermark then stands for data on this replica's disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from headrace.broker.client.broker_client import MAX_RESPONSE_BYTES, NetworkError
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import CorruptRecordError, read_batch_header
from headrace.storage import StorageError

log = logging.getLogger("headrace.replicas")

FETCH_VERSION = 12  # topic names, replica_id, current_leader_epoch
EPOCHS_VERSION = 4  # OffsetForLeaderEpoch with replica_id
EPOCH_BACKOFF_S = 0.05
RESPONSE_ROOM = 64 * 1024  # kept free under the client's frame limit for the response's framing

Req = messages.FetchRequest
EpochReq = messages.OffsetForLeaderEpochRequest


@dataclass(eq=False)
class Copy:
    """One partition copied here: its local ``Partition`` and the leader epoch it follows."""

    partition: object  # headrace.broker.log.partition.Partition
    leader_epoch: int
    caught_up: bool = False  # the last answer had no records and the copy is at the leader's end
    error: int = ErrorCode.NONE  # the last partition error the leader gave
    follower: bool = False  # a replica of the partition (not a plain copy)
    truncate: bool = False  # ask OffsetForLeaderEpoch (and truncate) before fetching
    retry_at: float = 0.0  # after a partition error: not asked for before this (loop time)
    # held while an answer is applied to the copy (or it is truncated): ``remove`` waits for it,
    # so that the partition's new role (leader, another leader's follower) starts from a log
    # this fetcher no longer changes
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


class ReplicaFetcher:
    """Copies partitions from the broker ``leader``."""

    def __init__(
        self,
        client,
        node_id: int,
        leader: int,
        config,
        flush: Callable[[list], asyncio.Future],
    ) -> None:
        self.client = client  # a BrokerClient of its own (a channel): closed by ``stop``
        self.node_id = node_id
        self.leader = leader
        self.wait_ms = int(config["replica.fetch.wait.max.ms"])
        self.partition_bytes = max(1, int(config["replica.fetch.max.bytes"]))
        self.max_bytes = max(
            1,
            min(
                int(config["replica.fetch.response.max.bytes"]), MAX_RESPONSE_BYTES - RESPONSE_ROOM
            ),
        )
        self.backoff_s = int(config["replica.fetch.backoff.ms"]) / 1000
        self.flush = flush  # TopicManager.flush
        self.copies: dict[tuple[str, int], Copy] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def add(self, topic: str, index: int, partition, leader_epoch: int, follower=False) -> None:
        known = self.copies.get((topic, index))
        if known is not None and known.partition is partition:
            if follower and known.leader_epoch != leader_epoch:
                known.truncate = True
            if known.leader_epoch != leader_epoch:
                known.retry_at = 0.0  # news: no more waiting out an error of the old epoch
            known.leader_epoch = leader_epoch
        else:
            self.copies[(topic, index)] = Copy(
                partition, leader_epoch, follower=follower, truncate=follower
            )
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader}")

    async def remove(self, topic: str, index: int) -> None:
        """Stop copying the partition, once what is being done to its copy is done."""
        c = self.copies.pop((topic, index), None)
        self._changed.set()
        if c is not None:
            async with c.busy:
                pass

    def copy(self, topic: str, index: int) -> Copy | None:
        return self.copies.get((topic, index))

    async def stop(self) -> None:
        """Stop fetching, not in the middle of changing a copy (a cut made in a worker thread
        would go on without the partition following it)."""
        task, self._task = self._task, None
        if task is not None:
            async with contextlib.AsyncExitStack() as held:
                for c in list(self.copies.values()):
                    await held.enter_async_context(c.busy)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.client.close()

    async def _run(self) -> None:
        while True:
            if not self.copies:
                self._changed.clear()
                await self._changed.wait()
                continue
            self._changed.clear()
            try:
                backoff = await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except NetworkError as e:
                log.debug("replica fetch from node %d: %s", self.leader, e)
                backoff = True
            except Exception:
                log.exception("replica fetch from node %d failed", self.leader)
                backoff = True
            if backoff is not False:
                delay = self.backoff_s if backoff is True else float(backoff)
                try:
                    async with asyncio.timeout(delay):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    async def _fetch_once(self) -> bool | float:
        """One fetch and what follows from it; True (or a delay) to back off before the next.
        A partition the leader answered with an error waits out its own backoff
        (``Copy.retry_at``) while the others go on being fetched, as Kafka's fetcher delays
        only the partitions in error."""
        now = asyncio.get_running_loop().time()
        if any(c.truncate and c.retry_at <= now for c in self.copies.values()):
            await self._truncate(now)
        sent = {k: c for k, c in self.copies.items() if not c.truncate and c.retry_at <= now}
        if not sent:
            waits = [c.retry_at - now for c in self.copies.values()]
            return max(min(waits, default=self.backoff_s), EPOCH_BACKOFF_S)
        by_topic: dict[str, list] = {}
        for (topic, index), c in sent.items():
            plog = c.partition.log  # type: ignore[attr-defined]
            by_topic.setdefault(topic, []).append(
                Req.FetchPartition(
                    partition=index,
                    current_leader_epoch=c.leader_epoch,
                    fetch_offset=plog.log_end_offset,
                    log_start_offset=plog.log_start_offset,
                    partition_max_bytes=self.partition_bytes,
                )
            )
        request = Req(
            replica_id=self.node_id,
            max_wait_ms=self.wait_ms,
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[Req.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        timeout = self.wait_ms / 1000 + 30
        response = await self.client.send(
            self.leader, ApiKey.FETCH, FETCH_VERSION, request, timeout
        )
        if response.error_code:
            return True
        backoff: bool | float = False
        to_flush = []
        now = asyncio.get_running_loop().time()
        for t in response.responses:
            for p in t.partitions:
                key = (t.topic, p.partition_index)
                if key not in sent:
                    continue
                c = sent[key]
                async with c.busy:
                    if self.copies.get(key) is not c:
                        continue  # removed (or replaced) while the fetch was out
                    try:
                        if await self._follow(c, p):
                            to_flush.append(c.partition)
                    except (StorageError, CorruptRecordError) as e:
                        log.warning("copy of %s-%d from node %d: %s", *key, self.leader, e)
                        c.error = ErrorCode.KAFKA_STORAGE_ERROR
                if c.error:
                    epoch = c.error == ErrorCode.UNKNOWN_LEADER_EPOCH  # (the leader is behind)
                    c.retry_at = now + (EPOCH_BACKOFF_S if epoch else self.backoff_s)
        if to_flush:
            try:
                await self.flush(to_flush)
            except StorageError:
                log.exception("flushing copies fetched from node %d failed", self.leader)
                backoff = True
        return backoff

    async def _follow(self, c: Copy, p) -> bool:
        """Apply one partition's answer to its copy; True when it has just caught up and has
        unflushed data."""
        partition = c.partition
        plog = partition.log  # type: ignore[attr-defined]
        c.error = p.error_code
        if c.follower:
            return await self._follow_leader(c, p)
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if p.log_start_offset > plog.log_end_offset or plog.log_end_offset > p.high_watermark:
                await partition.restart_at(max(p.log_start_offset, 0))  # type: ignore[attr-defined]
                c.error = ErrorCode.NONE
            return False
        if p.error_code:
            return False
        records = await _take(partition, p)
        c.caught_up = not records and plog.log_end_offset >= p.high_watermark
        return c.caught_up and partition.unflushed > 0  # type: ignore[attr-defined]

    async def _follow_leader(self, c: Copy, p) -> bool:
        """A follower's answer: append, keep the leader's high watermark, flush per
        ``flush.messages`` (True: flush before the next fetch)."""
        partition = c.partition
        plog = partition.log  # type: ignore[attr-defined]
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if p.log_start_offset > plog.log_end_offset:  # the leader's log starts past ours
                await partition.restart_at(p.log_start_offset)  # type: ignore[attr-defined]
                epochs = partition.epochs  # type: ignore[attr-defined]
                if epochs is not None:
                    epochs.truncate_from_end(0)
                c.error = ErrorCode.NONE
            else:
                c.truncate = True  # our log runs past the leader's: find where it diverges
                c.error = ErrorCode.NONE
            return False
        if p.error_code:
            return False
        if await _take(partition, p):
            epochs = partition.epochs  # type: ignore[attr-defined]
            if epochs is not None and epochs.dirty:
                await asyncio.to_thread(epochs.write)
        if p.high_watermark >= 0:
            partition.follow_hw(p.high_watermark)  # type: ignore[attr-defined]
        topic = partition.topic  # type: ignore[attr-defined]
        return partition.unflushed > 0 and partition.unflushed >= int(  # type: ignore[attr-defined]
            topic.setting("flush.messages")
        )

    async def _truncate(self, now: float) -> None:
        """Ask the leader where each follower waiting for it diverges (OffsetForLeaderEpoch for
        its latest epoch) and truncate there; a partition not answered waits out its backoff
        (the others are fetched meanwhile)."""
        pending = {k: c for k, c in self.copies.items() if c.truncate and c.retry_at <= now}
        topics: dict[str, list] = {}
        for (topic, index), c in pending.items():
            epochs = c.partition.epochs  # type: ignore[attr-defined]
            latest = epochs.latest_epoch if epochs is not None else -1
            if latest < 0:
                c.truncate = False  # nothing known about its epochs: keep the log as it is
                continue
            topics.setdefault(topic, []).append(
                EpochReq.OffsetForLeaderPartition(
                    partition=index, current_leader_epoch=c.leader_epoch, leader_epoch=latest
                )
            )
        if not topics:
            return
        request = EpochReq(
            replica_id=self.node_id,
            topics=[
                EpochReq.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()
            ],
        )
        response = await self.client.send(
            self.leader, ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCHS_VERSION, request, 30
        )
        for c in pending.values():  # (until answered)
            c.retry_at = now + self.backoff_s
        for t in response.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                found = self.copies.get(key)
                if found is None or found is not pending.get(key) or not found.truncate:
                    continue
                c = found
                if r.error_code:
                    c.error = r.error_code
                    if r.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH:  # (the leader is behind)
                        c.retry_at = now + EPOCH_BACKOFF_S
                    continue
                c.retry_at = 0.0
                partition = c.partition
                plog = partition.log  # type: ignore[attr-defined]
                epochs = partition.epochs  # type: ignore[attr-defined]
                if r.leader_epoch < 0 or r.end_offset < 0:
                    # the leader has no epoch as old as ours: keep what was committed
                    end = partition.high_watermark  # type: ignore[attr-defined]
                else:
                    mine_epoch, mine_end = epochs.end_offset_for(
                        r.leader_epoch, plog.log_end_offset
                    )
                    end = (
                        r.end_offset
                        if mine_epoch == r.leader_epoch
                        else min(r.end_offset, mine_end if mine_end >= 0 else r.end_offset)
                    )
                    end = min(end, plog.log_end_offset)
                if end < plog.log_end_offset:
                    log.info(
                        "%s-%d: truncating from %d to %d (leader %d, epoch %d)",
                        *key,
                        plog.log_end_offset,
                        end,
                        self.leader,
                        c.leader_epoch,
                    )
                    async with c.busy:
                        if self.copies.get(key) is not c:
                            continue  # removed meanwhile: no longer this fetcher's to change
                        await partition.truncate_to(end)  # type: ignore[attr-defined]
                c.truncate = False


async def _take(partition, p) -> bytes:
    """Append one partition's answer to the local log (a log still empty starts at the first
    batch sent: the leader's log start may lie inside it) and follow the leader's log start
    offset. Returns the records appended."""
    plog = partition.log
    records = p.records
    if records:
        if plog.log_end_offset == plog.log_start_offset:
            base = read_batch_header(records).base_offset
            if base != plog.log_end_offset:
                await partition.restart_at(base)
        partition.append_copied(memoryview(records))
    start = min(p.log_start_offset, plog.log_end_offset)
    if start > plog.log_start_offset:
        await asyncio.to_thread(plog.delete_records_before, start)
    return records


class ReplicaFetchers:
    """This broker's replica fetchers, one per leader, for the followers' partitions
    (replica_manager.py), as Kafka's
    ``ReplicaFetcherManager``: a leader's fetcher is made for its first partition, on a channel
    of its own, and stopped once its last one is removed."""

    def __init__(self, client, node_id: int, config, flush: Callable[[list], asyncio.Future]):
        self.client = client  # the BrokerClient: each fetcher gets a channel of its own
        self.node_id = node_id
        self.config = config
        self.flush = flush  # TopicManager.flush
        self.by_leader: dict[int, ReplicaFetcher] = {}

    def add(
        self, leader: int, topic: str, index: int, partition, leader_epoch: int, follower=False
    ) -> None:
        fetcher = self.by_leader.get(leader)
        if fetcher is None:
            fetcher = self.by_leader[leader] = ReplicaFetcher(
                self.client.channel(f"replica-fetcher-{leader}"),
                self.node_id,
                leader,
                self.config,
                self.flush,
            )
        fetcher.add(topic, index, partition, leader_epoch, follower)

    async def remove(self, leader: int, topic: str, index: int) -> None:
        """Stop copying the partition from ``leader`` (``ReplicaFetcher.remove``); a fetcher
        left with nothing to copy stops."""
        fetcher = self.by_leader.get(leader)
        if fetcher is None:
            return
        await fetcher.remove(topic, index)
        if not fetcher.copies and self.by_leader.get(leader) is fetcher:
            del self.by_leader[leader]
            asyncio.ensure_future(fetcher.stop())

    async def stop(self) -> None:
        fetchers, self.by_leader = list(self.by_leader.values()), {}
        for f in fetchers:
            await f.stop()
