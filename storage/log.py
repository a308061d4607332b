"""One partition's log: an ordered list of segments in the partition's directory.

How this works
--------------
Invariants (``segments`` is ``Log._segments``):

  * ``segments`` is sorted by base offset and never empty; the last one is *active* (the only
    one appended to, its indexes kept in memory); ``_bases[i] == segments[i].base_offset``.
  * The segments tile the offsets: segment ``i`` holds offsets in [``segments[i]
    .base_offset``, ``segments[i + 1].base_offset``), so ``segments[i + 1].base_offset`` is
    ``segments[i]``'s next offset (the one after its last batch, unless compaction removed
    the batches at its end); the active segment's base offset <= ``log_end_offset``.
  * ``log_start_offset`` lies in the first segment or equals ``log_end_offset``;
    ``recovery_point`` <= ``log_end_offset`` and everything below it is fsynced.
  * Every published position (a segment's ``size``, index entries) is a batch boundary.
  * ``_inactive_bytes`` is the sum of the sizes of every segment but the active one.
  * ``_generation`` changes whenever data a reader may have located goes away or moves
    (truncation, a compaction swap).

Log is the single owner of that state; its methods are spread over a few modules, each one
part of the class:

    recovery.py     opening: load the segments and the checkpoint, recover after a crash
    append.py       append, roll (LogAppends)
    flush.py        flush and the offsets checkpoint (LogFlush)
    reads.py        read, batch_headers, offset_for_timestamp, max_timestamp, aborted_txns
                    (LogReads)
    retention.py    which leading segments retention and DeleteRecords remove (policy)
    swap.py         the on-disk steps of replace_segments (the compaction swap)
    log_state.py    the state's declaration, and the segment lookups over it
    log.py          the state, opening, truncation, retention and DeleteRecords,
                    replace_segments, close

Threads. One *owner* thread at a time (the broker's event loop, or a worker thread it hands a
truncation to while it changes the log no other way) calls ``append``, ``append_later``,
``roll``, ``truncate_to``, ``restart_at``, ``update_config``, ``close`` and ``delete``; one
*writer* thread makes the writes ``append_later`` returns, in order (append.py). One *flush*
thread at a time may call ``flush`` concurrently with the owner (group commit). One
*maintenance* thread at a time may call ``apply_retention``, ``delete_records_before``,
``inactive_segments`` and ``replace_segments`` (the log cleaner, storage/cleaning/, is a
client of these two): they only remove or replace inactive segments, under the lock, and do
their file work outside it.
Any number of *reader* threads may call ``read``, ``batch_headers``, ``offset_for_timestamp``,
``max_timestamp`` and ``aborted_txns`` concurrently with all of them.

Aborted transactions: each segment keeps the entries whose abort markers it holds
(txn_index.py), so they go with the segment. The broker passes an entry with the marker's
append (``append(..., aborted_txn=)``) and re-adds entries after a restart
(``add_aborted_txn``, which ignores entries already present). A single lock guards the
in-memory state (segment list, sizes, index mirrors, offsets); all file I/O happens outside
it, except for truncation (rare), the swap's renames, and the first search of an old
segment's index (maps the index file, or rebuilds it when unusable).

Descriptors: every file is opened on demand under the OpenFiles budget passed to ``open``
(open_files.py; the broker shares one among all its logs, ``log.max.open.files``), so a log
that is not written or read holds no descriptor. A file is pinned while a thread uses it.

Append writes the batch with one ``pwrite`` to the active segment, then publishes the new
size and log end offset under the lock; readers never look past a published size, so they
never see a partial append. Readers pin the segment's file under the lock and ``pread`` after
releasing it; a segment deleted meanwhile stays readable through that pin. Truncation and
``replace_segments`` bump ``_generation``; a reader that sees it change retries.

Flush snapshots (log end offset, the segments with unflushed bytes, the index files of
segments rolled since the last flush) under the lock, fsyncs outside it, then advances the
recovery point to the snapshot's log end offset. A segment whose descriptor was closed since
it was written was fsynced before the close (``OpenFiles.sync``). The offsets checkpoint is
rewritten at most once a second by flush, and by close unless the file already says the
same (a log opened cleanly and left alone writes nothing).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import NamedTuple

from . import _files, recovery, retention, swap
from ._batch import BadBatch, iter_batches
from .append import LogAppends
from .checkpoint import Checkpoint, OffsetCheckpoints, still_true
from .config import LogConfig
from .errors import OffsetOutOfRange, StorageError
from .flush import LogFlush
from .io import get_backend
from .open_files import CachedFile, OpenFiles
from .reads import LogReads, TryLock
from .segment import LogSegment

_DEFAULT_CONFIG = LogConfig()  # frozen: one instance serves every log opened with defaults


class InactiveSegments(NamedTuple):
    """A snapshot of the log's leading inactive segments (see ``Log.inactive_segments``)."""

    segments: list[tuple[LogSegment, int, CachedFile]]  # (segment, its size, its file)
    ends: list[int]  # each segment's offsets lie below this (the next base offset)
    generation: int  # pass to replace_segments
    log_start_offset: int
    cleaner_offset: int


