"""The transaction coordinator: transactional producer ids, epochs and fencing, the partitions
of each open transaction, and the commit/abort markers that close it.

How this works
--------------
Everything runs on the event loop. The allowed state changes and the answer each request
gets in each state are the tables in ``transaction_state``; this file carries out the steps.
A change is first written to ``__transaction_state`` (``transaction_log``), flushed when that
topic's ``flush.messages`` is due (as any record, and as in Kafka: with
``log.flush.interval.messages=1`` every change; by default none) and, in a cluster, taken by
the partition's ISR (Kafka writes it with acks=-1: at most
``request.timeout.ms``, else COORDINATOR_NOT_AVAILABLE; an ISR below the topic's
``min.insync.replicas``, ``transaction.state.log.min.isr``, refuses it before the append the
same way), then made in memory (``txns``); while it is written the transaction is *pending*
and other requests for it get CONCURRENT_TRANSACTIONS. A broker that becomes a partition's
leader loads its whole log: it was in the ISR, so it has every acknowledged change.

* InitProducerId with a transactional id: a new id gets a producer id, epoch 0. A known id
  gets epoch + 1 (a new producer id when the epoch is exhausted), which fences the previous
  producer; an open transaction of the old producer is aborted first (the fence: epoch + 1
  and an abort, then the new producer's bump).
* AddPartitionsToTxn / AddOffsetsToTxn add partitions (for offsets: the group's partition of
  ``__consumer_offsets``) and make the transaction Ongoing; its timeout starts then.
* Produce: a transactional batch is accepted only for a partition in the producer's Ongoing
  transaction with the current epoch (``verify``), when this broker coordinates the
  transactional id (``coordinates``); elsewhere the partition's producer state fences old
  epochs, as in Kafka before KIP-890. The partition remembers where the transaction starts,
  which holds its last stable offset back until the marker.
* TxnOffsetCommit writes the offsets to ``__consumer_offsets`` as a transactional batch;
  the group coordinator keeps them aside (``GroupCoordinator.add_txn_offsets``) and they
  become the group's committed offsets only with the commit marker of that partition (see
  ``write_txn_markers``).
* Transactions v2 (KIP-890; the client finds ``transaction.version`` 2 finalized): a partition
  joins the transaction when its leader first gets a transactional batch for it (Produce v12+;
  the group's offsets partition with TxnOffsetCommit v5): the leader's side is
  add_partitions_manager.py, which adds it here or with an AddPartitionsToTxn v5 to the
  coordinator (``join_client``). EndTxn v5 decides with the epoch + 1
  (``transaction_state.END_TXN_V2``): the markers carry the new epoch, so a batch the producer
  sent before is refused by the partition (no hanging transaction), and the answer gives the
  producer its new epoch (a new producer id when the epoch runs out, ``next_producer_id``).
* EndTxn: PrepareCommit/PrepareAbort is written (the decision), then a control batch goes to
  every partition of the transaction (markers.py: the partitions led here directly,
  the others in a WriteTxnMarkers request to their leader, one per broker, all at once), the
  partitions flushed as their ``flush.messages`` says, and CompleteCommit or CompleteAbort is
  appended; the client is
  answered after that, so a committed transaction is visible to ``read_committed`` readers
  when the producer hears of it. The Complete* record is not waited for (flushed and
  replicated with the next change): losing it costs only the markers written again. Where a
  marker could not be written the transaction stays decided and its missing markers are
  tried again until done. That part, and the timer, are completion.py.
* The cluster is seen through three callables given at construction: ``leader_of(topic,
  partition)`` (a node id; None for an unknown partition), ``is_coordinator(transactional
  id)`` and the clients that reach other brokers (``broker_client`` for markers,
  ``join_client`` for partitions joining at another coordinator). The defaults are one broker:
  every partition is led here and every transactional id is coordinated here, so nothing goes
  over the network.
* A timer (completion.py) aborts transactions open longer than their timeout (with an epoch
  bump: the producer is fenced) and forgets ids idle for ``transactional.id.expiration.ms``.
  At most ``transactional.id.max.count`` ids are kept: a new one beyond gets
  COORDINATOR_NOT_AVAILABLE.
* Start-up replays ``__transaction_state`` and finishes every Prepare* decision found there
  (a crash between the decision and its markers; the group coordinator has read the pending
  offsets of open transactions back from ``__consumer_offsets`` before). Open transactions
  stay open: their producer may carry on, a new producer with the id aborts them, or they
  time out.

Fencing answers are PRODUCER_FENCED; the API modules turn them into INVALID_PRODUCER_EPOCH
for request versions older than KIP-588.

Crash tests: the environment variable ``HEADRACE_TEST_CRASH`` set to ``after-prepare`` (once
a Prepare* decision is written, before any marker) or ``after-first-marker`` (once the first
partition's marker is written) makes the broker kill itself with SIGKILL at that point. It is
read only by tests; nothing else sets it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from headrace.broker.background import run_every, wall_clock_ms
from headrace.broker.coordinator.group import group_offsets
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.broker.log.replay import ReplayError
from headrace.protocol import ErrorCode
from headrace.storage import StorageError

from . import transaction_log
from .add_partitions_manager import AddPartitionsToTxnManager
from .completion import Completion
from .markers import TransactionMarkers
from .transaction_log import MAX_EPOCH, TRANSACTION_TOPIC, TransactionMetadata
from .transaction_state import (
    ABORT_EMPTY,
    ABORT_FIRST,
    ACCEPT,
    ADD_PARTITIONS,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    DONE,
    EMPTY,
    END_TXN,
    END_TXN_V2,
    INIT_PRODUCER_ID,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TXN_OFFSET_COMMIT,
    check_transition,
)

log = logging.getLogger("headrace.transactions")

E = ErrorCode


class TransactionCoordinator:
    """Built from what it uses: the topic table (``__transaction_state`` and the partitions
    of transactions live there), the producer id source, the group coordinator (a committed
    transaction's offsets become the group's), this node's id, the settings it reads and the
    cluster's callables (see the module doc)."""

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
        leader_of: Callable[[str, int], int | None] | None = None,
        is_coordinator: Callable[[str], bool] | None = None,
        broker_client=None,
        join_client=None,
        write_timeout_ms: int = 30000,
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
        self.leader_of = leader_of or (lambda topic, partition: node_id)
        self.is_coordinator = is_coordinator
        self.broker_client = broker_client  # markers to the partitions' leaders
        # partitions of __transaction_state held here whose ids are not served (requests get
        # COORDINATOR_LOAD_IN_PROGRESS): moved here and being loaded, or their replay failed
        self.loading: set[int] = set()
        self.unavailable: set[int] = set()
        self.write_timeout_s = write_timeout_ms / 1000  # request.timeout.ms, as in Kafka
        self.txns: dict[str, TransactionMetadata] = {}
        # the markers of decided transactions, written here or sent (the leaders as
        # ``leader_of`` says at the time)
        self.markers = TransactionMarkers(
            topics, groups, node_id, lambda t, p: self.leader_of(t, p), broker_client
        )
        # transactions v2: the partitions led here join their producers' transactions (here,
        # or at their coordinator through ``join_client``)
        self.add_partitions_manager = AddPartitionsToTxnManager(self, join_client)
        # decided transactions brought to Complete*, and the timer (completion.py)
        self.completion = Completion(self)
        self._tasks: list[asyncio.Task] = []
        self._changed: asyncio.Event | None = None  # set when a change is written (_written)

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self, load: bool = True) -> None:
        """Load the transactional ids (unless ``load`` is False: in a cluster the partitions
        this broker leads are loaded as it comes to lead them) and start the timer."""
        topic = self.topics.get(TRANSACTION_TOPIC)
        if topic is not None and load:
            await self._load(topic.partitions)
        self._tasks.append(
            asyncio.create_task(
                run_every(self.check_interval_ms / 1000, self.completion.check, "transaction check")
            )
        )

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.completion.stop()

    async def _load(self, partitions) -> None:
        """Read the transactional ids of ``partitions`` of ``__transaction_state``; complete
        the transactions a previous coordinator had decided."""
        found: dict[str, TransactionMetadata] = {}
        for partition in partitions:
            try:
                found.update(await asyncio.to_thread(transaction_log.replay, [partition.log]))
            except ReplayError as e:
                log.error(
                    "cannot load the transactional ids of %s-%d: %s; they answer"
                    " COORDINATOR_LOAD_IN_PROGRESS until the partition is repaired (headrace"
                    " verify names the bad position) and the broker restarted",
                    TRANSACTION_TOPIC,
                    partition.index,
                    e,
                )
                self.unavailable.add(partition.index)
        self.txns.update(found)
        if found:
            log.info("loaded %d transactional ids", len(found))
        for txn in found.values():
            if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):  # else the timer's
                await self.completion.complete(txn, txn.state is PREPARE_COMMIT, attempts=1)

    async def partitions_moved(self, gained: list[int], lost: list[int]) -> None:
        """Partitions of ``__transaction_state`` moved here (their transactional ids are
        loaded, decided transactions completed) or away (their ids are forgotten here)."""
        self.loading.update(gained)
        try:
            await self._partitions_moved(gained, lost)
        finally:
            self.loading.difference_update(gained)

    async def _partitions_moved(self, gained: list[int], lost: list[int]) -> None:
        self.unavailable.difference_update(lost)
        topic = self.topics.get(TRANSACTION_TOPIC)
        if topic is None:
            return
        if lost:
            doomed = [
                tid for tid in self.txns if group_offsets.partition_for(tid, topic.count) in lost
            ]
            for tid in doomed:
                del self.txns[tid]
            self.markers.forget(doomed)
            if doomed:
                log.info(
                    "unloaded %d transactional ids (partitions %s moved away)", len(doomed), lost
                )
        if gained:
            await self._load([topic.held[i] for i in gained if i in topic.held])

    async def coordinator_for(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id``: the leader of its partition of
        ``__transaction_state`` (made on first use), as in Kafka; -1 when it has none."""
        topic = await self._state_topic()
        index = group_offsets.partition_for(transactional_id, topic.count)
        return self.topics.cluster.leader(TRANSACTION_TOPIC, index)

    def owns(self, transactional_id: str) -> bool:
        """Does this broker coordinate ``transactional_id`` now? (See GroupCoordinator.owns;
        ``is_coordinator``, when given, decides instead.) Produce and TxnOffsetCommit check a
        transaction's state only there."""
        if self.is_coordinator is not None:
            return self.is_coordinator(transactional_id)
        topic = self.topics.get(TRANSACTION_TOPIC)
        if topic is None:
            return self.topics.cluster.leader(TRANSACTION_TOPIC, 0) == self.node_id
        index = group_offsets.partition_for(transactional_id, topic.count)
        return topic.partition(index) is not None

    def not_served(self, transactional_id: str) -> int:
        """Why a request for ``transactional_id`` cannot be served here: NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS (its partition is being loaded, or failed to load), or
        NONE."""
        if not self.owns(transactional_id):
            return E.NOT_COORDINATOR
        if self.loading or self.unavailable:
            topic = self.topics.get(TRANSACTION_TOPIC)
            index = group_offsets.partition_for(transactional_id, topic.count) if topic else -1
            if index in self.loading or index in self.unavailable:
                return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    def is_leader(self, topic: str, partition: int) -> bool:
        """Does this broker lead the partition (or know nothing of it)? (WriteTxnMarkers)"""
        return self.leader_of(topic, partition) in (None, self.node_id)

    # writing state ------------------------------------------------------------------------------

    async def _state_topic(self):
        """``__transaction_state``, made on first use."""
        return await self.topics.internal(
            TRANSACTION_TOPIC,
            self.state_partitions,
            {"cleanup.policy": "compact", "segment.bytes": self.state_segment_bytes},
        )

    async def _state_partition(self, transactional_id: str):
        topic = await self._state_topic()
        return topic.held_partition(group_offsets.partition_for(transactional_id, topic.count))

    async def change(
        self, old: TransactionMetadata | None, new: TransactionMetadata, durable: bool = True
    ) -> int:
        """Write ``new`` (a changed copy of ``old``; DEAD: a tombstone), wait for it to be as
        durable as ``__transaction_state``'s settings make any record (flushed when its
        ``flush.messages`` is due, in every ISR member's log in a cluster), then make it
        current. Returns an error code; on error nothing changes. ``durable=False`` (a
        Complete* record): current once appended; the next change's flush and replication
        take it along, and should it be lost before, the Prepare* before it is finished again
        (start-up, a new coordinator), which only rewrites markers already there."""
        tid = new.transactional_id
        if old is not None:
            check_transition(old.state, new.state)
            old.pending = True
        new.pending = False
        try:
            partition = await self._state_partition(tid)
            if partition.too_few_in_sync():  # NOT_ENOUGH_REPLICAS, as Kafka maps it
                return E.COORDINATOR_NOT_AVAILABLE
            record = None if new.state is DEAD else new
            batch = transaction_log.record_batch(tid, record, self.now_ms())
            error, _, _ = partition.append(memoryview(batch), len(batch))
            if error == E.NOT_LEADER_OR_FOLLOWER:  # the partition is moving away
                return E.NOT_COORDINATOR
            if error:
                return error
            end = partition.log.log_end_offset
            if durable:
                if partition.flush_due:
                    await self.topics.flush([partition])
                if partition.gone:  # moved away meanwhile: the new coordinator read the record
                    return E.NOT_COORDINATOR
                error = await partition.replicated(end, self.write_timeout_s)
                if error == E.NOT_LEADER_OR_FOLLOWER:
                    return E.NOT_COORDINATOR
                if error:
                    log.info("transactional id %s: not replicated (error %d)", tid, error)
                    return E.COORDINATOR_NOT_AVAILABLE
        except StorageError:
            log.exception("writing the state of transactional id %s failed", tid)
            return E.COORDINATOR_NOT_AVAILABLE
        finally:
            if old is not None:
                old.pending = False
            if self._changed is not None:  # wake the adds that wait (``add_partitions``)
                self._changed.set()
                self._changed = None
        if self.txns.get(tid) is not old and old is not None:
            return E.CONCURRENT_TRANSACTIONS  # cannot happen while changes are pending
        if new.state is DEAD:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = new
        return E.NONE

    def _written(self) -> asyncio.Event:
        """An event set when the next change has been written (or failed)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

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
            error = await self.change(None, replace(new, pending=False))
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
            error = await self.completion.fence_and_abort(txn)
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
        error = await self.change(txn, new)
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
        client_version: int = 0,
    ) -> int:
        """AddPartitionsToTxn and AddOffsetsToTxn (``client_version`` 0), and the partitions
        a leader adds for a transactions-v2 producer (2). The leaders of a v2 transaction's
        partitions add them at once: one waits for another's change to be written (at most
        ``request.timeout.ms``) instead of answering CONCURRENT_TRANSACTIONS, which would
        send the producer into a retry backoff."""
        error, txn = self._check(transactional_id, producer_id, epoch, ADD_PARTITIONS)
        deadline = asyncio.get_running_loop().time() + self.write_timeout_s
        while error == E.CONCURRENT_TRANSACTIONS and client_version >= 2:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._written().wait(), remaining)
            except TimeoutError:
                break
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
            client_version=client_version,
        )
        return await self.change(txn, new)

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        client_version: int = 0,
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch): the producer id and epoch to go on with, for a
        transactions-v2 client (``client_version`` 2, EndTxn v5); -1, -1 otherwise."""
        if client_version >= 2:
            return await self._end_txn_v2(transactional_id, producer_id, epoch, commit)
        return await self._end_txn(transactional_id, producer_id, epoch, commit), -1, -1

    async def _end_txn(
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
        error = await self.change(txn, prepared)
        if error:
            return error
        return await self.completion.complete(self.txns[transactional_id], commit)

    async def _end_txn_v2(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[int, int, int]:
        txn = self.txns.get(transactional_id)
        if txn is None:
            return E.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if txn.pending:
            return E.CONCURRENT_TRANSACTIONS, -1, -1
        # a retry: the EndTxn that bumped the epoch (or rotated the producer id) asked again
        bumped = txn.producer_epoch == epoch + 1
        rotated = (
            txn.previous_producer_id == producer_id
            and epoch >= MAX_EPOCH - 1
            and txn.producer_epoch == 0
        )
        if txn.producer_id != producer_id and not rotated:
            return E.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            valid = bumped
        elif txn.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            valid = bumped or rotated or epoch == txn.producer_epoch
        else:
            valid = epoch == txn.producer_epoch
        if not valid:
            return E.PRODUCER_FENCED, -1, -1
        action = END_TXN_V2[(txn.state, commit, bumped or rotated)]
        if action is DONE:
            return E.NONE, txn.producer_id, txn.producer_epoch
        if action is not ACCEPT and action is not ABORT_EMPTY:
            assert isinstance(action, int)  # the tables' other entries are error codes
            return action, -1, -1
        next_id = -1
        if txn.producer_epoch >= MAX_EPOCH - 1:  # exhausted: complete with a new producer id
            next_id = await self.producer_ids.next_id()
            if self.txns.get(transactional_id) is not txn or txn.pending:
                return E.CONCURRENT_TRANSACTIONS, -1, -1
        now = self.now_ms()
        prepared = replace(
            txn,
            state=PREPARE_COMMIT if commit else PREPARE_ABORT,
            producer_epoch=min(txn.producer_epoch + 1, MAX_EPOCH),
            partitions=txn.partitions if action is ACCEPT else set(),
            start_ms=txn.start_ms if action is ACCEPT else now,
            update_ms=now,
            client_version=2,
            next_producer_id=next_id,
        )
        error = await self.change(txn, prepared)
        if not error:
            error = await self.completion.complete(self.txns[transactional_id], commit)
        if error:
            return error, -1, -1
        done = self.txns[transactional_id]
        return E.NONE, done.producer_id, done.producer_epoch

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

    # administration -----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        """Every known transactional id's metadata, by id."""
        return [self.txns[tid] for tid in sorted(self.txns)]
