"""Flushing a log and writing its offsets checkpoint (part of Log: see log.py).

How this works
--------------
Flush snapshots (log end offset, the segments with unflushed bytes, the index files of
segments rolled since the last flush, dirty transaction indexes) under the lock, fsyncs
outside it through the OpenFiles budget (``OpenFiles.sync``: a file whose descriptor was
closed since it was written was fsynced before the close), then advances the recovery point
to the snapshot's log end offset, and the log's entry in the data directory's offsets
checkpoint (checkpoint.py), which flush writes when its interval is due, and close at once
(unless the table already says the same).
"""

from __future__ import annotations

import os
import threading

from . import _files
from .checkpoint import Checkpoint, OffsetCheckpoints
from .errors import StorageError
from .log_state import LogState


class LogFlush(LogState):
    """Log's durability side: flush (one flush thread at a time) and the checkpoint."""

    _flush_lock: threading.Lock
    _checkpoint_lock: threading.Lock
    _on_disk: Checkpoint | None  # the log's checkpoint entry, as last set or read
    _checkpoints: OffsetCheckpoints  # the data directory's table

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
                todo = [(s, s.size) for s in self._segments if s.flushed_size < s.size]
                files = [s.log_file for s, _ in todo]
                rolled, self._rolled_index_paths = self._rolled_index_paths, []
                txns = [s.txn_index for s in self._segments if s.txn_index.dirty]
                for txn in txns:
                    txn.dirty = False
                    if txn.writer is not None:
                        files.append(txn.writer)
                    else:
                        rolled.append(txn.path)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                self._files.sync(files, self._io)
                for path in rolled:
                    _files.fsync_path(path, missing_ok=True)
                if dir_dirty:
                    _files.fsync_directory(self.directory)
            except OSError as e:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._rolled_index_paths[:0] = rolled
                    for txn in txns:
                        txn.dirty = True
                raise StorageError(f"flush of {self.directory} failed: {e}") from e
            with self._lock:
                if generation == self._generation:
                    for seg, size in todo:
                        if size > seg.flushed_size:
                            seg.flushed_size = size
                    if leo > self.recovery_point:
                        self.recovery_point = leo
            self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        """Update the checkpoint entry if it changed; written when due (Log)."""
        raise NotImplementedError

    def _checkpoint_now(self, clean: bool) -> Checkpoint:
        """The checkpoint of the current state; ``clean``: with the clean-close fields."""
        with self._lock:
            rp, start = self.recovery_point, self.log_start_offset
            cleaned = self.cleaner_offset if self.cleaner_offset > start else None
            if not clean:
                return Checkpoint(rp, start, cleaner_offset=cleaned)
            active = self._active
            return Checkpoint(
                rp, start, self.log_end_offset, active.base_offset, active.size, cleaned
            )

    def _write_checkpoint(self, clean: bool, durable: bool = True) -> None:
        """Update the log's entry in the data directory's offsets checkpoint, and write the
        table: now (``durable``; grouped with other logs' writes, held inside
        ``OffsetCheckpoints.deferred``), or else when its interval is due."""
        with self._checkpoint_lock:
            cp = self._checkpoint_now(clean)
            table = self._checkpoints
            if cp != self._on_disk:
                table.set(os.path.basename(self.directory), cp)
                self._on_disk = cp
        try:
            if durable:
                table.write()
            else:
                table.write_if_due()
        except OSError as e:
            raise StorageError(f"checkpoint of {self.directory} failed: {e}") from e
