"""Producer state of one partition: idempotent sequences and open transactions.

For each producer id the partition keeps the producer's epoch and its last five appended
batches (first sequence, last sequence, base offset). A batch is checked before it is
appended:

* no producer id (-1): appended as is;
* producer unknown here: any sequence is accepted (the state may have expired);
* older epoch: INVALID_PRODUCER_EPOCH;
* newer epoch: must start again at sequence 0;
* same epoch: a batch equal to one of the last five (same first and last sequence) is a
  retry: nothing is appended and the original base offset is returned; otherwise its first
  sequence must follow the last one (wrapping from 2^31-1 to 0), or be 0 when the epoch has
  no batch here yet (a marker carried it: transactions v2 bump the epoch at every commit),
  else OUT_OF_ORDER_SEQUENCE_NUMBER.

Transactions: ``ongoing`` maps a producer id to the first offset of its open transaction in
this partition (set by its first transactional batch, cleared by the commit or abort
marker). The last stable offset is the smallest of those, or the log end when none is open:
``read_committed`` readers stop there. An abort marker is appended together with an entry
for the log's aborted-transactions index (``marker_entry``: producer id, first offset, marker
offset, LSO after it), which the storage engine keeps beside the segment holding the marker
and deletes with it. A marker also carries the producer's current epoch, so a marker written
after the coordinator bumped the epoch fences the old producer here too.

Transactions v2: a producer's first transactional batch in a partition joins its transaction
at the coordinator before it is appended (apis/produce.py); ``guard`` records the lowest first
sequence waiting to join, and until a batch of the producer is appended here no batch with a
higher one is (OUT_OF_ORDER_SEQUENCE_NUMBER, which the client retries in order), as Kafka's
verification guard does. At most ``max_joining`` guards are kept
(``transaction.partition.verification.max.guards``): past it the oldest is dropped, so
producer ids a client makes up cannot grow them.

Producers idle for ``producer.id.expiration.ms`` (by the broker's clock: no batch, no marker)
and without an open transaction here are forgotten (``expire``, run by the topic table every
``producer.id.expiration.check.interval.ms``), so the table holds only recent producers
however many producer ids clients make up.

Snapshots (``producer-state-<offset>.json`` in the partition directory, the state of every
batch below ``offset``) are written when the log rolls a segment, when it has grown by
``partition.SNAPSHOT_RECORDS`` offsets since the newest one (a follower's cut rebuilds the
state from the newest snapshot below it: without one it would replay the whole log, seconds on
a long one, while the follower fetches nothing) and when it closes, except
that a partition without producer state and without a snapshot writes none at close (most
partitions of a large broker: their clean start then reads nothing); the newest two are
kept. On open the newest snapshot at or below the log end is loaded (newer ones are deleted:
recovery cut the log below them) and the batch headers after it are replayed, reading the
one record of each control batch to learn commit or abort; an abort marker's index entry is
added again if the index lost it (the storage engine ignores entries it has). Entries of an
older broker's single ``transactions.index`` file are moved into the segments' indexes, and
the file is removed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import time
from collections import deque
from pathlib import Path

from headrace.protocol.errors import ErrorCode
from headrace.protocol.records import read_batch_header
from headrace.storage import AbortedTxn, replace_file

from .txn_markers import ABORT, COMMIT, CONTROL_READ_BYTES, LEGACY_INDEX_FILE, control_type

log = logging.getLogger("headrace")

SNAPSHOT = "producer-state.json"  # written by earlier versions; read, then replaced
_SNAPSHOT_NAME = re.compile(r"^producer-state-(\d{20})\.json$")
SNAPSHOTS_KEPT = 2
CACHED_BATCHES = 5
_SEQ_MAX = (1 << 31) - 1


def next_sequence(last: int) -> int:
    return 0 if last == _SEQ_MAX else last + 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    return (base_sequence + last_offset_delta) % (_SEQ_MAX + 1)


def snapshot_name(offset: int) -> str:
    return f"producer-state-{offset:020d}.json"


def drop_snapshots_above(directory: Path, offset: int) -> None:
    """Remove the snapshots of state past ``offset`` (the log was truncated there)."""
    for name in os.listdir(directory):
        m = _SNAPSHOT_NAME.match(name)
        if m and int(m.group(1)) > offset:
            try:
                os.unlink(Path(directory) / name)
            except FileNotFoundError:
                pass


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_timestamp", "coordinator_epoch", "active_at")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int]] = deque(maxlen=CACHED_BATCHES)
        self.last_timestamp = -1
        self.coordinator_epoch = -1
        self.active_at = time.monotonic()  # the broker's clock at its last batch or marker


class ProducerStateManager:
    """``max_joining``: the most join guards kept (``guard``)."""

    def __init__(self, max_joining: int) -> None:
        self.max_joining = max_joining
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # producer id -> (epoch, lowest first sequence) of batches waiting to join a
        # transaction at its coordinator (KIP-890's verification guard, ``guard``)
        self.joining: dict[int, tuple[int, int]] = {}
        self.snapshotted = False  # a snapshot file may exist (found at load, or written)
        # where a rebuild of this state would start replaying: the offset of the newest
        # snapshot (loaded or written), else the log start (Partition writes one more when the
        # log has grown well past it)
        self.snapshot_offset = 0

    def guard(self, producer_id: int, epoch: int, first_seq: int) -> None:
        """A batch of the producer waits to join its transaction (transactions v2): until one
        of its batches is appended here, none with a higher first sequence is (a later
        request must not overtake one whose join failed and will be retried)."""
        known = self.joining.pop(producer_id, None)
        if known is not None and known[0] == epoch:
            first_seq = min(first_seq, known[1])
        elif len(self.joining) >= self.max_joining:
            del self.joining[next(iter(self.joining))]  # the oldest: its guard is lost
        self.joining[producer_id] = (epoch, first_seq)

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> tuple[int, int]:
        """(error code, -1) to append or refuse, or (NONE, base offset) for a retry."""
        joining = self.joining.get(producer_id)
        if joining is not None and joining[0] == epoch and first_seq > joining[1]:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        entry = self.producers.get(producer_id)
        if entry is None:
            return ErrorCode.NONE, -1
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if epoch > entry.epoch:
            if first_seq == 0:
                return ErrorCode.NONE, -1
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        for cached_first, cached_last, base_offset in entry.batches:
            if cached_first == first_seq and cached_last == last_seq:
                return ErrorCode.NONE, base_offset
        expected = next_sequence(entry.batches[-1][1]) if entry.batches else 0
        if first_seq != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def _entry(self, producer_id: int, epoch: int) -> ProducerEntry:
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        return entry

    def record(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        base_offset: int,
        timestamp: int = -1,
        transactional: bool = False,
    ) -> None:
        entry = self._entry(producer_id, epoch)
        entry.active_at = time.monotonic()
        if first_seq >= 0:
            entry.batches.append((first_seq, last_seq, base_offset))
        entry.last_timestamp = timestamp
        if transactional and producer_id not in self.ongoing:
            self.ongoing[producer_id] = base_offset
            self.joining.pop(producer_id, None)

    def check_marker(self, producer_id: int, epoch: int) -> int:
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return ErrorCode.NONE

    def marker_entry(self, producer_id: int, kind: int, marker_offset: int) -> AbortedTxn | None:
        """The aborted-transactions index entry of a marker about to be appended at
        ``marker_offset`` (None for a commit, or when this partition saw no records of the
        transaction)."""
        first = self.ongoing.get(producer_id)
        if kind != ABORT or first is None:
            return None
        stable = min(
            (o for p, o in self.ongoing.items() if p != producer_id), default=marker_offset + 1
        )
        return AbortedTxn(producer_id, first, marker_offset, stable)

    def complete(
        self,
        producer_id: int,
        epoch: int,
        kind: int,
        marker_offset: int,
        coordinator_epoch: int = -1,
    ) -> None:
        """A commit or abort marker was appended at ``marker_offset``: the transaction is
        closed here."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            # the coordinator bumped the epoch: the next batch must start at sequence 0
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.active_at = time.monotonic()
        self.ongoing.pop(producer_id, None)
        self.joining.pop(producer_id, None)

    def expire(self, idle_s: float) -> int:
        """Forget producers that appended nothing for ``idle_s`` seconds (by the broker's
        clock) and have no open transaction here (Kafka's ``producer.id.expiration.ms``); a
        forgotten producer's next batch is accepted at any sequence. Returns how many."""
        cutoff = time.monotonic() - idle_s
        doomed = [
            pid
            for pid, e in self.producers.items()
            if e.active_at < cutoff and pid not in self.ongoing
        ]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def active_producers(self) -> dict[int, tuple[int, int]]:
        """For compaction: producer id -> (base offset of its last batch with a sequence, or
        -1 when none is known in its current epoch; its epoch). Compaction keeps that batch
        (or, with -1, the producer's marker of that epoch), even with no records left."""
        return {
            pid: (e.batches[-1][2] if e.batches else -1, e.epoch)
            for pid, e in self.producers.items()
        }

    def last_stable_offset(self, log_end_offset: int) -> int:
        if not self.ongoing:
            return log_end_offset
        return min(self.ongoing.values())

    def replay(self, header: bytes | memoryview, kind: int = -1, log=None) -> None:
        """Apply one stored batch header (used when rebuilding after a restart); ``kind`` is
        the marker type of a control batch. An abort marker's index entry goes to ``log``."""
        h = read_batch_header(header)
        if h.producer_id < 0:
            return
        if h.is_control:
            if kind in (ABORT, COMMIT):
                aborted = self.marker_entry(h.producer_id, kind, h.base_offset)
                if aborted is not None and log is not None:
                    log.add_aborted_txn(aborted)
                self.complete(h.producer_id, h.producer_epoch, kind, h.base_offset)
            return
        self.record(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            last_sequence(h.base_sequence, h.last_offset_delta),
            h.base_offset,
            h.max_timestamp,
            h.is_transactional,
        )

    def truncate(self, end_offset: int) -> None:
        """Forget batches at or above ``end_offset``."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b[2] < end_offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=CACHED_BATCHES)
        for pid, first in list(self.ongoing.items()):
            if first >= end_offset:
                del self.ongoing[pid]

    # snapshots ------------------------------------------------------------------------------

    def snapshot(self, offset: int) -> dict:
        """The state below ``offset`` as plain data (cheap; taken on the event loop)."""
        return {
            "offset": offset,
            "producers": {
                str(pid): [e.epoch, list(e.batches), e.last_timestamp, e.coordinator_epoch]
                for pid, e in self.producers.items()
            },
            "ongoing": {str(pid): first for pid, first in self.ongoing.items()},
        }

    def write_snapshot(self, directory: Path, offset: int) -> None:
        write_snapshot_data(directory, self.snapshot(offset))

    @property
    def empty(self) -> bool:
        """No producer and no open transaction is known."""
        return not self.producers and not self.ongoing

    @classmethod
    def load(
        cls, directory: Path, log, max_joining: int, *, just_opened: bool = False
    ) -> ProducerStateManager:
        """The newest usable snapshot plus the headers after it.

        ``just_opened``: ``log`` was opened right before, nothing appended since, so the
        names it listed at open (``log.other_files``) are current and no listing is needed;
        and when it opened cleanly (``log.opened_clean``) without any snapshot, it had no
        producer state (close writes no snapshot of an empty state): nothing is read. After
        a crash without a snapshot the headers from the log start are replayed."""
        directory = Path(directory)
        names = log.other_files if just_opened else os.listdir(directory)
        state = cls(max_joining)
        if LEGACY_INDEX_FILE in names:
            _import_legacy_index(directory, log)
        offsets = [int(m.group(1)) for n in names if (m := _SNAPSHOT_NAME.match(n))]
        legacy = SNAPSHOT in names
        state.snapshotted = bool(offsets) or legacy
        state.snapshot_offset = log.log_start_offset
        if just_opened and log.opened_clean and not state.snapshotted:
            return state
        start = log.log_start_offset
        data = _newest_snapshot(directory, log.log_end_offset, offsets, legacy)
        if data is not None:
            start = max(start, data["offset"])
            state.snapshot_offset = start
            for pid, fields in data["producers"].items():
                epoch, batches = fields[0], fields[1]
                entry = state.producers[int(pid)] = ProducerEntry(epoch)
                entry.batches.extend(tuple(b) for b in batches)
                if len(fields) >= 4:
                    entry.last_timestamp, entry.coordinator_epoch = fields[2], fields[3]
            for pid, first in data.get("ongoing", {}).items():
                state.ongoing[int(pid)] = first
        if start < log.log_end_offset:
            for header in log.batch_headers(start):
                kind = -1
                h = read_batch_header(header)
                if h.is_control and h.producer_id >= 0:
                    kind = control_type(log.read(h.base_offset, CONTROL_READ_BYTES))
                state.replay(header, kind, log)
        return state


def _import_legacy_index(directory: Path, log) -> None:
    """Move the entries of a ``transactions.index`` (one file per partition, same 34-byte
    entries) into the segments' indexes, then remove it."""
    path = directory / LEGACY_INDEX_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for pos in range(0, len(data) - 33, 34):
        version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
        if version != 0:
            break
        log.add_aborted_txn(AbortedTxn(pid, first, last, lso))
    log.flush()
    path.unlink()


