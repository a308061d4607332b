"""A partition's leader-epoch cache and its ``leader-epoch-checkpoint`` file (Kafka's layout).

How this works
--------------
Every leader change bumps the partition's leader epoch; the cache keeps, in order, one
``(epoch, start offset)`` entry per epoch that wrote something: the offset of the first batch
that epoch's leader appended (a leader adds its entry at the log end when it takes over; a
follower adds one when it copies the first batch stamped with a newer ``partitionLeaderEpoch``).
Epochs and start offsets both increase along the list.

``end_offset_for(epoch, log_end)`` answers OffsetForLeaderEpoch: the largest epoch <= the one
asked and the offset where it ended (the next epoch's start, or the log end for the latest).
A follower that starts following a new leader asks it for its own latest epoch and truncates
its log above the answer, cutting what the old leader wrote that the new one does not have.
Truncating the log cuts the cache too (``truncate_from_end``); moving the log start forward
drops entries below it (``truncate_from_start``), keeping the one that covers the new start.

File (``leader-epoch-checkpoint`` in the partition directory), text as Kafka writes it::

    0                <- version
    2                <- number of entries
    0 0              <- epoch start-offset
    3 1200

It is replaced atomically (temporary file, fsync, rename) by ``write``, which the broker calls
in a worker thread; a file that cannot be read is treated as empty (the follower then keeps its
log as it is and the leader answers from its own entries).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ._files import replace_file

FILE_NAME = "leader-epoch-checkpoint"
VERSION = 0
MAX_ENTRIES = 100_000  # a file claiming more is not read (bounded allocation)
UNDEFINED = -1


class LeaderEpochCache:
    """The ``(epoch, start offset)`` entries of one partition, and their file."""

    __slots__ = ("path", "entries", "dirty", "_lock")

    def __init__(self, directory: str | os.PathLike, entries: list[tuple[int, int]] | None = None):
        self.path = Path(directory) / FILE_NAME
        self.entries: list[tuple[int, int]] = list(entries or [])
        self.dirty = False  # changed since the last write
        self._lock = threading.Lock()  # one write at a time

    @classmethod
    def load(cls, directory: str | os.PathLike) -> LeaderEpochCache:
        """(In a worker thread.) The cache of the partition in ``directory``; empty when the
        file is missing or unreadable."""
        cache = cls(directory)
        try:
            lines = cache.path.read_text().split("\n")
        except (OSError, UnicodeDecodeError):
            return cache
        try:
            if int(lines[0]) != VERSION:
                return cache
            count = int(lines[1])
            if not 0 <= count <= MAX_ENTRIES or len(lines) < 2 + count:
                return cache
            entries: list[tuple[int, int]] = []
            for line in lines[2 : 2 + count]:
                fields = line.split()
                entries.append((int(fields[0]), int(fields[1])))
        except (ValueError, IndexError):
            return cache
        kept: list[tuple[int, int]] = []
        for epoch, start in entries:  # keep it monotonic whatever the file says
            if not kept or (epoch > kept[-1][0] and start >= kept[-1][1]):
                kept.append((epoch, start))
        cache.entries = kept
        return cache

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Epoch ``epoch`` starts at ``start_offset``; True when that is new. An epoch not
        above the latest is ignored; entries starting at or after ``start_offset`` under a
        lower epoch are dropped (they wrote nothing that stayed)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self.dirty = True
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, the offset where it ends); (-1, -1) when ``epoch`` is
        below every entry (or the cache is empty)."""
        if not self.entries or epoch < 0:
            return UNDEFINED, UNDEFINED
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        floor = UNDEFINED
        for e, start in self.entries:
            if e > epoch:
                return (floor, start) if floor >= 0 else (UNDEFINED, UNDEFINED)
            floor = e
        return self.entries[-1][0], log_end_offset  # (unreachable)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at ``end_offset``: drop the epochs that started at or after it."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the entries wholly below it go, and the
        one covering it starts there."""
        i = 0
        while i + 1 < len(self.entries) and self.entries[i + 1][1] <= start_offset:
            i += 1
        kept = self.entries[i:]
        if kept and kept[0][1] < start_offset:
            kept[0] = (kept[0][0], start_offset)
        if kept != self.entries:
            self.entries = kept
            self.dirty = True

    def write(self) -> None:
        """(In a worker thread.) Replace the file with the entries (atomically)."""
        with self._lock:
            entries = list(self.entries)
            self.dirty = False
            text = f"{VERSION}\n{len(entries)}\n" + "".join(f"{e} {s}\n" for e, s in entries)
            try:
                replace_file(self.path, text.encode("ascii"))
            except BaseException:
                self.dirty = True
                raise
