"""One segment of a partition's log: a ``.log`` file of record batches plus its indexes
(offset, time, and the aborted transactions whose markers it holds).

How this works
--------------
A segment holds the batches whose offsets start at ``base_offset`` (its name) and end below
the next segment's base offset. Batches are stored exactly as appended, back to back, so every
file position the segment publishes (``size``, index entries) is a batch boundary.

Only the newest segment is *active*: the log appends to it with one ``os.write`` per append
and its indexes are mirrored in memory. Older segments are immutable until truncated or
deleted; their indexes are memory-mapped and sanity-checked the first time they are searched,
and rebuilt from the batches when missing or inconsistent.

Index policy (Kafka's): an offset index entry is added for an append that starts more than
``index_interval_bytes`` after the previous entry; a time index entry is added at the same
moment when the segment's largest timestamp grew since the last time index entry. When the
segment stops being active (roll, close) a final time index entry records its largest
timestamp, so ``max_timestamp`` of an inactive segment is the last time index entry.

Descriptors: the ``.log`` file is a CachedFile of the log's OpenFiles budget
(open_files.py), opened on demand; an inactive segment is known by its name and size alone.
``open_existing`` stats the file and opens nothing.

Threads: the Log's lock guards every attribute here. File writes happen on the log's owner
thread; readers pin ``log_file`` under the lock and ``pread`` after releasing the lock (the
pin keeps the descriptor open, even if the segment is deleted meanwhile).
"""

from __future__ import annotations

import os
import time

from headrace.record_format import BATCH_HEADER_SIZE, INT64, MAX_TIMESTAMP_OFFSET

from . import _files
from ._batch import BadBatch, iter_batches
from .index import OffsetIndex, TimeIndex
from .open_files import OpenFiles, OpenFilesExhausted
from .txn_index import TransactionIndex

INT32_MAX = (1 << 31) - 1