def write_snapshot_data(directory: Path, data: dict) -> None:
    """Write a snapshot (in a worker thread, or at close) and drop all but the newest few."""
    directory = Path(directory)
    name = snapshot_name(data["offset"])
    replace_file(directory / name, json.dumps(data).encode())
    offsets = sorted(_snapshot_offsets(directory))
    for old in offsets[:-SNAPSHOTS_KEPT]:
        (directory / snapshot_name(old)).unlink(missing_ok=True)
    (directory / SNAPSHOT).unlink(missing_ok=True)


def _snapshot_offsets(directory: Path) -> list[int]:
    found = []
    for path in directory.glob("producer-state-*.json"):
        m = _SNAPSHOT_NAME.match(path.name)
        if m:
            found.append(int(m.group(1)))
    return found


def _newest_snapshot(
    directory: Path, log_end_offset: int, offsets: list[int], legacy: bool
) -> dict | None:
    """The newest readable snapshot at or below the log end, of the snapshots at ``offsets``
    (and the ``legacy`` file); newer ones are deleted (the log was cut below them, so they
    describe batches that are gone)."""
    candidates = []
    for offset in offsets:
        if offset > log_end_offset:
            (directory / snapshot_name(offset)).unlink(missing_ok=True)
        else:
            candidates.append((offset, directory / snapshot_name(offset)))
    if legacy:
        candidates.append((-1, directory / SNAPSHOT))
    for _, path in sorted(candidates, reverse=True):
        try:
            data = json.loads(path.read_text())
            if data["offset"] <= log_end_offset:
                return data
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("unreadable producer state snapshot %s", path)
    return None
