"""The transaction coordinator: transactional producer ids, epochs and fencing, the partitions
of each open transaction, and the commit/abort markers that close it.

How this works
--------------
Everything runs on the event loop. The allowed state changes and the answer each request
gets in each state are the tables in ``transaction_state``; this file carries out the steps.
A change is first written to ``__transaction_state`` (``transaction_log``) and flushed, then
made in memory (``txns``); while it is written the transaction is *pending* and other
requests for it get CONCURRENT_TRANSACTIONS.

* InitProducerId with a transactional id: a new id gets a producer id, epoch 0. A known id
  gets epoch + 1 (a new producer id when the epoch is exhausted), which fences the previous
  producer; an open transaction of the old producer is aborted first (the fence: epoch + 1
  and an abort, then the new producer's bump).
* AddPartitionsToTxn / AddOffsetsToTxn add partitions (for offsets: the group's partition of
  ``__consumer_offsets``) and make the transaction Ongoing; its timeout starts then.
* Produce: a transactional batch is accepted only for a partition in the producer's Ongoing
  transaction with the current epoch (``verify``). The partition remembers where the
  transaction starts, which holds its last stable offset back until the marker.
* TxnOffsetCommit writes the offsets to ``__consumer_offsets`` as a transactional batch;
  they are kept aside (``pending_offsets``) and reach the group's committed offsets only when
  the transaction commits: then they are written again as a plain commit, before the markers
  (the group coordinator's replay skips transactional batches, so it needs no markers).
* EndTxn: PrepareCommit/PrepareAbort is written (the decision), then a control batch goes to
  every partition of the transaction, the partitions are flushed, and CompleteCommit or
  CompleteAbort is written; the client is answered after that, so a committed transaction is
  visible to ``read_committed`` readers when the producer hears of it.
* A timer aborts transactions open longer than their timeout (with an epoch bump: the
  producer is fenced), finishes decisions whose markers could not be written, and forgets
  ids idle for ``transactional.id.expiration.ms``. At most ``transactional.id.max.count``
  ids are kept: a new one beyond gets COORDINATOR_NOT_AVAILABLE.
* Start-up replays ``__transaction_state`` and finishes every Prepare* decision found there
  (a crash between the decision and its markers). Open transactions stay open: their
  producer may carry on, a new producer with the id aborts them, or they time out.

Fencing answers are PRODUCER_FENCED; the API modules turn them into INVALID_PRODUCER_EPOCH
for request versions older than KIP-588.

Crash tests: the environment variable ``HEADRACE_TEST_CRASH`` set to ``after-prepare`` (once
a Prepare* decision is durable, before any marker) or ``after-first-marker`` (once the first
partition's marker is flushed) makes the broker kill itself with SIGKILL at that point. It is
read only by tests; nothing else sets it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import replace

from headrace.protocol import ErrorCode
from headrace.protocol.records import decode_records, iter_batches
from headrace.storage import StorageError

from . import group_offsets, transaction_log
from .background import run_every, wall_clock_ms
from .group_offsets import OFFSETS_TOPIC, CommittedOffset
from .transaction_log import TRANSACTION_TOPIC, TransactionMetadata
from .transaction_state import (
    ABORT_FIRST,
    ACCEPT,
    ADD_PARTITIONS,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    COMPLETING,
    DEAD,
    DONE,
    EMPTY,
    END_TXN,
    IDLE,
    INIT_PRODUCER_ID,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    TXN_OFFSET_COMMIT,
    check_transition,
)

log = logging.getLogger("headrace.transactions")

E = ErrorCode
MAX_EPOCH = (1 << 15) - 1
COORDINATOR_EPOCH = 0  # one broker: the coordinator never moves
GroupOffsets = dict[str, dict[tuple[str, int], CommittedOffset]]  # group id -> offsets


def _crash_point(name: str) -> None:
    """Fault injection for crash tests (see the module doc)."""
    if os.environ.get("HEADRACE_TEST_CRASH") == name:
        log.warning("HEADRACE_TEST_CRASH=%s: killing the broker", name)
        os.kill(os.getpid(), signal.SIGKILL)


class TransactionCoordinator:
    """Built from what it uses: the topic table (``__transaction_state`` and the partitions
    of transactions live there), the producer id source, the group coordinator (a committed
    transaction's offsets become the group's), this node's id and the settings it reads."""

    def __init__(
        self,
        topics,
        producer_ids,
        groups,
        *,
        node_id: int,
        max_timeout_ms: int,
        expiration_ms: int,
        check_interval_ms: int,
        max_ids: int = 2**31 - 1,
        state_partitions: int,
        state_segment_bytes: int,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topics = topics
        self.producer_ids = producer_ids
        self.groups = groups
        self.node_id = node_id
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.check_interval_ms = check_interval_ms
        self.max_ids = max_ids  # transactional.id.max.count
        self.state_partitions = state_partitions
        self.state_segment_bytes = state_segment_bytes
        self.now_ms = now_ms
        self.txns: dict[str, TransactionMetadata] = {}
        # producer id -> group id -> offsets committed in its open transaction
        self.pending_offsets: dict[int, GroupOffsets] = {}
        self._topic_ready: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        topic = self.topics.get(TRANSACTION_TOPIC)
        if topic is not None:
            logs = [p.log for p in topic.partitions]
            self.txns = await asyncio.to_thread(transaction_log.replay, logs)
            if self.txns:
                log.info("loaded %d transactional ids", len(self.txns))
            for txn in list(self.txns.values()):
                if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    await self._recover_offsets(txn)
                    await self._complete(txn, txn.state is PREPARE_COMMIT)
        self._tasks.append(
            asyncio.create_task(
                run_every(
                    self.check_interval_ms / 1000, self.check_transactions, "transaction check"
                )
            )
        )

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def coordinator_for(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id``: the leader of its partition of
        ``__transaction_state`` (made on first use), as in Kafka; -1 when it has none."""
        topic = await self._state_topic()
        cluster = self.topics.cluster
        if cluster is None:
            return self.node_id
        index = group_offsets.partition_for(transactional_id, topic.count)
        return cluster.leader(TRANSACTION_TOPIC, index)

    def owns(self, transactional_id: str) -> bool:
        """Does this broker coordinate ``transactional_id`` now? (See GroupCoordinator.owns.)"""
        topic = self.topics.get(TRANSACTION_TOPIC)
        if topic is None:
            return self.topics.cluster is None
        index = group_offsets.partition_for(transactional_id, topic.count)
        return topic.partition(index) is not None

    # writing state ------------------------------------------------------------------------------

    async def _state_topic(self):
        """``__transaction_state``, made on first use."""
        topics = self.topics
        topic = topics.get(TRANSACTION_TOPIC)
        if topic is None:
            if self._topic_ready is None:
                self._topic_ready = asyncio.ensure_future(
                    topics.create(
                        TRANSACTION_TOPIC,
                        self.state_partitions,
                        {"cleanup.policy": "compact", "segment.bytes": self.state_segment_bytes},
                    )
                )
            ready = self._topic_ready
            try:
                topic = await asyncio.shield(ready)
            except FileExistsError:
                topic = topics.get(TRANSACTION_TOPIC)
            except StorageError:
                if self._topic_ready is ready:
                    self._topic_ready = None  # undone: the next request tries again
                raise
        return topic

    async def _state_partition(self, transactional_id: str):
        topic = await self._state_topic()
        return topic.held_partition(group_offsets.partition_for(transactional_id, topic.count))

    async def _change(self, old: TransactionMetadata | None, new: TransactionMetadata) -> int:
        """Write ``new`` (a changed copy of ``old``; DEAD: a tombstone), flush, then make it
        current. Returns an error code; on error nothing changes."""
        tid = new.transactional_id
        if old is not None:
            check_transition(old.state, new.state)
            old.pending = True
        new.pending = False
        try:
            partition = await self._state_partition(tid)
            record = None if new.state is DEAD else new
            batch = transaction_log.record_batch(tid, record, self.now_ms())
            error, _, _ = partition.append(memoryview(batch), len(batch))
            if error:
                return error
            await self.topics.flush([partition])
        except StorageError:
            log.exception("writing the state of transactional id %s failed", tid)
            return E.COORDINATOR_NOT_AVAILABLE
        finally:
            if old is not None:
                old.pending = False
        if self.txns.get(tid) is not old and old is not None:
            return E.CONCURRENT_TRANSACTIONS  # cannot happen while changes are pending
        if new.state is DEAD:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = new
        return E.NONE

    def _check(self, transactional_id: str, producer_id: int, epoch: int, table=None):
        """(error, metadata) for a request of an existing producer; with ``table`` (one of
        ``transaction_state``'s answer tables keyed by state), also its answer in the
        transaction's state."""
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != txn.producer_epoch:
            return E.PRODUCER_FENCED, None
        if txn.pending:
            return E.CONCURRENT_TRANSACTIONS, None
        if table is not None and table[txn.state] is not ACCEPT:
            return table[txn.state], None
        return E.NONE, txn

    # requests -----------------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        txn = self.txns.get(transactional_id)
        if txn is None:
            if len(self.txns) >= self.max_ids:
                return E.COORDINATOR_NOT_AVAILABLE, -1, -1  # until idle ids expire
            pid = await self.producer_ids.next_id()
            if transactional_id in self.txns:
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            new = TransactionMetadata(
                transactional_id, pid, 0, timeout_ms, EMPTY, set(), self.now_ms()
            )
            new.pending = True
            self.txns[transactional_id] = new  # placeholder while the first record is written
            error = await self._change(None, replace(new, pending=False))
            if error:
                if self.txns.get(transactional_id) is new:
                    del self.txns[transactional_id]
                return error, -1, -1
            return E.NONE, pid, 0
        if txn.pending:
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        if producer_id >= 0 and (producer_id, epoch) != (txn.producer_id, txn.producer_epoch):
            return E.PRODUCER_FENCED, -1, -1
        action = INIT_PRODUCER_ID[txn.state]
        if action is ABORT_FIRST:
            error = await self._fence_and_abort(txn)
            if error:
                return error, -1, -1
            txn = self.txns[transactional_id]
        elif action is not ACCEPT:
            assert isinstance(action, int)  # the tables' other entries are error codes
            return action, -1, -1
        pid, new_epoch = txn.producer_id, txn.producer_epoch + 1
        if new_epoch >= MAX_EPOCH:
            pid, new_epoch = await self.producer_ids.next_id(), 0
        new = replace(
            txn,
            producer_id=pid,
            producer_epoch=new_epoch,
            timeout_ms=timeout_ms,
            state=EMPTY,
            partitions=set(),
            update_ms=self.now_ms(),
            start_ms=-1,
        )
        error = await self._change(txn, new)
        if error:
            return error, -1, -1
        return E.NONE, pid, new_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: set[tuple[str, int]],
        verify_only: bool = False,
    ) -> int:
        error, txn = self._check(transactional_id, producer_id, epoch, ADD_PARTITIONS)
        if error:
            return error
        if verify_only:
            added = txn.state is ONGOING and partitions <= txn.partitions
            return E.NONE if added else E.INVALID_TXN_STATE
        if txn.state is ONGOING and partitions <= txn.partitions:
            return E.NONE
        now = self.now_ms()
        new = replace(
            txn,
            state=ONGOING,
            partitions=txn.partitions | partitions,
            update_ms=now,
            start_ms=txn.start_ms if txn.state is ONGOING else now,
        )
        return await self._change(txn, new)

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> int:
        error, txn = self._check(transactional_id, producer_id, epoch)
        if error:
            return error
        action = END_TXN[(txn.state, commit)]
        if action is DONE:
            return E.NONE
        if action is not ACCEPT:
            assert isinstance(action, int)  # the tables' other entries are error codes
            return action
        prepared = replace(
            txn, state=PREPARE_COMMIT if commit else PREPARE_ABORT, update_ms=self.now_ms()
        )
        error = await self._change(txn, prepared)
        if error:
            return error
        return await self._complete(self.txns[transactional_id], commit)

    def verify(
        self, transactional_id: str | None, topic: str, partition: int, producer_id: int, epoch: int
    ) -> int:
        """May this producer append a transactional batch to the partition? (Produce)"""
        txn = self.txns.get(transactional_id) if transactional_id is not None else None
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_TXN_STATE
        if epoch != txn.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if txn.state is not ONGOING or (topic, partition) not in txn.partitions:
            return E.INVALID_TXN_STATE
        return E.NONE

    def check_offset_commit(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> int:
        """May this producer commit offsets for ``group_id`` in its transaction?"""
        error, txn = self._check(transactional_id, producer_id, epoch, TXN_OFFSET_COMMIT)
        if error:
            return error
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return E.INVALID_TXN_STATE
        index = group_offsets.partition_for(group_id, topic.count)
        if (OFFSETS_TOPIC, index) not in txn.partitions:
            return E.INVALID_TXN_STATE
        return E.NONE

    def add_pending_offsets(
        self, producer_id: int, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> None:
        self.pending_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def on_topics_deleted(self, names: set[str]) -> None:
        """Topics are gone: open transactions drop the offsets they would commit for them,
        so that a topic re-created under the same name is not given the old topic's offsets
        when the transaction commits."""
        for groups in self.pending_offsets.values():
            for offsets in groups.values():
                for key in [k for k in offsets if k[0] in names]:
                    del offsets[key]

    # completing ---------------------------------------------------------------------------------

    async def _fence_and_abort(self, txn: TransactionMetadata) -> int:
        """Abort an open transaction with the epoch bumped, fencing its producer."""
        check_transition(txn.state, PREPARE_EPOCH_FENCE)
        check_transition(PREPARE_EPOCH_FENCE, PREPARE_ABORT)
        pid, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch > MAX_EPOCH:
            epoch = MAX_EPOCH
        prepared = replace(
            txn, producer_id=pid, producer_epoch=epoch, state=PREPARE_ABORT, update_ms=self.now_ms()
        )
        error = await self._change(txn, prepared)
        if error:
            return error
        return await self._complete(self.txns[txn.transactional_id], commit=False)

    async def _complete(self, prepared: TransactionMetadata, commit: bool) -> int:
        """Write the markers of a decided transaction, flush them, then complete it."""
        _crash_point("after-prepare")
        prepared.pending = True
        try:
            offsets = self.pending_offsets.get(prepared.producer_id, {})
            if commit:
                for group_id, committed in offsets.items():
                    error = await self._commit_offsets(group_id, committed)
                    if error:
                        log.warning(
                            "offsets of %s for group %s: error %d",
                            prepared.transactional_id,
                            group_id,
                            error,
                        )
                        return error  # still decided: the timer completes it
            self.pending_offsets.pop(prepared.producer_id, None)
            touched = []
            for topic_name, index in sorted(prepared.partitions):
                partition = self.topics.partition(topic_name, index)
                if partition is None:
                    continue  # deleted meanwhile
                error = partition.append_marker(
                    prepared.producer_id, prepared.producer_epoch, commit, COORDINATOR_EPOCH
                )
                if error:
                    log.warning(
                        "marker for %s in %s-%d: error %d",
                        prepared.transactional_id,
                        topic_name,
                        index,
                        error,
                    )
                touched.append(partition)
                if os.environ.get("HEADRACE_TEST_CRASH") == "after-first-marker":
                    await self.topics.flush([partition])
                    _crash_point("after-first-marker")
            if touched:
                await self.topics.flush(touched)
        except StorageError:
            log.exception("markers of transactional id %s", prepared.transactional_id)
            return E.COORDINATOR_NOT_AVAILABLE  # still decided: the timer completes it
        finally:
            prepared.pending = False
        done = replace(
            prepared,
            state=COMPLETE_COMMIT if commit else COMPLETE_ABORT,
            partitions=set(),
            update_ms=self.now_ms(),
        )
        return await self._change(prepared, done)

    async def _commit_offsets(
        self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> int:
        """A committing transaction's offsets become the group's: written as a plain commit
        (before the markers, so that replaying ``__consumer_offsets`` needs no markers)."""
        return await self.groups.commit_offsets(group_id, offsets)

    async def _recover_offsets(self, txn: TransactionMetadata) -> None:
        """After a restart: the offsets a decided transaction committed, read back from
        ``__consumer_offsets`` (its batches from the transaction's first offset on)."""
        if txn.state is not PREPARE_COMMIT:
            return
        for name, index in txn.partitions:
            partition = self.topics.partition(name, index) if name == OFFSETS_TOPIC else None
            if partition is None:
                continue
            first = partition.producers.ongoing.get(txn.producer_id)
            if first is None:
                continue
            found = await asyncio.to_thread(
                _read_txn_offsets, partition.log, first, txn.producer_id
            )
            for group_id, offsets in found.items():
                self.add_pending_offsets(txn.producer_id, group_id, offsets)

    # the timer ----------------------------------------------------------------------------------

    async def check_transactions(self, now: int | None = None) -> None:
        """Abort timed-out transactions, finish stuck decisions, expire idle ids."""
        now = self.now_ms() if now is None else now
        for txn in list(self.txns.values()):
            if txn.pending or self.txns.get(txn.transactional_id) is not txn:
                continue
            if txn.state is ONGOING and now > txn.start_ms + txn.timeout_ms:
                log.info(
                    "aborting transaction of %s: open longer than %d ms",
                    txn.transactional_id,
                    txn.timeout_ms,
                )
                await self._fence_and_abort(txn)
            elif txn.state in COMPLETING and txn.state is not PREPARE_EPOCH_FENCE:
                await self._complete(txn, txn.state is PREPARE_COMMIT)
            elif txn.state in IDLE and now > txn.update_ms + self.expiration_ms:
                await self._change(txn, replace(txn, state=DEAD, update_ms=now))

    # administration -----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        """Every known transactional id's metadata, by id."""
        return [self.txns[tid] for tid in sorted(self.txns)]


def _read_txn_offsets(plog, start: int, producer_id: int) -> GroupOffsets:
    found: GroupOffsets = {}
    offset, end = start, plog.log_end_offset
    while offset < end:
        data = plog.read(offset, 1 << 20, max_offset=end)
        if not data:
            break
        for pos, size, h in iter_batches(data):
            offset = h.base_offset + h.last_offset_delta + 1
            if h.producer_id != producer_id or not h.is_transactional or h.is_control:
                continue
            for _, _, k, v, _ in decode_records(memoryview(data)[pos : pos + size]):
                parsed = group_offsets.parse_key(k) if k is not None else None
                if parsed is None or v is None:
                    continue
                group, topic, part = parsed
                found.setdefault(group, {})[(topic, part)] = group_offsets.parse_value(v)
    return found
