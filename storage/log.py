"""One partition's log: an ordered list of segments in the partition's directory.

How this works
--------------
Invariants:

  * ``segments`` is sorted by base offset and never empty; the last one is *active*.
  * ``segments[i + 1].base_offset`` > every offset stored in ``segments[i]``; the active
    segment's base offset <= ``log_end_offset``.
  * ``log_start_offset`` <= ``log_end_offset``; ``recovery_point`` <= ``log_end_offset``.
  * Every published position (a segment's ``size``, index entries) is a batch boundary.

Threads. One *owner* thread (the broker's event loop) calls ``append``, ``roll``,
``truncate_to``, ``update_config``, ``close`` and ``delete``. One *flush* thread at a time may
call ``flush`` concurrently with the owner (group commit). One *maintenance* thread at a time
may call ``apply_retention``, ``delete_records_before`` and ``replace_segments`` (the
cleaner's swap, see cleaner.py): they only remove or replace inactive segments, under the
lock, and do their file work outside it. Any number of *reader* threads may call ``read``,
``batch_headers``, ``offset_for_timestamp``, ``max_timestamp`` and ``aborted_txns``
concurrently with all of them.

Aborted transactions: each segment keeps the entries whose abort markers it holds
(txn_index.py), so they go with the segment. The broker passes an entry with the marker's
append (``append(..., aborted_txn=)``) and re-adds entries after a restart
(``add_aborted_txn``, which ignores entries already present). A single lock guards the in-memory state (segment list, sizes, index
mirrors, offsets); all file I/O happens outside it, except for truncation (rare) and the
first search of an old segment's index (maps the index file, or rebuilds it when unusable).

Append writes the batch with one ``os.write`` to the active segment, then publishes the new
size and log end offset under the lock; readers never look past a published size, so they
never see a partial append. Readers take a reference to the segment's file (FileRef) under
the lock and ``pread`` after releasing it; a segment deleted meanwhile stays readable through
that reference. Truncation bumps ``_generation``; a reader that sees it change retries.

Flush snapshots (log end offset, the segments with unflushed bytes, the index files of
segments rolled since the last flush) under the lock, fsyncs outside it, then advances the
recovery point to the snapshot's log end offset. The offsets checkpoint is rewritten at most
once a second by flush, and always by close.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from . import _files
from ._batch import BadBatch, iter_batches
from ._fd import FileRef
from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from .cleaner import complete_pending_swap
from .errors import OffsetOutOfRange, StorageError
from .io import BACKENDS, get_backend, undo_write
from .recovery import recover_segment
from .segment import INT32_MAX, LogSegment
from .txn_index import AbortedTxn

_log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 1.0
_NO_BATCH = object()


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # log.roll.ms / segment.ms
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes (max index file size)
    retention_ms: int = -1  # retention.ms; -1: keep forever
    retention_bytes: int = -1  # retention.bytes; -1: no size limit
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms (tombstones)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = (1 << 63) - 1  # max.compaction.lag.ms
    io_backend: str = "os"  # "os" or "io_uring" (see io.py); fixed when the log is opened

    @property
    def deletes(self) -> bool:
        """Whether old segments are removed by retention (policy contains ``delete``)."""
        return "delete" in _policy_words(self.cleanup_policy)

    @property
    def compacts(self) -> bool:
        """Whether the log is compacted (policy contains ``compact``)."""
        return "compact" in _policy_words(self.cleanup_policy)

    def __post_init__(self) -> None:
        if not 61 <= self.segment_bytes <= INT32_MAX:
            raise ValueError("segment_bytes must be in [61, 2**31 - 1]")
        if self.segment_ms <= 0:
            raise ValueError("segment_ms must be positive")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.segment_index_bytes < 24:
            raise ValueError("segment_index_bytes must be >= 24")
        if not _policy_words(self.cleanup_policy) <= {"delete", "compact"}:
            raise ValueError(f"unknown cleanup policy {self.cleanup_policy!r}")
        if self.max_compaction_lag_ms <= 0:
            raise ValueError("max_compaction_lag_ms must be positive")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")
        if self.io_backend not in BACKENDS:
            raise ValueError(f"io_backend must be one of {BACKENDS}")


def _policy_words(policy: str) -> set[str]:
    return {w.strip() for w in policy.split(",") if w.strip()}


class Log:
    """One partition's log, in its own directory (Kafka's ``topic-partition`` folder)."""

    def __init__(self, directory: str, config: LogConfig, segments: list[LogSegment],
                 log_start_offset: int, log_end_offset: int, recovery_point: int) -> None:
        self.directory = directory
        self.config = config
        self._io = get_backend(config.io_backend)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self._inactive_bytes = sum(s.size for s in segments[:-1])
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self._generation = 0
        self._dir_dirty = False
        self._rolled_index_paths: list[str] = []  # index files of rolled, unflushed segments
        self._max_ts: tuple[int, int] | None = None
        self._checkpointed = (recovery_point, log_start_offset)
        self._last_checkpoint = time.monotonic()
        self._closed = False
        self.cleaner_offset = log_start_offset  # offsets below it were compacted at least once
        self._set_limits(config)

    def _set_limits(self, cfg: LogConfig) -> None:
        self._max_offset_entries = cfg.segment_index_bytes // 8
        self._max_time_entries = cfg.segment_index_bytes // 12 - 1  # room for the final entry
        # a compacted log also rolls by max.compaction.lag.ms, so its records become cleanable
        self._roll_ms = cfg.segment_ms
        if cfg.compacts:
            self._roll_ms = min(cfg.segment_ms, cfg.max_compaction_lag_ms)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed settings (AlterConfigs); they take effect from the next append."""
        self.config = config
        self._set_limits(config)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path, config: LogConfig = LogConfig(), *, recover: bool) -> "Log":
        """Open (or create) the log in directory ``path``.

        ``recover=True`` after an unclean stop: checks every segment from the one holding the
        recovery point on, truncates at the first torn or corrupt batch, deletes later segments
        and rebuilds their indexes. ``recover=False`` after a clean close reads no segment data;
        if the checkpoint written by close does not match the files it recovers anyway.
        """
        directory = os.fspath(path)
        try:
            return cls._open(directory, config, recover)
        except OSError as e:
            raise StorageError(f"cannot open log in {directory}: {e}") from e

    @classmethod
    def _open(cls, directory: str, config: LogConfig, recover: bool) -> "Log":
        interval = config.index_interval_bytes
        os.makedirs(directory, exist_ok=True)
        complete_pending_swap(directory)
        _files.remove_temp_files(directory)
        bases = _files.list_segment_bases(directory)
        cp = read_checkpoint(directory)
        if not bases:
            base = cp.log_start_offset if cp else 0
            seg = LogSegment.create(directory, base, interval)
            _files.fsync_directory(directory)
            return cls(directory, config, [seg], base, base, base)

        segs = [LogSegment.open_existing(directory, b, interval) for b in bases]
        active = segs[-1]
        clean = (
            not recover
            and cp is not None
            and cp.end_offset is not None
            and cp.end_segment == active.base_offset
            and cp.end_size == active.size
            and cp.end_offset >= active.base_offset
        )
        if clean:
            leo = cp.end_offset
            recovery_point = min(cp.recovery_point, leo)
            missing = not (active.offset_index.exists() and active.time_index.exists())
            active.activate()
            if missing:
                active.rebuild_indexes()
            elif not active.ensure_indexes(leo):
                active.restore_index_state_from_indexes()
        else:
            if not recover:
                _log.warning("%s: no clean-close checkpoint matches the files; recovering",
                             directory)
            start = cp.recovery_point if cp else bases[0]
            segs, leo = cls._recover(directory, segs, start)
            active = segs[-1]
            active.activate()
            recovery_point = leo
        log_start = bases[0] if cp is None else max(cp.log_start_offset, segs[0].base_offset)
        log_start = min(log_start, leo)
        log = cls(directory, config, segs, log_start, leo, recovery_point)
        if cp is not None and cp.cleaner_offset is not None:
            log.cleaner_offset = max(log_start, min(cp.cleaner_offset, leo))
        if not clean:
            log._write_checkpoint(clean=False)
        return log

    @staticmethod
    def _recover(directory: str, segs: list[LogSegment],
                 recovery_point: int) -> tuple[list[LogSegment], int]:
        bases = [s.base_offset for s in segs]
        first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        next_offset = segs[first].base_offset
        leo = next_offset
        for i in range(first, len(segs)):
            seg = segs[i]
            last, cut = recover_segment(seg, next_offset)
            if last is not None:
                next_offset = last + 1
            leo = next_offset if last is not None else seg.base_offset
            if cut:
                _log.warning("%s: truncated segment %d at byte %d (offset %d)",
                             directory, seg.base_offset, seg.size, leo)
                for doomed in segs[i + 1:]:
                    doomed.delete()
                    doomed.close()
                del segs[i + 1:]
                break
        for seg in segs[first:]:
            os.fsync(seg.log_ref.fd)
            seg.flushed_size = seg.size
        _files.fsync_directory(directory)
        return segs, leo

    # -- appending -----------------------------------------------------------------------------

    def append(self, batch, base_offset: int, last_offset: int, max_timestamp: int,
               aborted_txn: AbortedTxn | None = None) -> None:
        """Append one or more whole batches whose baseOffset fields are already set.

        ``base_offset`` must equal ``log_end_offset``; afterwards ``log_end_offset`` is
        ``last_offset + 1``. Writes into the page cache only (see ``flush``).

        ``aborted_txn``: the batch is an abort marker (its ``last_offset`` lies in the batch);
        the entry goes to the transaction index of the segment that receives the batch,
        written before the batch is published, so a flush that covers the marker covers it.
        """
        if base_offset != self.log_end_offset:
            raise ValueError(
                f"append at offset {base_offset}, log end offset is {self.log_end_offset}"
            )
        if last_offset < base_offset:
            raise ValueError("last_offset < base_offset")
        if self._closed:
            raise StorageError("log is closed")
        n = len(batch) if not isinstance(batch, memoryview) else batch.nbytes
        if aborted_txn is not None and not base_offset <= aborted_txn.last_offset <= last_offset:
            raise ValueError("the aborted transaction's marker is not in the appended batch")
        seg = self._active
        try:
            if seg.size:
                if (seg.size + n > self.config.segment_bytes
                        or seg.time_waited_for_roll(max_timestamp, time.monotonic())
                        > self._roll_ms
                        or seg.offset_index.full(self._max_offset_entries)
                        or seg.time_index.full(self._max_time_entries)
                        or last_offset - seg.base_offset > INT32_MAX):
                    seg = self._roll()
            position = seg.size
            if position + n > INT32_MAX:
                raise ValueError("append larger than a segment can hold")
            self._io.write_all(seg.log_ref.fd, batch, n, position)
        except OSError as e:
            raise StorageError(f"append to {self.directory} failed: {e}") from e
        if aborted_txn is not None:
            try:
                seg.txn_index.append(aborted_txn)
            except OSError as e:
                undo_write(seg.log_ref.fd, position)
                raise StorageError(f"append to {self.directory} failed: {e}") from e
        if (seg.bytes_since_index <= seg.index_interval_bytes
                and max_timestamp <= seg.max_ts):
            seg.bytes_since_index += n  # the common case: no index entry, no new maximum
            oi = ti = None
        else:
            saved = seg.index_state()
            try:
                oi, ti = seg.index_entries_for(position, n, base_offset, last_offset,
                                               max_timestamp)
                if oi is not None:
                    seg.offset_index.write_entry(oi)
                if ti is not None:
                    seg.time_index.write_entry(ti)
            except OSError as e:
                # undo: the batch is not published, the index files go back to their entries
                seg.restore_index_state_to(saved)
                undo_write(seg.log_ref.fd, position)
                raise StorageError(f"append to {self.directory} failed: {e}") from e
        with self._lock:
            seg.size = position + n
            if oi is not None:
                seg.offset_index.add_entry(oi)
            if ti is not None:
                seg.time_index.add_entry(ti)
            self.log_end_offset = last_offset + 1
            if position == 0:
                seg.rolling_ts = max_timestamp
            mt = self._max_ts
            if mt is not None and max_timestamp > mt[0]:
                self._max_ts = (max_timestamp, last_offset)

    def roll(self) -> None:
        """Start a new active segment now, unless the active one is empty (owner thread)."""
        if self._active.size:
            try:
                self._roll()
            except OSError as e:
                raise StorageError(f"roll of {self.directory} failed: {e}") from e

    def active_segment_expired(self, now_ms: int | None = None) -> bool:
        """Whether retention.ms would delete the active segment: it holds data, every batch
        in it is older than retention.ms, and so is every other segment (Kafka then rolls so
        that retention can delete it)."""
        cfg = self.config
        if not cfg.deletes or cfg.retention_ms < 0:
            return False
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            seg = self._active
            return (seg.size > 0 and seg.max_ts is not None and seg.max_ts >= 0
                    and now_ms - seg.max_ts > cfg.retention_ms)

    def _roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (owner thread)."""
        old = self._active
        saved = old.index_state()
        final = old.final_time_entry()
        try:
            if final is not None:
                old.time_index.write_entry(final)
            new = LogSegment.create(self.directory, self.log_end_offset,
                                    self.config.index_interval_bytes)
        except OSError:
            old.restore_index_state_to(saved)
            raise
        with self._lock:
            if final is not None:
                old.time_index.add_entry(final)
            self._rolled_index_paths += (old.offset_index.path, old.time_index.path)
            old.deactivate()
            self._segments.append(new)
            self._bases.append(new.base_offset)
            self._inactive_bytes += old.size
            self._active = new
            self._dir_dirty = True
        return new

    # -- flushing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Fsync everything appended before the call, then advance the recovery point.

        Safe to call from a flush thread while the owner keeps appending.
        """
        with self._flush_lock:
            if self._closed:
                return
            with self._lock:
                leo = self.log_end_offset
                generation = self._generation
                # The active segment's indexes are not fsynced: the new recovery point lies in
                # that segment, and recovery rebuilds the indexes of every segment from the
                # one holding the recovery point on. A rolled segment's indexes are fsynced
                # once, by name, at the first flush after the roll.
                active = self._active
                todo = [(s, s.size, s.log_ref) if s is active else
                        (s, s.size, s.log_ref, s.offset_index.write_ref, s.time_index.write_ref)
                        for s in self._segments if s.flushed_size < s.size]
                rolled, self._rolled_index_paths = self._rolled_index_paths, []
                for s in self._segments:
                    if s.txn_index.dirty:
                        s.txn_index.dirty = False
                        rolled.append(s.txn_index.path)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                self._io.fsync_many(ref.fd for _seg, _size, *refs in todo
                                    for ref in refs if ref is not None)
                for path in rolled:
                    _files.fsync_path(path, missing_ok=True)
                if dir_dirty:
                    _files.fsync_directory(self.directory)
            except OSError as e:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._rolled_index_paths[:0] = rolled
                raise StorageError(f"flush of {self.directory} failed: {e}") from e
            with self._lock:
                if generation == self._generation:
                    for seg, size, *_ in todo:
                        if size > seg.flushed_size:
                            seg.flushed_size = size
                    if leo > self.recovery_point:
                        self.recovery_point = leo
            self._maybe_checkpoint()

    def _maybe_checkpoint(self, force: bool = False) -> None:
        if (self.recovery_point, self.log_start_offset) == self._checkpointed and not force:
            return
        if not force and time.monotonic() - self._last_checkpoint < CHECKPOINT_INTERVAL_S:
            return
        self._write_checkpoint(clean=False)

    def _write_checkpoint(self, clean: bool) -> None:
        with self._checkpoint_lock:
            with self._lock:
                rp, start = self.recovery_point, self.log_start_offset
                active = self._active
                cleaned = self.cleaner_offset if self.cleaner_offset > start else None
                cp = Checkpoint(rp, start, cleaner_offset=cleaned)
                if clean:
                    cp = Checkpoint(rp, start, self.log_end_offset, active.base_offset,
                                    active.size, cleaned)
            try:
                write_checkpoint(self.directory, cp)
            except OSError as e:
                raise StorageError(f"checkpoint of {self.directory} failed: {e}") from e
            self._checkpointed = (rp, start)
            self._last_checkpoint = time.monotonic()

    # -- reading -------------------------------------------------------------------------------

    def _locate(self, offset: int) -> tuple[LogSegment, int]:
        """The segment holding ``offset`` and its index slot (lock held)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        seg = self._segments[i]
        seg.ensure_indexes(self._bases[i + 1] if i + 1 < len(self._bases) else None)
        return seg, i

    def read(self, offset: int, max_bytes: int,
             max_offset: int | None = None) -> bytes:
        """Stored bytes from the batch holding ``offset``: whole batches, one segment at most.

        At most ``max_bytes``, except that the first batch is returned whole even if larger.
        Stops before a batch whose base offset is >= ``max_offset`` and at the end of the
        segment holding ``offset`` (call again from the next offset to continue). Returns
        b"" at the log end offset (or when the first batch starts at or above ``max_offset``).
        """
        while True:
            with self._lock:
                if offset < self.log_start_offset or offset > self.log_end_offset:
                    raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
                if offset == self.log_end_offset:
                    return b""
                hw = self.log_end_offset if max_offset is None \
                    else min(max_offset, self.log_end_offset)
                seg, _ = self._locate(offset)
                _, position = seg.offset_index.lookup(offset)
                limit = seg.size
                ref = seg.log_ref
                generation = self._generation
            try:
                result = self._read_segment(seg, ref, position, limit, offset, max_bytes, hw,
                                            generation)
            except (OSError, BadBatch) as e:
                with self._lock:
                    if generation != self._generation:
                        continue
                raise StorageError(f"read of {self.directory} at {offset} failed: {e}") from e
            if result is None:
                continue  # truncated meanwhile: look again
            if result is _NO_BATCH:
                # no batch holds ``offset`` in its segment (a gap): go on with the next segment
                with self._lock:
                    next_base = self._next_base(seg)
                if next_base is None or next_base >= self.log_end_offset:
                    return b""
                offset = next_base
                continue
            return result

    def _read_segment(self, seg: LogSegment, ref: FileRef, position: int, limit: int,
                      offset: int, max_bytes: int, hw: int, generation: int) -> bytes | None:
        fd = ref.fd
        first = None
        for b in iter_batches(fd, position, limit):
            if b.last_offset >= offset:
                first = b
                break
        if first is None:
            return None if generation != self._generation else _NO_BATCH
        if first.base_offset >= hw:
            return b""
        start = first.position
        end = start + first.size
        target = min(start + max_bytes, limit)
        if end < target:
            with self._lock:
                if generation != self._generation:
                    return None
                # a segment deleted meanwhile may have no index left to map: just scan
                jump = 0 if seg.deleted else seg.offset_index.boundary_at_or_before(target, hw)
            if jump > end:
                end = jump  # an indexed boundary within both limits
            for b in iter_batches(fd, end, limit):
                if b.base_offset >= hw or b.position + b.size > target:
                    break
                end = b.position + b.size
        data = self._io.pread(fd, end - start, start)
        with self._lock:
            if generation != self._generation:
                return None
        if len(data) != end - start:
            raise StorageError(f"short read in segment {seg.base_offset}")
        return data

    def batch_headers(self, from_offset: int) -> Iterator[bytes]:
        """The 61-byte header of each batch from the one holding ``from_offset`` to the end."""
        offset = from_offset
        while True:
            with self._lock:
                if offset < self.log_start_offset or offset > self.log_end_offset:
                    if offset != from_offset:
                        return  # the log was truncated or trimmed below where we got to
                    raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
                _, i = self._locate(offset)
                segments = self._segments[i:]
                generation = self._generation
            for seg in segments:
                with self._lock:
                    if seg.deleted:
                        continue  # removed meanwhile (below the new log start, or truncated)
                    seg.ensure_indexes(self._next_base(seg))
                    _, position = seg.offset_index.lookup(max(offset, seg.base_offset))
                    limit = seg.size
                    ref = seg.log_ref
                try:
                    for info, header in iter_batches(ref.fd, position, limit, headers=True):
                        if info.last_offset >= offset:
                            offset = info.last_offset + 1
                            yield header
                except (OSError, BadBatch) as e:
                    with self._lock:
                        changed = generation != self._generation
                    if changed:
                        break  # truncated or replaced under us: look again from ``offset``
                    raise StorageError(f"scan of segment {seg.base_offset} failed: {e}") from e
            else:
                return

    def _segment_max_ts(self, i: int) -> tuple[int, int]:
        seg = self._segments[i]
        if seg.max_ts is None:
            seg.ensure_indexes(self._bases[i + 1] if i + 1 < len(self._bases) else None)
        return seg.known_max_ts()

    def _next_base(self, seg: LogSegment) -> int | None:
        i = bisect.bisect_right(self._bases, seg.base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, bytes] | None:
        """The first batch whose maxTimestamp >= ``timestamp``: (its base offset, its bytes)."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            with self._lock:
                if seg.size == 0 or seg.deleted:
                    continue
                seg.ensure_indexes(self._next_base(seg))
                if seg.known_max_ts()[0] < timestamp:
                    continue
                start_at = seg.time_index.offset_before(timestamp)
                position = 0 if start_at is None else seg.offset_index.lookup(start_at)[1]
                limit = seg.size
                ref = seg.log_ref
                log_start = self.log_start_offset
            try:
                for b in iter_batches(ref.fd, position, limit):
                    if b.max_timestamp >= timestamp and b.last_offset >= log_start:
                        return b.base_offset, os.pread(ref.fd, b.size, b.position)
            except (OSError, BadBatch) as e:
                raise StorageError(f"time lookup in {self.directory} failed: {e}") from e
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(largest maxTimestamp appended, last offset of that batch); (-1, -1) when empty."""
        with self._lock:
            if self._max_ts is None:
                best = (-1, -1)
                for i in range(len(self._segments)):
                    ts, off = self._segment_max_ts(i)
                    if ts > best[0]:
                        best = (ts, off)
                self._max_ts = best
            return self._max_ts

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._inactive_bytes + self._active.size

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # -- aborted transactions ------------------------------------------------------------------

    def add_aborted_txn(self, entry: AbortedTxn) -> bool:
        """Record an aborted transaction whose marker is already in the log (rebuilding the
        index after a restart; owner thread). False when the entry, or a later one of that
        segment, is there already, so replaying markers twice adds nothing."""
        with self._lock:
            if not self.log_start_offset <= entry.last_offset < self.log_end_offset:
                return False
            seg, _ = self._locate(entry.last_offset)
            if entry.last_offset <= seg.txn_index.last_offset:
                return False
        try:
            seg.txn_index.append(entry)
        except OSError as e:
            raise StorageError(f"transaction index of {self.directory}: {e}") from e
        return True

    def aborted_txns(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with a record in [start, end), for a read_committed read.

        Looks through the indexes of the segment holding ``start`` and the later ones, and
        stops at an entry whose last stable offset is >= ``end``: no transaction aborted after
        it can have started below ``end`` (Kafka's search). Safe from reader threads.
        """
        with self._lock:
            if self._closed:
                return []
            i = max(0, bisect.bisect_right(self._bases, start) - 1)
            indexes = [s.txn_index for s in self._segments[i:]]
        found = []
        try:
            for index in indexes:
                for e in index.entries():
                    if e.last_offset >= start and e.first_offset < end:
                        found.append(e)
                    if e.last_stable_offset >= end:
                        return found
        except OSError as e:
            raise StorageError(f"transaction index of {self.directory}: {e}") from e
        return found

    # -- removing data -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or above ``offset``.

        ``offset`` should be a batch boundary; otherwise the batch holding it is dropped too
        and the log end offset becomes that batch's base offset. Below the log start offset
        the log is emptied and restarts at ``offset``.
        """
        if offset >= self.log_end_offset:
            return
        try:
            if offset < self.log_start_offset:
                self._truncate_fully(offset)
                return
            with self._lock:
                seg, i = self._locate(offset)
                _, position = seg.offset_index.lookup(offset)
                cut = None
                for b in iter_batches(seg.log_ref.fd, position, seg.size):
                    if b.last_offset >= offset:
                        cut = b
                        break
                if cut is None:
                    return
                self._generation += 1
                doomed = self._segments[i + 1:]
                for s in doomed:
                    s.deleted = True
                del self._segments[i + 1:]
                del self._bases[i + 1:]
                if seg is not self._active:
                    self._active.deactivate()
                    seg.activate()
                    self._active = seg
                    self._inactive_bytes = sum(s.size for s in self._segments[:-1])
                seg.truncate_at(cut.position, cut.base_offset)
                self.log_end_offset = cut.base_offset
                self.recovery_point = min(self.recovery_point, self.log_end_offset)
                self._max_ts = None
                self._dir_dirty = True
            for s in doomed:
                s.delete()
        except (OSError, BadBatch) as e:
            raise StorageError(f"truncation of {self.directory} failed: {e}") from e

    def _truncate_fully(self, offset: int) -> None:
        with self._lock:
            self._generation += 1
            for s in self._segments:
                s.deleted = True
                s.delete()
            new = LogSegment.create(self.directory, offset, self.config.index_interval_bytes)
            self._segments = [new]
            self._bases = [offset]
            self._active = new
            self._inactive_bytes = 0
            self.log_start_offset = self.log_end_offset = self.recovery_point = offset
            self._max_ts = None
            self._dir_dirty = True
        self._write_checkpoint(clean=False)

    def delete_records_before(self, offset: int) -> None:
        """Advance the log start offset to ``offset`` and delete the segments wholly below it."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return
        with self._lock:
            if self._closed:
                raise StorageError("log is closed")
            self.log_start_offset = offset
            doomed = self._drop_leading(lambda i: self._bases[i + 1] <= offset)
        self._delete_segments(doomed)
        self._write_checkpoint(clean=False)

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments per retention_ms / retention_bytes; returns how many.

        A segment is expired when its largest timestamp is older than ``retention_ms``; with
        ``retention_bytes`` the oldest segments go while the log is larger than the limit. The
        active segment is never deleted.
        """
        cfg = self.config
        if not cfg.deletes or (cfg.retention_ms < 0 and cfg.retention_bytes < 0):
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return 0
            excess = [self._inactive_bytes + self._active.size - cfg.retention_bytes]

            def expired(i: int) -> bool:
                seg = self._segments[i]
                if cfg.retention_bytes >= 0 and excess[0] >= seg.size and excess[0] > 0:
                    excess[0] -= seg.size
                    return True
                if cfg.retention_ms >= 0:
                    ts = self._segment_max_ts(i)[0]
                    return now_ms - ts > cfg.retention_ms
                return False

            doomed = self._drop_leading(expired)
            if doomed:
                self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self._delete_segments(doomed)
        if doomed:
            self._write_checkpoint(clean=False)
        return len(doomed)

    def _drop_leading(self, predicate) -> list[LogSegment]:
        """Remove leading inactive segments while predicate(index) holds (lock held)."""
        doomed = []
        while len(self._segments) > 1 and predicate(0):
            seg = self._segments.pop(0)
            self._bases.pop(0)
            self._inactive_bytes -= seg.size
            seg.deleted = True
            doomed.append(seg)
        if doomed:
            self._max_ts = None
            self._dir_dirty = True
        return doomed

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        try:
            for s in doomed:
                s.delete()
        except OSError as e:
            raise StorageError(f"segment deletion in {self.directory} failed: {e}") from e

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, record the final time index entry and write the clean-close checkpoint."""
        if self._closed:
            return
        try:
            seg = self._active
            final = seg.final_time_entry()
            if final is not None:
                seg.time_index.write_entry(final)
                with self._lock:
                    seg.time_index.add_entry(final)
        except OSError as e:
            raise StorageError(f"close of {self.directory} failed: {e}") from e
        self.flush()
        with self._flush_lock:  # a concurrent flush must not fsync descriptors being closed
            if self._closed:
                return
            self._write_checkpoint(clean=True)
            with self._lock:
                self._closed = True
                for s in self._segments:
                    s.close()
                self._rolled_index_paths = []

    def delete(self) -> None:
        """Close the log and remove its directory."""
        try:
            self.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.directory!r}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segments)})")

