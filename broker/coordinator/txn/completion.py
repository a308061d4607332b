"""Closing decided transactions, and the transaction coordinator's timer.

How this works
--------------
A transaction is *decided* once its PrepareCommit or PrepareAbort is written
(``TransactionCoordinator.change``). ``complete`` then writes its markers (markers.py: here for
the partitions led here, a WriteTxnMarkers request to each other leader) and appends
CompleteCommit or CompleteAbort. Where a marker could not be written (leader moved or
unreachable, disk error) the transaction stays decided and is tried again every
``MARKER_RETRY_S`` until done (``retry_later``; Kafka's coordinator too keeps sending markers
until written), sending only the markers still missing: after a restart of the cluster the
leaders come back one by one, and a client's commit waits for that, not for the timer. At
most one try per transactional id is waiting, so the set of them is bounded by the ids kept
(``transactional.id.max.count``); ``TIMER_CONCURRENCY`` of them run at once.

The timer (every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``) aborts
transactions open longer than their timeout, with the epoch bumped so that their producer is
fenced (``fence_and_abort``, as InitProducerId does to an open transaction of the id's
previous producer), hands decided transactions that are not being tried to the retries, and
forgets ids idle for ``transactional.id.expiration.ms``.

Everything runs on the event loop, and every change of state is the coordinator's
(``change``): this file decides which changes to make and when.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from .markers import MARKER_ATTEMPTS, MARKER_RETRY_S, crash_point
from .transaction_log import MAX_EPOCH, TransactionMetadata
from .transaction_state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    COMPLETING,
    DEAD,
    IDLE,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    check_transition,
)

if TYPE_CHECKING:
    from .transaction_coordinator import TransactionCoordinator

log = logging.getLogger("headrace.transactions")

TIMER_CONCURRENCY = 32  # transactions aborted by the timer, or tried again, at once


class Completion:
    """The decided transactions of ``coordinator`` brought to Complete*, and its timer."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        # decided transactions whose markers are not all written: tried again until done
        self._unfinished: set[str] = set()
        self._retrying: asyncio.Task | None = None

    def stop(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()

    async def complete(
        self, prepared: TransactionMetadata, commit: bool, attempts: int = MARKER_ATTEMPTS
    ) -> int:
        """Write the markers of a decided transaction, then complete it; on an error it stays
        decided and is tried again (``retry_later``)."""
        c = self.coordinator
        crash_point("after-prepare")
        prepared.pending = True
        try:
            error = await c.markers.write(prepared, commit, attempts)
        finally:
            prepared.pending = False
        if error:
            self.retry_later(prepared)
            return error
        done = replace(
            prepared,
            state=COMPLETE_COMMIT if commit else COMPLETE_ABORT,
            partitions=set(),
            update_ms=c.now_ms(),
        )
        if prepared.next_producer_id >= 0:  # transactions v2, the epoch ran out: a new id
            done = replace(
                done,
                producer_id=prepared.next_producer_id,
                producer_epoch=0,
                previous_producer_id=prepared.producer_id,
                next_producer_id=-1,
            )
        return await c.change(prepared, done, durable=False)

    async def fence_and_abort(
        self, txn: TransactionMetadata, attempts: int = MARKER_ATTEMPTS
    ) -> int:
        """Abort an open transaction with the epoch bumped, fencing its producer."""
        c = self.coordinator
        check_transition(txn.state, PREPARE_EPOCH_FENCE)
        check_transition(PREPARE_EPOCH_FENCE, PREPARE_ABORT)
        epoch = min(txn.producer_epoch + 1, MAX_EPOCH)
        prepared = replace(txn, producer_epoch=epoch, state=PREPARE_ABORT, update_ms=c.now_ms())
        error = await c.change(txn, prepared)
        if error:
            return error
        return await self.complete(c.txns[txn.transactional_id], False, attempts)

    def retry_later(self, txn: TransactionMetadata) -> None:
        """Try the markers of ``txn`` (decided) again in ``MARKER_RETRY_S``, and then every
        ``MARKER_RETRY_S`` until it is complete, or no longer decided here."""
        self._unfinished.add(txn.transactional_id)
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.ensure_future(self._retry_unfinished())

    async def _retry_unfinished(self) -> None:
        slots = asyncio.Semaphore(TIMER_CONCURRENCY)
        txns = self.coordinator.txns

        async def retry(tid: str) -> None:
            async with slots:
                txn = txns.get(tid)
                if txn is None or txn.state not in COMPLETING:  # completed, or moved away
                    self._unfinished.discard(tid)
                elif not txn.pending:  # (pending: being completed, which retries if it fails)
                    self._unfinished.discard(tid)
                    try:
                        await self.complete(txn, txn.state is PREPARE_COMMIT, attempts=1)
                    except Exception:  # (the timer finds it decided, and hands it back)
                        log.exception("completing the transaction of %s failed", tid)

        while self._unfinished:
            await asyncio.sleep(MARKER_RETRY_S)
            await asyncio.gather(*(retry(tid) for tid in list(self._unfinished)))

    async def check(self, now: int | None = None) -> None:
        """The timer: abort timed-out transactions (one try each, several at once: a broker
        that does not answer holds up only its own transactions), hand decided ones to the
        retries, expire idle ids."""
        c = self.coordinator
        now = c.now_ms() if now is None else now
        slots = asyncio.Semaphore(TIMER_CONCURRENCY)

        async def abort(txn: TransactionMetadata) -> None:
            async with slots:
                if txn.pending or c.txns.get(txn.transactional_id) is not txn:
                    return
                log.info(
                    "aborting transaction of %s: open longer than %d ms",
                    txn.transactional_id,
                    txn.timeout_ms,
                )
                await self.fence_and_abort(txn, attempts=1)

        work = []
        for txn in list(c.txns.values()):
            if txn.pending or c.txns.get(txn.transactional_id) is not txn:
                continue
            if txn.state is ONGOING and now > txn.start_ms + txn.timeout_ms:
                work.append(abort(txn))
            elif txn.state in COMPLETING and txn.state is not PREPARE_EPOCH_FENCE:
                self.retry_later(txn)  # (already there, unless a try of it raised)
            elif txn.state in IDLE and now > txn.update_ms + c.expiration_ms:
                await c.change(txn, replace(txn, state=DEAD, update_ms=now))
        if work:
            await asyncio.gather(*work)