class Log(LogAppends, LogReads, LogFlush):
    """One partition's log, in its own directory (Kafka's ``topic-partition`` folder)."""

    # Names in the directory at open that are not the log's (the broker's own files). A class
    # default: most logs have none, and a Log keeps few instance attributes (past about 30
    # CPython stops sharing the keys of instance dicts, and each Log's dict grows to ~1 KiB).
    other_files: tuple[str, ...] = ()

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        files: OpenFiles,
        checkpoints: OffsetCheckpoints,
    ) -> None:
        self.directory = directory
        self.config = config
        self._io = get_backend(config.io_backend)
        self._files = files
        self._lock = threading.Lock()
        self._try_lock = TryLock(self._lock)  # the same lock, for no-wait reads
        self._flush_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        # a clean open leaves the active segment's indexes on disk until the first write
        self._appendable = self._active.offset_index.active and self._active.time_index.active
        self._inactive_bytes = sum(s.size for s in segments[:-1])
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self._generation = 0
        self._dir_dirty = False
        self._rolled_index_paths: list[str] = []  # index files of rolled, unflushed segments
        self._max_ts: tuple[int, int] | None = None
        self._reserved = None
        self._on_disk: Checkpoint | None = None  # the checkpoint entry, when known
        self._checkpoints = checkpoints  # the data directory's offsets checkpoint
        self.opened_clean = False  # open read no segment data (a clean close, or a new log)
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
        self.settle()
        self.config = config
        self._set_limits(config)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path,
        config: LogConfig = _DEFAULT_CONFIG,
        *,
        recover: bool,
        files: OpenFiles | None = None,
        checkpoints: OffsetCheckpoints | None = None,
    ) -> Log:
        """Open (or create) the log in directory ``path``.

        ``files``: the descriptor budget the log's files are opened under (the broker passes
        one for all its logs); by default the process-wide ``OpenFiles.shared()``.
        ``checkpoints``: the offsets checkpoint of the data directory holding ``path`` (the
        broker passes one for all its logs); by default ``OffsetCheckpoints.of`` that
        directory.

        A compaction swap interrupted by a crash is finished first (``complete_pending_swap``,
        when the directory listing shows one).
        ``recover=True`` after an unclean stop: checks every segment from the one holding the
        recovery point on, truncates at the first torn or corrupt batch, deletes later segments
        and rebuilds their indexes. ``recover=False`` after a clean close reads no segment data;
        if the checkpoint written by close does not match the files it recovers anyway.
        """
        directory = os.path.normpath(os.path.abspath(os.fspath(path)))
        parent, name = os.path.split(directory)
        try:
            files = files or OpenFiles.shared()
            checkpoints = checkpoints or OffsetCheckpoints.of(parent)
            loaded = recovery.load(
                directory,
                config.index_interval_bytes,
                recover,
                files,
                lambda: checkpoints.get(name),
            )
            log = cls(
                directory,
                config,
                loaded.segments,
                loaded.log_start_offset,
                loaded.log_end_offset,
                loaded.recovery_point,
                files,
                checkpoints,
            )
            log.opened_clean = loaded.clean
            if loaded.other_files:  # rare: an instance attribute only then (see other_files)
                log.other_files = tuple(loaded.other_files)
            if loaded.cleaner_offset is not None:
                log.cleaner_offset = loaded.cleaner_offset
            log._on_disk = on_disk = loaded.checkpoint
            # A new log's entry replaces any left by a removed directory of that name: the
            # broker writes the table before it lists a new partition (topics.json).
            if on_disk is None or (
                not loaded.clean and not still_true(on_disk, log._checkpoint_now(clean=True))
            ):
                log._write_checkpoint(clean=False, durable=False)
            return log
        except OSError as e:
            raise StorageError(f"cannot open log in {directory}: {e}") from e

    @staticmethod
    def complete_pending_swap(directory: str) -> None:
        """Finish a ``replace_segments`` that a crash interrupted after its commit point, or
        drop one that had not reached it (see swap.py). ``open`` calls it first."""
        swap.complete_pending_swap(directory)

    def _maybe_checkpoint(self) -> None:
        cp = self._on_disk
        if cp is not None and (cp.recovery_point, cp.log_start_offset) == (
            self.recovery_point,
            self.log_start_offset,
        ):
            return
        self._write_checkpoint(clean=False, durable=False)

    # -- segments ---------------------------------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._inactive_bytes + self._active.size

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # -- replacing segments (the log cleaner's swap) --------------------------------------------

    def inactive_segments(
        self, *, below: int | None = None, max_timestamp_at_most: int | None = None
    ) -> InactiveSegments | None:
        """The leading inactive segments, up to the first whose offsets reach ``below`` or
        whose largest timestamp is above ``max_timestamp_at_most``; None once closed."""
        with self._lock:
            if self._closed:
                return None
            chosen = []
            for i in range(len(self._segments) - 1):
                seg = self._segments[i]
                if below is not None and self._bases[i + 1] > below:
                    break
                if (
                    max_timestamp_at_most is not None
                    and self._segment_max_ts(i)[0] > max_timestamp_at_most
                ):
                    break
                chosen.append((seg, seg.size, seg.log_file))
            return InactiveSegments(
                chosen,
                self._bases[1 : len(chosen) + 1],
                self._generation,
                self.log_start_offset,
                self.cleaner_offset,
            )

    def replace_segments(
        self, old: list[LogSegment], staged: str, *, generation: int, cleaner_offset: int
    ) -> list[LogSegment] | None:
        """Swap the log's leading segments ``old`` for the segments built in ``staged``
        (``swap.stage(directory)``), which hold the same offsets (maintenance thread).

        Nothing is swapped (the staged files are removed, None is returned) unless the log
        still starts with exactly ``old`` and ``generation`` is still the log's (no
        retention, DeleteRecords or truncation meanwhile). Otherwise the swap is committed
        on disk (swap.py), the segment list updated, ``cleaner_offset`` set and checkpointed;
        returns the new segments. Readers holding an old segment's file keep reading it. A
        crash after the commit point is finished by ``complete_pending_swap`` at the next
        open; an error after it raises StorageError and keeps the old segments in service
        until then.
        """
        directory = self.directory
        try:
            swap.seal(staged, [seg.base_offset for seg in old])
            new_bases = _files.list_segment_bases(staged)
        except OSError as e:
            swap.discard(directory)
            raise StorageError(f"compaction of {directory} failed: {e}") from e
        with self._lock:
            current = self._segments[: len(old)]
            if (
                self._closed
                or self._generation != generation
                or len(current) != len(old)
                or any(a is not b or a.deleted for a, b in zip(current, old))
            ):
                swap.discard(directory)
                return None
            try:
                swap.commit(staged, directory)
                self.complete_pending_swap(directory)
                interval = self.config.index_interval_bytes
                new = [
                    LogSegment.open_existing(directory, base, interval, self._files)
                    for base in new_bases
                ]
            except OSError as e:
                raise StorageError(f"compaction swap in {directory} failed: {e}") from e
            for seg in old:
                seg.deleted = True
            n = len(old)
            self._segments[:n] = new
            self._bases[:n] = new_bases
            self._inactive_bytes = sum(s.size for s in self._segments[:-1])
            self._generation += 1
            self._max_ts = None
            self.cleaner_offset = cleaner_offset
        self._write_checkpoint(clean=False, durable=False)
        return new

    # -- removing data -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or above ``offset``.

        ``offset`` should be a batch boundary; otherwise the batch holding it is dropped too
        and the log end offset becomes that batch's base offset. Below the log start offset
        the log is emptied and restarts at ``offset``.
        """
        self.settle()
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
                with seg.log_file.use() as fd:
                    for b in iter_batches(fd, position, seg.size):
                        if b.last_offset >= offset:
                            cut = b
                            break
                if cut is None:
                    return
                self._generation += 1
                doomed = self._segments[i + 1 :]
                for s in doomed:
                    s.deleted = True
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                if seg is not self._active:
                    self._active.deactivate()
                    seg.activate()
                    self._active = seg
                    self._inactive_bytes = sum(s.size for s in self._segments[:-1])
                self._make_appendable()
                seg.truncate_at(cut.position, cut.base_offset)
                self.log_end_offset = cut.base_offset
                self.recovery_point = min(self.recovery_point, self.log_end_offset)
                self._max_ts = None
                self._dir_dirty = True
            for s in doomed:
                s.delete()
        except (OSError, BadBatch) as e:
            raise StorageError(f"truncation of {self.directory} failed: {e}") from e
        # the checkpoint no longer describes the files (nor may its recovery point lie beyond
        # the new end): an open after a crash must not take them for cleanly closed
        self._write_checkpoint(clean=False)

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it again at ``offset`` (owner thread): a replica that
        copies another's log starts where that one starts."""
        self.settle()
        try:
            self._truncate_fully(offset)
        except OSError as e:
            raise StorageError(f"truncation of {self.directory} failed: {e}") from e

    def _truncate_fully(self, offset: int) -> None:
        with self._lock:
            self._generation += 1
            for s in self._segments:
                s.deleted = True
                s.delete()
            new = LogSegment.create(
                self.directory, offset, self.config.index_interval_bytes, self._files
            )
            self._segments = [new]
            self._bases = [offset]
            self._active = new
            self._appendable = True
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
            doomed = self._drop_leading(retention.segments_below(self._bases, offset))
        self._delete_segments(doomed)
        self._write_checkpoint(clean=False)

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments per retention_ms / retention_bytes (retention.py); returns how
        many. The active segment is never deleted."""
        cfg = self.config
        if not cfg.deletes or (cfg.retention_ms < 0 and cfg.retention_bytes < 0):
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return 0
            n = retention.expired_segments(
                [s.size for s in self._segments],
                lambda i: self._segment_max_ts(i)[0],
                now_ms,
                cfg.retention_ms,
                cfg.retention_bytes,
            )
            doomed = self._drop_leading(n)
            if doomed:
                self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self._delete_segments(doomed)
        if doomed:
            self._write_checkpoint(clean=False, durable=False)
        return len(doomed)

    def _drop_leading(self, n: int) -> list[LogSegment]:
        """Remove the first ``n`` segments (inactive ones) from the list (lock held)."""
        doomed = self._segments[:n]
        if doomed:
            del self._segments[:n]
            del self._bases[:n]
            for seg in doomed:
                self._inactive_bytes -= seg.size
                seg.deleted = True
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

    def close(self, *, removing: bool = False) -> None:
        """Flush, record the final time index entry and write the clean-close checkpoint.

        ``removing``: the log's directory is about to be removed: its checkpoint entry is
        dropped instead (written with the next write of the table)."""
        self.settle()
        if self._closed:
            return
        try:
            seg = self._active
            final = seg.final_time_entry()
            seg.write_out_indexes(final)
            if final is not None:
                with self._lock:
                    seg.time_index.add_entry(final)
        except OSError as e:
            raise StorageError(f"close of {self.directory} failed: {e}") from e
        self.flush()
        with self._flush_lock:  # a concurrent flush must not fsync descriptors being closed
            if self._closed:
                return
            if removing:
                self._checkpoints.forget(os.path.basename(self.directory))
            else:
                self._write_checkpoint(clean=True)
            with self._lock:
                self._closed = True
                for s in self._segments:
                    s.close()
                self._rolled_index_paths = []

    def delete(self) -> None:
        """Close the log and remove its directory."""
        try:
            self.close(removing=True)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory!r}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )
