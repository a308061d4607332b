"""Log compaction: keep the latest record per key (``cleanup.policy=compact``).

How this works
--------------
One pass, ``clean(log, ...)``, runs in a background thread and does its heavy work without
the log's lock; appends, flushes and reads go on meanwhile.

1. Plan (under the lock, cheap). The *cleanable* segments are the inactive ones from the
   first, stopping before the first segment holding a record younger than
   ``min_compaction_lag_ms``; the active segment is never cleaned. Offsets below
   ``log.cleaner_offset`` were compacted before (*clean*); the rest of the cleanable range is
   *dirty*. Segments reaching past ``below`` (an undecided transaction) are not cleanable
   either. The pass goes ahead when dirty bytes / cleanable bytes >= ``min_cleanable_dirty_ratio``,
   or when the first batch of a dirty segment is older than ``max_compaction_lag_ms``.
2. Offset map (no lock). Read the dirty batches: key -> the greatest offset holding it. Keys
   are kept as 16-byte BLAKE2b digests and the map holds at most ``map_bytes //
   MAP_ENTRY_BYTES`` of them (Kafka's ``log.cleaner.dedupe.buffer.size``); when it is full the
   pass ends at the last batch that fit (at a segment boundary when a whole segment fit), only
   the segments below that point are rewritten, and ``clean`` starts another pass from there.
   Records of aborted transactions never enter the map, nor do control batches.
3. Rewrite (no lock). Consecutive cleanable segments are grouped while their sizes add up to
   at most ``segment_bytes``; each group becomes one new segment in the subdirectory
   ``cleaner.cleaned``, named by the group's first base offset. A record survives when it
   has no key, its key is not in the map, or it is the map's offset for its key; a surviving
   tombstone (null value) is dropped once its timestamp is more than ``delete_retention_ms``
   old. Transactions (Kafka's rules): every record of an aborted transaction is removed; an
   abort marker is kept, with its entry in the new segment's ``.txnindex``, while records of
   its transaction were still found in this pass; a commit marker while records of its
   transaction were found. A marker with nothing left to guard gets a delete horizon (batch
   attribute bit 6, baseTimestamp = now + ``delete_retention_ms``) and is removed by the
   first pass after it. A batch whose records all survive is copied byte for byte; one with
   some survivors is rebuilt (same base offset, lastOffsetDelta, base timestamp, producer
   fields and attributes; the surviving records' bytes copied verbatim, recompressed with
   the batch's own codec, new length, count, max timestamp and CRC); one with none is
   dropped, except the last batch of a producer that is still active (``producers``: its
   header is kept with no records, so its sequence number and epoch survive; for a producer
   whose last entry is a marker, that marker). Indexes are built for the new files and
   everything is fsynced.
4. Swap (under the lock, a few renames). If the log still starts with exactly the planned
   segments (no retention, DeleteRecords or truncation meanwhile), the directory is renamed to
   ``cleaner.swap`` (the commit point), the old segments' files are unlinked, the new ones are
   moved in, and the segment list is updated; otherwise the work is thrown away. Readers that
   hold an old segment's file keep reading it (FileRef), and ``_generation`` is bumped so a
   reader that straddles the swap looks again. ``cleaner_offset`` becomes the end of the
   cleaned range and is checkpointed.

A crash between the commit point and the end of the swap leaves ``cleaner.swap`` behind;
``complete_pending_swap`` finishes it when the log is next opened: it unlinks the segments
listed in ``replaces`` (then renames that file ``replaces.done``, so a second crash does not
unlink the new files that took the same names) and moves the rest in. ``cleaner.cleaned``
(a pass that never committed) is simply removed.

Layering: storage imports nothing from the rest of the project, and batches are opaque bytes
to it. Compaction has to read keys, which may sit in compressed batches (gzip, snappy, lz4,
zstd); rather than carry codecs here, the caller passes ``decompress(codec, data)`` and
``compress(codec, data)`` (the broker hands in the protocol package's). The record walk itself
(boundaries, offset delta, key, null value) is small and lives in _records.py. Without the
codecs, compressed batches are copied unchanged and their keys ignored: data is kept, never
lost. Which transactions were aborted comes from the log's own ``.txnindex`` files; a control
batch's type is read from its one record (key: int16 version, int16 type, 0 abort, 1 commit).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from dataclasses import dataclass
from typing import Callable

import hashlib

import crc32c

from . import _files
from ._batch import HEADER_SIZE, LOG_OVERHEAD, BadBatch, BatchInfo, iter_batches
from ._records import walk_records
from .errors import StorageError
from .segment import INT32_MAX, LogSegment
from .txn_index import AbortedTxn

_log = logging.getLogger(__name__)

Codec = Callable[[int, bytes], bytes]

_ATTR = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
RECORDS_COUNT_OFFSET = 57
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
ABORT, COMMIT = 0, 1

# What one offset map entry costs in memory: a dict slot, a 16-byte digest as bytes and an int.
MAP_ENTRY_BYTES = 128
DEFAULT_MAP_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    cleaned_up_to: int  # the new cleaner offset
    passes: int = 1     # more than one when the offset map filled up


class _Plan:
    __slots__ = ("segments", "ends", "first_dirty", "end_offset", "generation", "aborted")


# producer id -> (base offset of its last data batch or -1, its epoch): see ``clean``
Producers = dict[int, tuple[int, int]]


def clean(log, now_ms: int | None = None, *, decompress: Codec | None = None,
          compress: Codec | None = None, force: bool = False,
          below: int | None = None, producers: Producers | None = None,
          map_bytes: int = DEFAULT_MAP_BYTES) -> CleanResult | None:
    """Compact ``log``; None when there was nothing (enough) to do.

    ``force`` ignores min_cleanable_dirty_ratio and cleans even with nothing dirty (markers
    and tombstones past their horizon go). ``below`` limits the work to segments whose
    offsets all lie below it (the broker passes the last stable offset, so records of an
    undecided transaction are never compacted). ``producers`` names the active producers:
    producer id -> (base offset of its last data batch, or -1 when its last entry is a
    marker; its epoch); that batch (or that producer's marker of that epoch) is kept, empty
    if need be. ``map_bytes`` bounds the offset map; when it fills, several passes are made.
    Call from one thread at a time per log.
    """
    total = None
    while True:
        result = _clean_once(log, now_ms, decompress, compress, force or total is not None,
                             below, producers or {}, map_bytes)
        if result is None:
            return total
        result, more = result
        if total is not None:
            result = CleanResult(total.segments_before + result.segments_before,
                                 total.segments_after + result.segments_after,
                                 total.bytes_before + result.bytes_before,
                                 total.bytes_after + result.bytes_after,
                                 total.records_removed + result.records_removed,
                                 result.cleaned_up_to, total.passes + 1)
        total = result
        if not more:
            return total


def _clean_once(log, now_ms, decompress, compress, force, below, producers, map_bytes):
    cfg = log.config
    if not cfg.compacts:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    plan = _plan(log, now_ms, force, below)
    if plan is None:
        return None
    try:
        offset_map, map_end = _offset_map(plan, decompress, max(1, map_bytes // MAP_ENTRY_BYTES))
        more = map_end < plan.end_offset
        if more:
            _limit(plan, map_end)
        groups = _groups(plan, cfg.segment_bytes)
        cleaned_dir = os.path.join(log.directory, _files.CLEANED_DIR)
        shutil.rmtree(cleaned_dir, ignore_errors=True)
        os.mkdir(cleaned_dir)
        rules = _Rules(offset_map, now_ms, cfg.delete_retention_ms, producers,
                       _Transactions(plan.aborted), decompress, compress)
        removed = 0
        for group in groups:
            removed += _rewrite(cleaned_dir, group, rules, cfg.index_interval_bytes)
        with open(os.path.join(cleaned_dir, _files.SWAP_REPLACES), "w") as f:
            f.write("".join(f"{seg.base_offset}\n" for seg, _, _ in plan.segments))
            f.flush()
            os.fsync(f.fileno())
        _files.fsync_directory(cleaned_dir)
    except (OSError, BadBatch) as e:
        shutil.rmtree(os.path.join(log.directory, _files.CLEANED_DIR), ignore_errors=True)
        raise StorageError(f"compaction of {log.directory} failed: {e}") from e
    result = _swap(log, plan, groups, removed)
    if result is None:
        return None
    log._write_checkpoint(clean=False)
    return result, more


def _plan(log, now_ms: int, force: bool, below: int | None) -> _Plan | None:
    cfg = log.config
    with log._lock:
        if log._closed:
            return None
        segments = log._segments
        cleanable = []
        for i in range(len(segments) - 1):
            seg = segments[i]
            if below is not None and log._bases[i + 1] > below:
                break
            if cfg.min_compaction_lag_ms > 0:
                if log._segment_max_ts(i)[0] > now_ms - cfg.min_compaction_lag_ms:
                    break
            cleanable.append((seg, seg.size, seg.log_ref))
        if not cleanable:
            return None
        ends = log._bases[1:len(cleanable) + 1]  # each segment's offsets end below this
        end_offset = ends[-1]
        first_dirty = min(max(log.cleaner_offset, log.log_start_offset), end_offset)
        if first_dirty >= end_offset and not force:
            return None
        total = sum(size for _, size, _ in cleanable)
        dirty = sum(size for (_, size, _), end in zip(cleanable, ends) if end > first_dirty)
        if total == 0:
            return None
        if not force and dirty / total < cfg.min_cleanable_dirty_ratio:
            if not _overdue(cleanable, ends, first_dirty, now_ms, cfg.max_compaction_lag_ms):
                return None
        plan = _Plan()
        plan.segments = cleanable
        plan.ends = ends
        plan.first_dirty = first_dirty
        plan.end_offset = end_offset
        plan.generation = log._generation
        start = cleanable[0][0].base_offset
    plan.aborted = log.aborted_txns(start, end_offset)
    return plan


def _overdue(cleanable, ends, first_dirty: int, now_ms: int, max_lag_ms: int) -> bool:
    """max.compaction.lag.ms: the earliest first-batch timestamp of the dirty segments is
    older than the limit, so they are compacted whatever the dirty ratio."""
    if max_lag_ms <= 0 or max_lag_ms >= 1 << 62:
        return False
    first = [seg.first_batch_timestamp() for (seg, _, _), end in zip(cleanable, ends)
             if end > first_dirty]
    first = [ts for ts in first if ts > 0]
    return bool(first) and min(first) < now_ms - max_lag_ms


def _limit(plan: _Plan, map_end: int) -> None:
    """Only the segments below ``map_end`` (where the offset map stopped) are rewritten."""
    n = sum(1 for seg, _, _ in plan.segments if seg.base_offset < map_end)
    plan.segments = plan.segments[:n]
    plan.ends = plan.ends[:n]
    plan.end_offset = map_end


def _batches(ref, size: int):
    """(BatchInfo, batch bytes) of a segment file, up to ``size``."""
    for info in iter_batches(ref.fd, 0, size):
        data = os.pread(ref.fd, info.size, info.position)
        if len(data) != info.size:
            raise BadBatch(f"short read at {info.position}")
        yield info, data


def _records(data: bytes, decompress: Codec | None):
    """(records section, walked records) of a data batch, or None to treat it as opaque."""
    attributes = _ATTR.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    if attributes & _CONTROL:
        return None
    count = _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    payload = memoryview(data)[HEADER_SIZE:]
    codec = attributes & _COMPRESSION_MASK
    try:
        if codec:
            if decompress is None:
                return None
            payload = memoryview(decompress(codec, payload))
        return payload, list(walk_records(payload, count))
    except Exception as e:  # codec libraries raise their own types; BadRecords
        _log.warning("compaction keeps an unreadable batch at offset %d as it is: %s",
                     _INT64.unpack_from(data, 0)[0], e)
        return None


def control_type(data: bytes) -> int | None:
    """ABORT or COMMIT for a control batch; None when it has no record (already emptied);
    -1 when its record cannot be read."""
    count = _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    if count == 0:
        return None
    try:
        for r in walk_records(memoryview(data)[HEADER_SIZE:], count):
            if r.key is None or len(r.key) < _CONTROL_KEY.size:
                return -1
            return _CONTROL_KEY.unpack_from(r.key)[1]
    except ValueError:
        return -1
    return -1


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


class _Transactions:
    """Which batches belong to aborted transactions, and which markers still guard records
    (Kafka's CleanedTransactionMetadata), while the batches are read in offset order."""

    __slots__ = ("_pending", "_next", "_aborted", "_committed", "kept")

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda a: a.first_offset)
        self._next = 0
        self._aborted: dict[int, list] = {}  # producer id -> [entry, records seen]
        self._committed: set[int] = set()   # producers whose committed records were seen
        self.kept: list[AbortedTxn] = []     # entries for the output's .txnindex

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


def _offset_map(plan: _Plan, decompress: Codec | None,
                max_entries: int) -> tuple[dict[bytes, int], int]:
    """(key digest -> greatest offset, where the map ends): the dirty batches from the first
    dirty offset, until the map holds ``max_entries`` keys."""
    offsets: dict[bytes, int] = {}
    first_dirty = plan.first_dirty
    txns = _Transactions(plan.aborted)
    end = plan.end_offset
    for (seg, size, ref), seg_end in zip(plan.segments, plan.ends):
        if seg_end <= first_dirty:
            continue
        seg_start_entries = len(offsets)
        for info, data in _batches(ref, size):
            if info.last_offset < first_dirty:
                continue
            attributes = _ATTR.unpack_from(data, ATTRIBUTES_OFFSET)[0]
            pid = _INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
            if attributes & _CONTROL:
                txns.on_marker(pid, control_type(data), info.last_offset)
                continue
            if txns.on_batch(pid, bool(attributes & _TRANSACTIONAL), info.last_offset):
                continue  # aborted: its keys must not hide committed records
            walked = _records(data, decompress)
            if walked is None:
                continue
            keys = [(r.key, r.offset_delta) for r in walked[1] if r.key is not None]
            if len(offsets) + len(keys) > max_entries and offsets:
                # full: stop at this segment's start if an earlier one fit whole, else here
                whole = seg_start_entries > 0 and seg.base_offset > first_dirty
                return offsets, seg.base_offset if whole else info.base_offset
            for key, delta in keys:
                offsets[_digest(key)] = info.base_offset + delta
        if len(offsets) >= max_entries and seg_end < end:
            return offsets, seg_end
    return offsets, end


def _groups(plan: _Plan, segment_bytes: int) -> list[list[tuple]]:
    """Consecutive segments merged into one while the sizes fit in ``segment_bytes``."""
    groups: list[list[tuple]] = []
    total = 0
    for entry, end in zip(plan.segments, plan.ends):
        seg, size, _ref = entry
        if (groups and total + size <= segment_bytes
                and end - 1 - groups[-1][0][0].base_offset <= INT32_MAX):
            groups[-1].append(entry)
            total += size
        else:
            groups.append([entry])
            total = size
    return groups


class _Rules:
    """Everything that decides what survives a pass."""

    __slots__ = ("offsets", "now_ms", "horizon", "delete_retention_ms", "producers", "txns",
                 "decompress", "compress")

    def __init__(self, offsets, now_ms, delete_retention_ms, producers, txns, decompress,
                 compress) -> None:
        self.offsets = offsets
        self.now_ms = now_ms
        self.horizon = now_ms - delete_retention_ms  # tombstones older than this go
        self.delete_retention_ms = delete_retention_ms
        self.producers = producers
        self.txns = txns
        self.decompress = decompress
        self.compress = compress


def _rewrite(cleaned_dir: str, group: list[tuple], rules: _Rules, index_interval: int) -> int:
    """Write one group's surviving batches as a segment in ``cleaned_dir``; records removed."""
    base = group[0][0].base_offset
    out = LogSegment.create(cleaned_dir, base, index_interval)
    fd = out.log_ref.fd
    position = 0
    written: list[BatchInfo] = []
    removed = 0
    rules.txns.kept = []
    for _seg, size, ref in group:
        for info, data in _batches(ref, size):
            new = _filter_batch(info, data, rules)
            if new is None:
                removed += _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
                continue
            batch, dropped = new
            removed += dropped
            view = memoryview(batch)
            while view:
                view = view[os.write(fd, view):]
            max_ts = _INT64.unpack_from(batch, 35)[0]
            written.append(BatchInfo(position, len(batch), info.base_offset, info.last_offset,
                                     max_ts))
            position += len(batch)
    out.size = position
    out.deactivate()
    out.write_indexes(written)
    out.txn_index.write_all(rules.txns.kept)
    os.fsync(fd)
    for path in (out.offset_index.path, out.time_index.path):
        _files.fsync_path(path)
    out.close()
    return removed


def _is_last_of_producer(data: bytes, base_offset: int, control: bool,
                         producers: Producers) -> bool:
    pid = _INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
    if pid < 0:
        return False
    last = producers.get(pid)
    if last is None:
        return False
    last_base, epoch = last
    if last_base >= 0:
        return not control and base_offset == last_base
    return control and _INT16.unpack_from(data, PRODUCER_EPOCH_OFFSET)[0] == epoch


def _filter_batch(info: BatchInfo, data: bytes, rules: _Rules):
    """(batch bytes, records dropped), or None when nothing of the batch is kept."""
    attributes = _ATTR.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    pid = _INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
    if attributes & _CONTROL:
        return _filter_marker(info, data, attributes, pid, rules)
    aborted = rules.txns.on_batch(pid, bool(attributes & _TRANSACTIONAL), info.last_offset)
    walked = None if aborted else _records(data, rules.decompress)
    if walked is None and not aborted:
        return data, 0
    records = [] if aborted else walked[1]
    count = _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    base_ts = _INT64.unpack_from(data, BASE_TIMESTAMP_OFFSET)[0]
    log_append = attributes & _LOG_APPEND_TIME
    batch_max_ts = _INT64.unpack_from(data, 35)[0]
    kept = []
    offsets = rules.offsets
    for r in records:
        if r.key is not None:
            latest = offsets.get(_digest(r.key))
            if latest is not None and info.base_offset + r.offset_delta < latest:
                continue
            if r.tombstone:
                ts = batch_max_ts if log_append else base_ts + r.timestamp_delta
                if ts < rules.horizon:
                    continue
        kept.append(r)
    if not aborted and kept and len(kept) == len(records):
        return data, 0
    if not kept:  # (a batch emptied by an earlier pass too)
        if _is_last_of_producer(data, info.base_offset, False, rules.producers):
            if count == 0:
                return data, 0
            return _with_records(data, b"", 0, None), count  # header kept: its sequence
        return None
    codec = attributes & _COMPRESSION_MASK
    payload = walked[0]
    body = b"".join(bytes(payload[r.start:r.end]) for r in kept)
    if codec:
        if rules.compress is None:
            return data, 0
        body = rules.compress(codec, body)
    max_ts = None if log_append else base_ts + max(r.timestamp_delta for r in kept)
    return _with_records(data, body, len(kept), max_ts), count - len(kept)


def _with_records(data: bytes, body: bytes, count: int, max_ts: int | None) -> bytes:
    """``data``'s header over a new records section: length, count, max timestamp, CRC."""
    batch = bytearray(data[:HEADER_SIZE])
    batch += body
    _INT32.pack_into(batch, 8, len(batch) - LOG_OVERHEAD)
    _INT32.pack_into(batch, RECORDS_COUNT_OFFSET, count)
    if max_ts is not None:
        _INT64.pack_into(batch, 35, max_ts)
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def _filter_marker(info: BatchInfo, data: bytes, attributes: int, pid: int, rules: _Rules):
    """A control batch: kept while it guards records; then given a delete horizon; removed
    once the horizon has passed (unless it is an active producer's last entry)."""
    kind = control_type(data)
    if not rules.txns.on_marker(pid, kind, info.last_offset):
        return data, 0
    if _is_last_of_producer(data, info.base_offset, True, rules.producers):
        return data, 0
    if attributes & _DELETE_HORIZON:
        if _INT64.unpack_from(data, BASE_TIMESTAMP_OFFSET)[0] <= rules.now_ms:
            return None
        return data, 0
    batch = bytearray(data)
    _ATTR.pack_into(batch, ATTRIBUTES_OFFSET, attributes | _DELETE_HORIZON)
    _INT64.pack_into(batch, BASE_TIMESTAMP_OFFSET, rules.now_ms + rules.delete_retention_ms)
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch), 0


def _swap(log, plan: _Plan, groups: list[list[tuple]], removed: int) -> CleanResult | None:
    directory = log.directory
    cleaned_dir = os.path.join(directory, _files.CLEANED_DIR)
    old = [seg for seg, _, _ in plan.segments]
    with log._lock:
        current = log._segments[:len(old)]
        if (log._closed or log._generation != plan.generation
                or len(current) != len(old)
                or any(a is not b or a.deleted for a, b in zip(current, old))):
            shutil.rmtree(cleaned_dir, ignore_errors=True)
            return None
        try:
            os.rename(cleaned_dir, os.path.join(directory, _files.SWAP_DIR))
            _files.fsync_directory(directory)  # committed
            complete_pending_swap(directory)
            interval = log.config.index_interval_bytes
            new = [LogSegment.open_existing(directory, g[0][0].base_offset, interval)
                   for g in groups]
        except OSError as e:
            # the swap directory is complete on disk and is finished at the next open; until
            # then keep serving the old segments through their open descriptors
            raise StorageError(f"compaction swap in {directory} failed: {e}") from e
        for seg in old:
            seg.deleted = True
        n = len(old)
        log._segments[:n] = new
        log._bases[:n] = [s.base_offset for s in new]
        log._inactive_bytes = sum(s.size for s in log._segments[:-1])
        log._generation += 1
        log._max_ts = None
        log.cleaner_offset = plan.end_offset
        before = sum(size for _, size, _ in plan.segments)
        after = sum(s.size for s in new)
    return CleanResult(len(old), len(new), before, after, removed, plan.end_offset)


def complete_pending_swap(directory: str) -> None:
    """Finish a committed swap left by a crash; drop an uncommitted one (see module doc)."""
    shutil.rmtree(os.path.join(directory, _files.CLEANED_DIR), ignore_errors=True)
    swap = os.path.join(directory, _files.SWAP_DIR)
    if not os.path.isdir(swap):
        return
    replaces = os.path.join(swap, _files.SWAP_REPLACES)
    done = os.path.join(swap, _files.SWAP_UNLINKED)
    if os.path.exists(replaces):
        with open(replaces) as f:
            bases = [int(line) for line in f.read().split()]
        for base in bases:
            for name in _files.segment_file_names(base):
                try:
                    os.unlink(os.path.join(directory, name))
                except FileNotFoundError:
                    pass
        _files.fsync_directory(directory)
        os.rename(replaces, done)
        _files.fsync_directory(swap)
    for name in sorted(os.listdir(swap)):
        if name != _files.SWAP_UNLINKED:
            os.rename(os.path.join(swap, name), os.path.join(directory, name))
    _files.fsync_directory(directory)
    try:
        os.unlink(done)
    except FileNotFoundError:
        pass
    os.rmdir(swap)
    _files.fsync_directory(directory)
