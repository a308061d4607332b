"""Kafka's transaction rules for compaction: aborted records, markers and delete horizons.

Read in offset order, a pass knows which transactions were aborted (from the log's
``.txnindex`` files, ``Log.aborted_txns``). Every record of an aborted transaction is removed.
An abort marker is kept, with its entry in the new segment's ``.txnindex``, while records of
its transaction were still found in this pass; a commit marker while records of its
transaction were found. A marker with nothing left to guard gets a delete horizon (batch
attribute bit 6, baseTimestamp = now + ``delete_retention_ms``) and is removed by the first
pass after it. The last entry of a producer that is still active (a data batch, or a marker
of its epoch) is always kept, so its sequence number and epoch survive.

A control batch's type is read from its one record (key: int16 version, int16 type, 0 abort,
1 commit).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from headrace.record_format import (
    ATTR_DELETE_HORIZON,
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_HEADER_SIZE,
    INT16,
    INT32,
    INT64,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    set_crc,
)

from .._batch import BatchInfo
from .._records import walk_records
from ..txn_index import AbortedTxn

if TYPE_CHECKING:
    from .rewrite import Rules

CONTROL_KEY = struct.Struct(">hh")  # version, type
ABORT, COMMIT = 0, 1

# producer id -> (base offset of its last data batch or -1, its epoch): see ``clean``
Producers = dict[int, tuple[int, int]]


def control_type(data: bytes) -> int | None:
    """ABORT or COMMIT for a control batch; None when it has no record (already emptied);
    -1 when its record cannot be read."""
    count = INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    if count == 0:
        return None
    try:
        for r in walk_records(memoryview(data)[BATCH_HEADER_SIZE:], count):
            if r.key is None or len(r.key) < CONTROL_KEY.size:
                return -1
            return CONTROL_KEY.unpack_from(r.key)[1]
    except ValueError:
        return -1
    return -1


class Transactions:
    """Which batches belong to aborted transactions, and which markers still guard records
    (Kafka's CleanedTransactionMetadata), while the batches are read in offset order."""

    __slots__ = ("_pending", "_next", "_aborted", "_committed", "kept")

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda a: a.first_offset)
        self._next = 0
        self._aborted: dict[int, list] = {}  # producer id -> [entry, records seen]
        self._committed: set[int] = set()  # producers whose committed records were seen
        self.kept: list[AbortedTxn] = []  # entries for the output's .txnindex

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            a = pending[self._next]
            self._aborted.setdefault(a.producer_id, [a, False])
            self._next += 1

    def on_batch(self, producer_id: int, transactional: bool, last_offset: int) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction."""
        self._reach(last_offset)
        if not transactional:
            return False
        state = self._aborted.get(producer_id)
        if state is not None:
            state[1] = True
            return True
        self._committed.add(producer_id)
        return False

    def on_marker(self, producer_id: int, kind: int | None, last_offset: int) -> bool:
        """A control batch was read; True when no record it decides remains (discardable)."""
        self._reach(last_offset)
        if kind is None:
            return True
        if kind == ABORT:
            state = self._aborted.pop(producer_id, None)
            if state is not None and state[1]:
                self.kept.append(state[0])
                return False
            return True
        if kind == COMMIT:
            if producer_id in self._committed:
                self._committed.discard(producer_id)
                return False
            return True
        return False


def is_last_of_producer(data: bytes, base_offset: int, control: bool, producers: Producers) -> bool:
    pid = INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
    if pid < 0:
        return False
    last = producers.get(pid)
    if last is None:
        return False
    last_base, epoch = last
    if last_base >= 0:
        return not control and base_offset == last_base
    return control and INT16.unpack_from(data, PRODUCER_EPOCH_OFFSET)[0] == epoch


def filter_marker(info: BatchInfo, data: bytes, attributes: int, pid: int, rules: Rules):
    """A control batch: kept while it guards records; then given a delete horizon; removed
    once the horizon has passed (unless it is an active producer's last entry)."""
    kind = control_type(data)
    if not rules.txns.on_marker(pid, kind, info.last_offset):
        return data, 0
    if is_last_of_producer(data, info.base_offset, True, rules.producers):
        return data, 0
    if attributes & ATTR_DELETE_HORIZON:
        if INT64.unpack_from(data, BASE_TIMESTAMP_OFFSET)[0] <= rules.now_ms:
            return None
        return data, 0
    batch = bytearray(data)
    INT16.pack_into(batch, ATTRIBUTES_OFFSET, attributes | ATTR_DELETE_HORIZON)
    INT64.pack_into(batch, BASE_TIMESTAMP_OFFSET, rules.now_ms + rules.delete_retention_ms)
    set_crc(batch)
    return bytes(batch), 0
