"""The state a Log owns, declared once for the modules that make up Log.

Log (log.py) assigns every attribute here in its constructor and is the only class that has
them; LogAppends (append.py) and LogReads (reads.py) are parts of Log that read and change
them under ``_lock`` as log.py's docstring describes.
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any

from .segment import LogSegment

if TYPE_CHECKING:
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
    _segments: list[LogSegment]  # by base offset; the last one is active
    _bases: list[int]  # their base offsets
    _active: LogSegment
    _inactive_bytes: int  # the size of every segment but the active one
    _generation: int  # bumped when located data goes away or moves
    _dir_dirty: bool  # directory entries changed since the last flush
    _rolled_index_paths: list[str]  # index files of rolled, unflushed segments
    _max_ts: tuple[int, int] | None  # (largest timestamp, its offset); None: not known
    _closed: bool
    _roll_ms: int
    _max_offset_entries: int
    _max_time_entries: int

    def _locate(self, offset: int) -> tuple[LogSegment, int]:
        """The segment holding ``offset`` and its index slot (lock held)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        seg = self._segments[i]
        seg.ensure_indexes(self._bases[i + 1] if i + 1 < len(self._bases) else None)
        return seg, i

    def _segment_max_ts(self, i: int) -> tuple[int, int]:
        """(largest timestamp, its offset) of segment ``i`` (lock held)."""
        seg = self._segments[i]
        if seg.max_ts is None:
            seg.ensure_indexes(self._bases[i + 1] if i + 1 < len(self._bases) else None)
        return seg.known_max_ts()
