"""One partition: its log, its producers' state, the fetches waiting for it, and the append
path of a produce (validation, offsets, producer checks, transaction markers).

``Partition.append`` validates a produce payload as a whole before anything is written: batch
sizes, record counts and CRCs, then the producer's sequence and epoch (``producer_state``) and,
for a transactional batch, the coordinator's check that the partition is in the producer's
open transaction. Offsets are written into the payload in place (the CRC does not cover them).
After an append every waiting fetch is woken. ``Partition.produce`` (the Produce API's entry)
leaves the copy of a large payload into the page cache to the append stage
(pipeline/append.py): offsets and producer state at once, the batches readable (and the
fetches woken) once the copy is done. When the log rolls a segment, the producer state
is snapshotted in a worker thread.

A replica's copy (``append_copied``: a partition being moved here, fetched from its leader)
appends the leader's batches unchanged, offsets included, and rebuilds the producer state and
the aborted-transactions entries from their headers as recovery does, so idempotent producers
and open transactions carry on when the copy becomes the leader. While a move switches
ownership the leader refuses writes (``frozen``: NOT_LEADER_OR_FOLLOWER, clients retry); a
partition that moved away or was deleted is ``gone``.

The high watermark (``hw``) and the fetches waiting for data are the partition's alone: the
leader's state (log/leader_state.py) moves the high watermark up with ``advance_hw``,
a follower takes its leader's with ``follow_hw``, a leader stepping down keeps it with
``keep_hw``, and whoever changes what a waiting fetch would get calls ``wake_fetches``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.protocol.errors import ErrorCode
from headrace.protocol.records import (
    CorruptRecordError,
    crc_matches,
    iter_batches,
    set_base_offset,
    set_log_append_time,
)
from headrace.record_format import PARTITION_LEADER_EPOCH_OFFSET
from headrace.storage import LeaderEpochCache, Log, StorageError

from .producer_state import (
    ProducerStateManager,
    drop_snapshots_above,
    last_sequence,
    snapshot_name,
    write_snapshot_data,
)
from .storage_errors import storage_failed
from .txn_markers import ABORT, COMMIT, control_batch, control_marker

if TYPE_CHECKING:
    from headrace.pipeline import Appender

    from .leader_state import LeaderState
    from .topic import Topic

log = logging.getLogger("headrace")

_LEADER_EPOCH = struct.Struct(">i")

# A producer-state snapshot is also written once this many offsets were appended since the
# newest one (at most every SNAPSHOT_MIN_S): a cut (``truncate_to``) rebuilds the state by
# replaying the batch headers from the newest snapshot below it, and a log that does not roll
# (1 GiB segments) would otherwise be replayed from its start, which takes seconds on a long log
SNAPSHOT_RECORDS = 20_000
SNAPSHOT_MIN_S = 1.0

# Payloads at least this large go to the append stage (Partition.produce): there the copy into
# the page cache (about 0.75 ms per 256 KiB, often more), or the direct write of a log flushed
# after every message, outweighs the hop to its thread and back
WRITE_LATER_BYTES = 256 * 1024


class Partition:
    """One partition: its log, producer state and fetchers waiting for new data."""

    __slots__ = (
        "topic",
        "index",
        "log",
        "producers",
        "_fetches",
        "unflushed",
        "flushed_at",
        "_segments",
        "_opened_end",
        "frozen",
        "gone",
        "leader",
        "leader_epoch",
        "leader_state",
        "hw",
        "epochs",
        "_writes",
        "_snapshots",
        "_snapshot_time",
    )

    def __init__(self, topic: Topic, index: int, log: Log, producers: ProducerStateManager):
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = producers
        self._fetches: list[asyncio.Future] = []  # long-polling fetches waiting for data
        self.unflushed = 0  # messages appended since the last flush was asked for
        self.flushed_at = 0.0  # event-loop time of that flush
        self._segments = log.segment_count  # a change means the log rolled: snapshot
        self._opened_end = log.log_end_offset
        self.frozen = False  # a move is switching ownership: writes are refused
        self.gone = False  # moved away or deleted: reads and writes are refused
        # replication (cluster mode, replica_manager.py): a partition is served to clients
        # only while this broker leads it; a follower's log is copied from the leader
        self.leader = True
        self.leader_epoch = -1  # stamped into appended batches (partitionLeaderEpoch) if >= 0
        self.leader_state: LeaderState | None = None  # followers' progress, ISR, waiting acks
        self.hw = -1  # the high watermark; -1: the log end (no other replica to wait for)
        self.epochs: LeaderEpochCache | None = None  # loaded when replication needs it
        self._writes: asyncio.Future | None = None  # the last write left to the append stage
        self._snapshots: set[asyncio.Future] = set()  # producer-state snapshots being written
        self._snapshot_time = 0.0  # time.monotonic() of the last one

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided (and every record is replicated to the
        ISR); ``read_committed`` readers stop here."""
        return self.producers.last_stable_offset(self.high_watermark)

    def too_few_in_sync(self) -> bool:
        """acks=all would get NOT_ENOUGH_REPLICAS: the ISR is smaller than the topic's
        ``min.insync.replicas`` (never without replication)."""
        ls = self.leader_state
        return ls is not None and len(ls.isr) < ls.min_isr

    async def replicated(self, end: int, timeout_s: float) -> int:
        """acks=all for a write the broker makes itself (a coordinator's record, a
        transaction marker): an error code once the high watermark has reached ``end`` (the
        offset after the write). NONE at once without replication; REQUEST_TIMED_OUT after
        ``timeout_s``; NOT_ENOUGH_REPLICAS_AFTER_APPEND or NOT_LEADER_OR_FOLLOWER as for a
        produce (leader_state.py)."""
        ls = self.leader_state
        if ls is None:
            if self.leader and not self.gone:
                return ErrorCode.NONE
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        future = ls.wait(end)
        try:
            async with asyncio.timeout(max(timeout_s, 0)):
                return await future
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        finally:
            if not future.done():
                future.cancel()
            ls.forget(future)

    @property
    def flush_due(self) -> bool:
        """Whether the messages appended since the last flush reach the topic's
        ``flush.messages``: then whoever appended them waits for a flush (a Produce, a
        coordinator's record, a transaction marker), as Kafka's log flushes by that count."""
        return self.unflushed >= self.topic.produce_config.flush_messages

    def mark_flushed(self, now: float) -> None:
        self.unflushed = 0
        self.flushed_at = now

    @property
    def high_watermark(self) -> int:
        """What consumers may read: the log end on a partition without other in-sync
        replicas, else the smallest log end among the ISR (leader_state.py)."""
        hw = self.hw
        end = self.log.log_end_offset
        return end if hw < 0 or hw > end else hw

    # The high watermark and the fetches waiting for data are this partition's alone: the
    # replication roles change them through these methods (as Kafka's Partition does).

    def advance_hw(self, hw: int | None) -> bool:
        """(The leader, leader_state.py.) ``None``: no other replica is in sync, so the high
        watermark is the log end; else move it up to ``hw``, the smallest log end over the
        ISR (never back). Whether it moved; the caller then wakes the waiting fetches."""
        if hw is None:
            self.hw = -1
            return True
        if self.hw < 0:  # from "the log end" to a number: never below what it was
            self.hw = self.log.log_end_offset
        if hw <= self.hw:
            return False
        self.hw = hw
        return True

    def follow_hw(self, leader_hw: int) -> None:
        """(A follower; a replica taking its first role, from its checkpoint.) The leader's
        high watermark, never past this log's end."""
        self.hw = min(leader_hw, self.log.log_end_offset)

    def keep_hw(self) -> None:
        """(A leader stepping down.) The high watermark as it is now, as a number, not "the
        log end" (which a follower's log could run past)."""
        self.hw = self.high_watermark

    def await_data(self, fetch: asyncio.Future) -> None:
        """A long-polling fetch waits for this partition's next append (or HW move)."""
        self._fetches.append(fetch)

    def stop_awaiting(self, fetch: asyncio.Future) -> None:
        try:
            self._fetches.remove(fetch)
        except ValueError:
            pass

    def wake_fetches(self) -> None:
        """Answer the waiting fetches now (there is data, or the partition's role changed)."""
        if self._fetches:
            fetches, self._fetches = self._fetches, []
            for f in fetches:
                if not f.done():
                    f.set_result(None)

    def append(
        self, records: memoryview, max_batch: int, verify=None, log_append_time: int = -1
    ) -> tuple[int, int, int]:
        """Validate, assign offsets and append one produce payload.

        Returns (error code, base offset, messages appended). Offsets are written into the
        payload in place; the CRC does not cover them. Nothing is appended unless every batch
        is valid. A transactional batch is accepted only when ``verify(producer id, epoch)``
        (the transaction coordinator's check that this partition is in the producer's open
        transaction) answers NONE. With ``log_append_time`` >= 0 (a LogAppendTime topic) every
        batch is stamped with it.
        """
        try:
            batches = list(iter_batches(records))
        except CorruptRecordError:
            return ErrorCode.CORRUPT_MESSAGE, -1, 0
        code, base, count, _ = self.produce(records, batches, max_batch, verify, log_append_time)
        return code, base, count

    def produce(
        self,
        records: memoryview,
        batches: list,
        max_batch: int,
        verify=None,
        log_append_time: int = -1,
        appender: Appender | None = None,
        direct: bool = False,
    ) -> tuple[int, int, int, asyncio.Future | None]:
        """``append`` of ``records`` whose ``batches`` (``iter_batches(records)``) the caller
        has parsed, with the copy into the page cache of a large payload (or of any payload
        while earlier ones are being copied) left to ``appender``, the append stage: then the
        fourth element is the future of that write, and the batches count as appended (offsets,
        producer state) but are readable only once it is done; if it fails (with a
        ``StorageError``), the producer state forgets them. A retry of a batch still being
        written gets the future of the last write. ``direct``: the append stage writes around
        the page cache (``Log.append_later``)."""
        if self.frozen or self.gone:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 0, None
        if not batches:
            return ErrorCode.CORRUPT_MESSAGE, -1, 0, None
        count = 0
        for pos, size, h in batches:
            if size > max_batch:
                return ErrorCode.MESSAGE_TOO_LARGE, -1, 0, None
            if h.records_count != h.last_offset_delta + 1 or h.records_count <= 0:
                return ErrorCode.CORRUPT_MESSAGE, -1, 0, None
            if not crc_matches(records[pos : pos + size]):
                return ErrorCode.CORRUPT_MESSAGE, -1, 0, None
            count += h.records_count
        first = batches[0][2]
        pid = first.producer_id
        if pid >= 0:
            if len(batches) != 1:
                return ErrorCode.INVALID_RECORD, -1, 0, None
            if first.is_control:
                return ErrorCode.INVALID_RECORD, -1, 0, None
            last_seq = last_sequence(first.base_sequence, first.last_offset_delta)
            error, retry_offset = self.producers.check(
                pid, first.producer_epoch, first.base_sequence, last_seq
            )
            if error:
                return error, -1, 0, None
            if retry_offset >= 0:
                return ErrorCode.NONE, retry_offset, 0, self._last_write()
            if first.is_transactional:
                if verify is None:
                    return ErrorCode.INVALID_TXN_STATE, -1, 0, None
                error = verify(pid, first.producer_epoch)
                if error:
                    return error, -1, 0, None
        elif first.is_transactional or first.is_control:
            return ErrorCode.INVALID_RECORD, -1, 0, None
        if log_append_time >= 0:
            for pos, size, _ in batches:
                set_log_append_time(records, pos, size, log_append_time)
            batches = list(iter_batches(records))
        written = None
        if (
            appender is not None
            and not first.is_transactional
            and (len(records) >= WRITE_LATER_BYTES or self.log.writing)
        ):
            base, max_timestamp, written = self._write_later(records, batches, appender, direct)
        else:
            base, max_timestamp = self._write(records, batches)
        if base < 0:
            return ErrorCode.KAFKA_STORAGE_ERROR, -1, 0, None
        if pid >= 0:
            self.producers.record(
                pid,
                first.producer_epoch,
                first.base_sequence,
                last_seq,
                base,
                max_timestamp,
                first.is_transactional,
            )
        if written is None:
            self._appended(count)
        else:
            self.unflushed += count
            self._writes = written
            written.add_done_callback(partial(self._written, base))
        return ErrorCode.NONE, base, count, written

    def _set_offsets(self, records, batches, base: int) -> tuple[int, int]:
        """Write the offsets (and the leader epoch) into the batches' headers; returns (the
        offset after the last batch, their max timestamp)."""
        offset, max_timestamp = base, -1
        epoch = self.leader_epoch
        for pos, _, h in batches:
            set_base_offset(records, pos, offset)
            if epoch >= 0:
                _LEADER_EPOCH.pack_into(records, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
            offset += h.records_count
            if h.max_timestamp > max_timestamp:
                max_timestamp = h.max_timestamp
        return offset, max_timestamp

    def _write(self, records, batches, aborted_txn=None) -> tuple[int, int]:
        """Set offsets and append; (base offset, max timestamp), base -1 on a storage error.
        ``aborted_txn``: the index entry of an abort marker being appended."""
        log = self.log
        log.settle()  # the append stage's writes of this log first
        base = log.log_end_offset
        offset, max_timestamp = self._set_offsets(records, batches, base)
        try:
            log.append(records, base, offset - 1, max_timestamp, aborted_txn=aborted_txn)
        except StorageError as e:
            storage_failed(f"{self.topic.name}-{self.index}", "append", e)
            return -1, -1
        self._rolled(base)
        return base, max_timestamp

    def _write_later(self, records, batches, appender: Appender, direct: bool):
        """Set offsets and reserve the append; the copy goes to ``appender``. (base offset, max
        timestamp, the write's future); base -1 on a storage error."""
        log = self.log
        base = log.next_offset
        offset, max_timestamp = self._set_offsets(records, batches, base)
        try:
            write = log.append_later(records, base, offset - 1, max_timestamp, direct)
        except StorageError as e:
            storage_failed(f"{self.topic.name}-{self.index}", "append", e)
            return -1, -1, None
        self._rolled(base)
        return base, max_timestamp, appender.write(write)

    async def writes_done(self) -> None:
        """Wait until every write left to the append stage so far is done (a partition frozen
        for a move or a reassignment, before it takes the log end offset as final)."""
        w = self._writes
        if w is not None:
            await asyncio.wait([w])

    def _last_write(self) -> asyncio.Future | None:
        """The future of the last write left to the append stage, while it runs."""
        w = self._writes
        return w if w is not None and not w.done() else None

    def _written(self, base: int, write: asyncio.Future) -> None:
        """A write left to the append stage is done: its batches are readable, or (it failed)
        forgotten by the producer state, as are the ones reserved after it (they fail too).
        The log refuses appends from a failed write until the last one reserved is done and
        forgotten (``Log.failure_seen``): an append taking the failed offsets before the
        producer state forgot them would land behind a gap."""
        last = self._writes is write
        if last:
            self._writes = None
        if write.cancelled() or write.exception() is not None:
            self.producers.truncate(base)
            if last:
                self.log.failure_seen()
        else:
            self._appended(0)

    def _rolled(self, offset: int) -> None:
        """After an append ending below ``offset`` (the producer state has every batch below it
        and none above): snapshot the producer state if the log rolled, or if
        ``SNAPSHOT_RECORDS`` offsets came since the newest snapshot and no write of the append
        stage is in flight, so that a cut replays little (``SNAPSHOT_RECORDS``)."""
        if self.log.segment_count != self._segments:
            self._segments = self.log.segment_count
            self._snapshot_in_background(offset)
        elif (
            not self.producers.empty  # (none for a partition without producers, as at close)
            and offset - self.producers.snapshot_offset >= SNAPSHOT_RECORDS
            and self._writes is None
            and time.monotonic() - self._snapshot_time >= SNAPSHOT_MIN_S
        ):
            self._snapshot_in_background(offset)

    def _snapshot_in_background(self, offset: int) -> None:
        """Snapshot the producer state below ``offset`` (the batch at ``offset`` is not
        recorded yet) and write it in a worker thread."""
        data = self.producers.snapshot(offset)
        self.producers.snapshotted = True
        self.producers.snapshot_offset = offset
        self._snapshot_time = time.monotonic()
        directory = Path(self.log.directory)

        def write():
            try:
                write_snapshot_data(directory, data)
            except OSError:
                log.exception("producer state snapshot of %s failed", directory)

        written = asyncio.get_running_loop().run_in_executor(None, write)
        self._snapshots.add(written)
        written.add_done_callback(self._snapshots.discard)

    def append_transactional(self, batch: bytearray, producer_id: int, epoch: int) -> int:
        """Append a batch the coordinator wrote for a transaction (transactional offset
        commits): no sequence numbers. Returns the error code."""
        if self.frozen or self.gone:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = self.producers.check_marker(producer_id, epoch)
        if error:
            return error
        batches = list(iter_batches(batch))
        base, max_timestamp = self._write(batch, batches)
        if base < 0:
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.producers.record(producer_id, epoch, -1, -1, base, max_timestamp, True)
        self._appended(batches[0][2].records_count)
        return ErrorCode.NONE

    def append_marker(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> int:
        """Append a commit or abort marker for the producer's transaction. Returns the error
        code (INVALID_PRODUCER_EPOCH for a marker older than what this partition knows)."""
        if self.frozen or self.gone:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = self.producers.check_marker(producer_id, epoch)
        if error:
            return error
        batch = control_batch(producer_id, epoch, commit, coordinator_epoch)
        kind = COMMIT if commit else ABORT
        aborted = self.producers.marker_entry(producer_id, kind, self.log.log_end_offset)
        base, _ = self._write(batch, list(iter_batches(batch)), aborted)
        if base < 0:
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.producers.complete(producer_id, epoch, kind, base, coordinator_epoch)
        self._appended(1)
        return ErrorCode.NONE

    def append_copied(self, records: memoryview) -> int:
        """Append batches fetched from the partition's leader, unchanged (their offsets kept;
        compaction may have left gaps). Batches below the log end (fetched twice) are
        skipped. The producer state follows each batch header, and an abort marker brings its
        aborted-transactions entry, as when the log is recovered. Contiguous data batches go
        to the log in one append. Returns the messages appended; raises
        ``CorruptRecordError`` (nothing of the bad batch on is appended) or ``StorageError``."""
        log, producers = self.log, self.producers
        run_start = run_end = -1  # the data batches not appended yet: their byte range
        run_base = run_last = run_ts = -1
        count = 0

        def flush_run() -> None:
            nonlocal run_start
            if run_start >= 0:
                log.append(records[run_start:run_end], run_base, run_last, run_ts, copied=True)
                self._rolled(run_last + 1)  # (the run's batches are in the producer state)
                run_start = -1

        epochs = self.epochs
        for pos, size, h in iter_batches(records):
            last = h.base_offset + h.last_offset_delta
            if last < (run_last + 1 if run_start >= 0 else log.log_end_offset):
                continue  # already here
            if not crc_matches(records[pos : pos + size]):
                raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC")
            if epochs is not None and h.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(h.partition_leader_epoch, h.base_offset)
            if h.is_control and h.producer_id >= 0:
                flush_run()
                kind, coordinator_epoch = control_marker(records[pos : pos + size])
                aborted = producers.marker_entry(h.producer_id, kind, h.base_offset)
                batch = records[pos : pos + size]
                log.append(batch, h.base_offset, last, h.max_timestamp, aborted, copied=True)
                self._rolled(h.base_offset)
                if kind in (ABORT, COMMIT):
                    producers.complete(
                        h.producer_id, h.producer_epoch, kind, h.base_offset, coordinator_epoch
                    )
            else:
                if run_start < 0:
                    run_start, run_base, run_ts = pos, h.base_offset, h.max_timestamp
                run_end, run_last = pos + size, last
                run_ts = max(run_ts, h.max_timestamp)
                producers.replay(records[pos : pos + size])
            count += h.records_count
        flush_run()
        if count:
            self._appended(count)
        return count

    async def truncate_to(self, offset: int) -> None:
        """(A follower.) Cut the log at ``offset`` (a batch boundary; what lies above came from
        a leader the new one does not follow): indexes, producer state (rebuilt from the log
        below it, as at recovery: from the newest snapshot below the cut, see ``_rolled``) and
        leader-epoch cache follow. An empty producer state stays empty (a cut adds no
        producer; as Kafka, nothing is replayed). Disk work in a thread."""
        if offset >= self.log.log_end_offset:
            return
        plog, directory = self.log, Path(self.log.directory)
        before = self.producers
        empty = before.empty

        def cut() -> ProducerStateManager:
            plog.truncate_to(offset)
            drop_snapshots_above(directory, plog.log_end_offset)
            if empty:
                state = ProducerStateManager(before.max_joining)
                state.snapshotted = before.snapshotted
                state.snapshot_offset = min(before.snapshot_offset, plog.log_end_offset)
                return state
            return ProducerStateManager.load(directory, plog, before.max_joining)

        await self._snapshots_written()  # none may land above the cut once it is made
        self.producers = await asyncio.to_thread(cut)
        end = self.log.log_end_offset
        self._segments = self.log.segment_count
        if self.hw > end:
            self.hw = end
        if self.epochs is not None:
            self.epochs.truncate_from_end(end)
            if self.epochs.dirty:
                await asyncio.to_thread(self.epochs.write)

    async def restart_at(self, offset: int) -> None:
        """(A copy.) Empty the log and start it again at ``offset`` (the leader's log start
        passed this copy's end): no producer state is left, and no snapshot of the old one."""
        plog, directory = self.log, Path(self.log.directory)

        def restart() -> None:
            plog.restart_at(offset)
            drop_snapshots_above(directory, -1)

        await self._snapshots_written()
        await asyncio.to_thread(restart)
        self.producers = ProducerStateManager(self.producers.max_joining)
        self._segments = plog.segment_count

    async def _snapshots_written(self) -> None:
        if self._snapshots:
            await asyncio.wait(list(self._snapshots))

    def _appended(self, count: int) -> None:
        self.unflushed += count
        if self._fetches:  # (every append: no call when no fetch waits)
            self.wake_fetches()

    def close(self) -> None:
        self.log.close()
        producers = self.producers
        if producers.empty and not producers.snapshotted:
            return  # nothing to remember, and no older snapshot to supersede
        directory, end = Path(self.log.directory), self.log.log_end_offset
        if end == self._opened_end and (directory / snapshot_name(end)).exists():
            return  # nothing appended since the open: the snapshot at the end is current
        self.producers.write_snapshot(directory, end)