class LogSegment:
    __slots__ = (
        "directory",
        "base_offset",
        "files",
        "log_file",
        "size",
        "flushed_size",
        "offset_index",
        "time_index",
        "txn_index",
        "index_interval_bytes",
        "bytes_since_index",
        "max_ts",
        "max_ts_offset",
        "last_time_entry_ts",
        "created",
        "rolling_ts",
        "indexes_checked",
        "deleted",
    )

    def __init__(
        self,
        directory: str,
        base_offset: int,
        files: OpenFiles,
        size: int,
        index_interval_bytes: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.files = files
        stem = os.path.join(directory, _files.segment_stem(base_offset))  # paths: stem + suffix
        self.log_file = files.file(stem + _files.LOG_SUFFIX, os.O_RDWR)
        self.size = size  # published bytes: readers never look past this
        self.flushed_size = 0  # bytes known fsynced
        self.offset_index = OffsetIndex(stem + _files.INDEX_SUFFIX, base_offset, files)
        self.time_index = TimeIndex(stem + _files.TIME_INDEX_SUFFIX, base_offset, files)
        self.txn_index = TransactionIndex(stem + _files.TXN_INDEX_SUFFIX, files)
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_index = 0
        self.max_ts: int | None = None  # None: not known yet (inactive, index not loaded)
        self.max_ts_offset = -1
        self.last_time_entry_ts: int | None = None
        self.created = time.monotonic()  # segment_ms clock when no batch has a timestamp
        self.rolling_ts: int | None = None  # first batch's maxTimestamp; None: not read yet
        self.indexes_checked = False
        self.deleted = False  # removed from the log (set under the log's lock)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: str, base_offset: int, index_interval_bytes: int, files: OpenFiles
    ) -> LogSegment:
        """A new, empty, active segment (existing files of that name are truncated)."""
        path = _files.log_path(directory, base_offset)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        seg = cls(directory, base_offset, files, 0, index_interval_bytes)
        seg.offset_index = OffsetIndex.create(seg.offset_index.path, base_offset, files)
        seg.time_index = TimeIndex.create(seg.time_index.path, base_offset, files)
        seg.txn_index = TransactionIndex.empty(seg.txn_index.path, files)
        seg.max_ts = -1
        seg.last_time_entry_ts = -1
        seg.indexes_checked = True
        return seg

    @classmethod
    def open_existing(
        cls, directory: str, base_offset: int, index_interval_bytes: int, files: OpenFiles
    ) -> LogSegment:
        """An inactive segment over existing files; nothing is opened or read."""
        seg = cls(directory, base_offset, files, 0, index_interval_bytes)
        seg.size = size = os.stat(seg.log_file.path).st_size
        seg.flushed_size = size
        return seg

    # -- rolling -------------------------------------------------------------------------------

    def first_batch_timestamp(self) -> int:
        """The maxTimestamp of the segment's first batch; -1 when empty or without one."""
        if self.rolling_ts is None:
            with self.log_file.use() as fd:
                self.rolling_ts = read_first_batch_timestamp(fd, self.size)
        return self.rolling_ts

    def time_waited_for_roll(self, max_timestamp: int, now: float) -> float:
        """How long this segment has been filling, in ms, as Kafka measures it for segment.ms.

        With a timestamp on the segment's first batch (its maxTimestamp) and on the batch being
        appended, the difference of the two; otherwise the time since the segment was created
        (or opened) by the monotonic clock ``now``.
        """
        first = self.first_batch_timestamp()
        if first >= 0 and max_timestamp >= 0:
            return max_timestamp - first
        return (now - self.created) * 1000.0

    # -- indexes -------------------------------------------------------------------------------

    def ensure_indexes(self, next_base: int | None) -> bool:
        """Load and check the indexes once; rebuild them from the batches if they are unusable.

        Returns True when they were rebuilt (the running index counters are then exact).
        """
        if self.indexes_checked:
            return False
        try:
            ok = self.offset_index.check(self.size, next_base) and self.time_index.check(next_base)
        except OpenFilesExhausted:
            raise  # no descriptor to look with: says nothing about the index
        except (OSError, ValueError):
            ok = False
        if not ok:
            self.rebuild_indexes()
            return True
        self.indexes_checked = True
        last = self.time_index.last_entry()
        if self.max_ts is None:
            if last is None:
                self.max_ts, self.max_ts_offset = -1, -1
            else:
                self.max_ts, self.max_ts_offset = last[0], self.base_offset + last[1]
        self.last_time_entry_ts = last[0] if last else -1
        return False

    def time_index_len(self) -> int:
        return len(self.time_index)

    def known_max_ts(self) -> tuple[int, int]:
        """(largest maxTimestamp, last offset of its batch); (-1, -1) when none."""
        if self.max_ts is None:
            last = self.time_index.last_entry()
            if last is None:
                return -1, -1
            return last[0], self.base_offset + last[1]
        return self.max_ts, self.max_ts_offset

    def restore_index_state_from_indexes(self) -> None:
        """Running index counters of a cleanly closed active segment, without reading data."""
        last = self.offset_index.last_entry()
        self.bytes_since_index = self.size - (last[1] if last else 0)
        self._max_ts_from_time_index()

    def _max_ts_from_time_index(self) -> None:
        """The largest timestamp, as the time index's last entry records it."""
        t_last = self.time_index.last_entry()
        if t_last is None:
            self.max_ts, self.max_ts_offset, self.last_time_entry_ts = -1, -1, -1
        else:
            self.max_ts = self.last_time_entry_ts = t_last[0]
            self.max_ts_offset = self.base_offset + t_last[1]

    def index_entries_for(
        self, position: int, size: int, base: int, last: int, max_ts: int
    ) -> tuple[bytes | None, bytes | None]:
        """Apply the index policy to one append at ``position``; returns the entries to add.

        Updates the running counters; the caller writes the entries and adds them to memory.
        """
        # the counters are known for the active segment and once write_indexes reset them
        assert self.max_ts is not None and self.last_time_entry_ts is not None
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.max_ts_offset = last
        oi = ti = None
        if self.bytes_since_index > self.index_interval_bytes:
            # keyed by the batch's last offset, as Kafka's LogSegment does (its kafka-dump-log
            # checks that); older files keyed by the base offset read the same (index.py)
            oi = self.offset_index.pack(last - self.base_offset, position)
            if self.max_ts > self.last_time_entry_ts:
                ti = self.time_index.pack(self.max_ts, self.max_ts_offset - self.base_offset)
                self.last_time_entry_ts = self.max_ts
            self.bytes_since_index = 0
        self.bytes_since_index += size
        return oi, ti

    def index_state(self) -> tuple:
        """The running index counters, to undo a failed append (see restore_index_state_to)."""
        return (self.bytes_since_index, self.max_ts, self.max_ts_offset, self.last_time_entry_ts)

    def restore_index_state_to(self, saved: tuple) -> None:
        """Undo a failed append or roll: counters back, index files back to their entries."""
        (self.bytes_since_index, self.max_ts, self.max_ts_offset, self.last_time_entry_ts) = saved
        for index in (self.offset_index, self.time_index):
            try:
                index.resync_file()
            except OSError:
                pass

    def final_time_entry(self) -> bytes | None:
        """The time index entry that records the segment's largest timestamp, if missing."""
        last = -1 if self.last_time_entry_ts is None else self.last_time_entry_ts
        if self.max_ts is not None and self.max_ts >= 0 and self.max_ts > last:
            self.last_time_entry_ts = self.max_ts
            return self.time_index.pack(self.max_ts, self.max_ts_offset - self.base_offset)
        return None

    def write_out_indexes(self, final: bytes | None) -> None:
        """Write the index entries the files lack, and ``final`` (``final_time_entry``, added
        afterwards) after them: before the segment stops being active (roll, close)."""
        if self.offset_index.active:
            self.offset_index.write_out()
            self.time_index.write_out(final or b"")

    def rebuild_indexes(self) -> None:
        """Rebuild both index files from the batches (trusting sizes; no CRC checks)."""
        with self.log_file.use() as fd:
            self.write_indexes(_iter_until_bad(fd, self.size))

    def write_indexes(self, batches) -> bool:
        """Rebuild both index files from ``batches``; whether a file changed."""
        self.bytes_since_index = 0
        self.max_ts, self.max_ts_offset = -1, -1
        self.last_time_entry_ts = -1
        oi_parts, ti_parts = [], []
        for b in batches:
            oi, ti = self.index_entries_for(
                b.position, b.size, b.base_offset, b.last_offset, b.max_timestamp
            )
            if oi:
                oi_parts.append(oi)
            if ti:
                ti_parts.append(ti)
        if not self.offset_index.active:
            final = self.final_time_entry()
            if final:
                ti_parts.append(final)
        rewrote = self.offset_index.replace(b"".join(oi_parts))
        rewrote = self.time_index.replace(b"".join(ti_parts)) or rewrote
        self.indexes_checked = True
        return rewrote

    def restore_index_state(self) -> None:
        """Recompute the running index counters of a segment that becomes active again.

        Reads the batches after the last offset index entry (at most about one index interval).
        """
        last = self.offset_index.last_entry()
        start = last[1] if last else 0
        self._max_ts_from_time_index()
        self.bytes_since_index = 0
        with self.log_file.use() as fd:
            for b in iter_batches(fd, start, self.size):
                if b.max_timestamp > self.max_ts:
                    self.max_ts, self.max_ts_offset = b.max_timestamp, b.last_offset
                self.bytes_since_index += b.size

    # -- state changes -----------------------------------------------------------------------

    def activate(self) -> bool:
        """Load the indexes for appending; whether both files were there."""
        found = self.offset_index.activate()
        return self.time_index.activate() and found

    def activate_for_appends(self, end_offset: int) -> None:
        """Load the indexes of the active segment of a cleanly opened log for appending:
        checked against the log end offset ``end_offset`` (rebuilt when unusable or missing),
        and the running index counters restored from them."""
        missing = not self.activate()
        if missing:
            self.rebuild_indexes()
        elif not self.ensure_indexes(end_offset):
            self.restore_index_state_from_indexes()

    def deactivate(self) -> None:
        self.offset_index.deactivate()
        self.time_index.deactivate()

    def truncate_at(self, position: int, offset: int) -> None:
        """Drop every byte from ``position`` (a batch boundary holding ``offset``) on.

        The segment must be active (its indexes in memory).
        """
        with self.log_file.use(wrote=True) as fd:
            os.ftruncate(fd, position)
        self.size = position
        self.rolling_ts = None
        if position == 0:
            self.created = time.monotonic()
        self.flushed_size = min(self.flushed_size, position)
        self.offset_index.truncate_entries(self.offset_index.entries_before_position(position))
        keep = 0
        for i in range(len(self.time_index)):
            if self.base_offset + self.time_index.entry(i)[1] < offset:
                keep = i + 1
        self.time_index.truncate_entries(keep)
        self.txn_index.truncate_from(offset)
        self.restore_index_state()

    def delete(self) -> None:
        """Remove the files. A reader that pinned one before finishes its read."""
        try:
            os.unlink(self.log_file.path)
        except FileNotFoundError:
            pass
        self.log_file.retire()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def close(self) -> None:
        """Close the descriptors (now, or when their last user is done); no more use."""
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.log_file.retire()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


def read_first_batch_timestamp(fd: int, size: int) -> int:
    """The maxTimestamp of the first batch of a segment file of ``size`` bytes; -1 if none."""
    if size >= BATCH_HEADER_SIZE:
        header = os.pread(fd, BATCH_HEADER_SIZE, 0)
        if len(header) == BATCH_HEADER_SIZE:
            return INT64.unpack_from(header, MAX_TIMESTAMP_OFFSET)[0]
    return -1


def _iter_until_bad(fd: int, end: int):
    try:
        yield from iter_batches(fd, 0, end)
    except BadBatch:
        return
