"""The state a Log owns, declared once for the modules that make up Log.

Log (log.py) assigns every attribute here in its constructor and is the only class that has
them; LogAppends (append.py) and LogReads (reads.py) are parts of Log that read and change
them under ``_lock`` as log.py's docstring describes.
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any

from .errors import WouldBlock
from .segment import LogSegment

if TYPE_CHECKING:
    from .append import Reservations
    from .config import LogConfig
    from .open_files import OpenFiles


class LogState:
    directory: str
    config: LogConfig
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    cleaner_offset: int  # offsets below it were compacted at least once
    _io: Any  # the I/O backend (io.py)
    _files: OpenFiles  # the descriptor budget the log's files are opened under
    _lock: threading.Lock  # guards everything below
    _try_lock: Any  # reads.TryLock: the same lock, taken only if free (no-wait reads)
    _segments: list[LogSegment]  # by base offset; the last one is active
    _bases: list[int]  # their base offsets
    _active: LogSegment
    _appendable: bool  # the active segment's indexes are loaded (see Log._make_appendable)
    _inactive_bytes: int  # the size of every segment but the active one
    _generation: int  # bumped when located data goes away or moves
    _dir_dirty: bool  # directory entries changed since the last flush
    _rolled_index_paths: list[str]  # index files of rolled, unflushed segments
    _max_ts: tuple[int, int] | None  # (largest timestamp, its offset); None: not known
    _closed: bool
    _reserved: Reservations | None  # append_later's, once it was first called (append.py)
    _roll_ms: int
    _max_offset_entries: int
    _max_time_entries: int

    def _make_appendable(self) -> None:
        """Load the active segment's indexes for appending, if a clean open left them on disk
        (lock held; the owner thread, at its first append or truncation). Reads two small
        files under the lock, as the first search of an old segment's index does."""
        if not self._appendable:
            self._active.activate_for_appends(self.log_end_offset)
            self._appendable = True

    def _limit_of(self, i: int) -> int:
        """The offset segment ``i``'s offsets lie below (lock held)."""
        return self._bases[i + 1] if i + 1 < len(self._bases) else self.log_end_offset

    def _locate(self, offset: int, nowait: bool = False) -> tuple[LogSegment, int]:
        """The segment holding ``offset`` and its index slot (lock held). ``nowait``: raise
        WouldBlock when its indexes are yet to be loaded and checked."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        seg = self._segments[i]
        if nowait and not seg.indexes_checked:
            raise WouldBlock
        seg.ensure_indexes(self._limit_of(i))
        return seg, i

    def _segment_max_ts(self, i: int) -> tuple[int, int]:
        """(largest timestamp, its offset) of segment ``i`` (lock held)."""
        seg = self._segments[i]
        if seg.max_ts is None:
            seg.ensure_indexes(self._limit_of(i))
        return seg.known_max_ts()
