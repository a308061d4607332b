"""The aborted-transactions index of one segment (Kafka's ``.txnindex``).

Byte layout: fixed-size entries of 34 bytes, big-endian, in the order of their abort markers::

    offset  size  field
         0     2  version              = 0
         2     8  producerId
        10     8  firstOffset          the aborted transaction's first offset in this partition
        18     8  lastOffset           the offset of its abort marker
        26     8  lastStableOffset     the partition's LSO once the marker was written

An entry lives in the index of the segment holding its abort marker, so it is deleted with
that segment (retention, DeleteRecords, truncation, compaction). The file exists only once a
segment has an entry. A torn trailing entry (a crash mid-write) is ignored when the file is
read and cut off before the next write.

Invariant: ``lastOffset`` increases strictly through the file, and every lastOffset lies in
the segment's offset range.

Threads: appends come from the log's owner thread (or the cleaner, on a file nobody else
sees yet); readers may call ``entries`` concurrently and get an immutable tuple. The write
descriptor is a CachedFile of the log's OpenFiles budget, opened when an entry is written.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from ._files import fsync_path
from .errors import WouldBlock
from .open_files import CachedFile, OpenFiles

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker
    last_stable_offset: int  # the partition's LSO after the marker

    def pack(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


class TransactionIndex:
    __slots__ = ("path", "files", "_entries", "_writer", "_file_entries", "dirty")

    def __init__(self, path: str, files: OpenFiles) -> None:
        self.path = path
        self.files = files
        self._entries: tuple[AbortedTxn, ...] | None = None  # None: not read yet
        self._writer: CachedFile | None = None
        self._file_entries = 0  # whole entries in the file (valid once _writer is set)
        self.dirty = False  # written since the last fsync

    @classmethod
    def empty(cls, path: str, files: OpenFiles) -> TransactionIndex:
        """The index of a new segment: no file yet (an old file of that name is removed)."""
        index = cls(path, files)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        index._entries = ()
        return index

    def entries(self, nowait: bool = False) -> tuple[AbortedTxn, ...]:
        """The entries, read from the file the first time (``nowait``: WouldBlock then)."""
        if self._entries is None:
            if nowait:
                raise WouldBlock
            self._entries = _read(self.path)
        return self._entries

    @property
    def last_offset(self) -> int:
        entries = self.entries()
        return entries[-1].last_offset if entries else -1

    def append(self, entry: AbortedTxn) -> None:
        """Write one entry (page cache); raises OSError with the file left as it was."""
        entries = self.entries()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError("aborted transactions must be added in marker order")
        writer = self._writer
        if writer is None:
            writer = self.files.file(self.path, os.O_WRONLY | os.O_CREAT)
            with writer.use(wrote=True) as fd:
                if os.fstat(fd).st_size != len(entries) * ENTRY_SIZE:
                    os.ftruncate(fd, len(entries) * ENTRY_SIZE)  # a torn or unreadable tail
            self._writer = writer
            self._file_entries = len(entries)
        position = self._file_entries * ENTRY_SIZE
        data = entry.pack()
        with writer.use(wrote=True) as fd:
            try:
                if os.pwrite(fd, data, position) != len(data):
                    raise OSError("short write to the transaction index")
            except OSError:
                try:
                    os.ftruncate(fd, position)
                except OSError:
                    pass
                raise
        self._file_entries += 1
        self._entries = entries + (entry,)
        self.dirty = True

    def truncate_from(self, offset: int) -> bool:
        """Drop the entries whose marker is at or above ``offset``; whether any were."""
        entries = self.entries()
        keep = sum(1 for e in entries if e.last_offset < offset)
        if keep == len(entries):
            return False
        self._entries = entries[:keep]
        if self._writer is not None:
            with self._writer.use(wrote=True) as fd:
                os.ftruncate(fd, keep * ENTRY_SIZE)
            self._file_entries = keep
        elif os.path.exists(self.path):
            os.truncate(self.path, keep * ENTRY_SIZE)
        self.dirty = True
        return True

    def write_all(self, entries) -> None:
        """Write a fresh file holding ``entries`` (a cleaned segment's index); fsynced."""
        self._entries = tuple(entries)
        if not self._entries:
            return
        with open(self.path, "wb") as f:
            f.write(b"".join(e.pack() for e in self._entries))
            f.flush()
            os.fsync(f.fileno())

    def fsync(self) -> None:
        """Make the entries durable (with the file's descriptor when it has one)."""
        if self._writer is not None:
            self.files.sync([self._writer])
        elif self.dirty:
            fsync_path(self.path, missing_ok=True)
        self.dirty = False

    @property
    def writer(self) -> CachedFile | None:
        return self._writer

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.retire()

    def delete(self) -> None:
        """Remove the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def aborted_between(
    segments: Iterable[Iterable[AbortedTxn]], start: int, end: int
) -> list[AbortedTxn]:
    """The aborted transactions with a record in [start, end), from the index entries of the
    segment holding ``start`` and the later ones, in order. Stops at an entry whose last
    stable offset is >= ``end``: no transaction aborted after it can have started below
    ``end`` (Kafka's search)."""
    found = []
    for entries in segments:
        for e in entries:
            if e.last_offset >= start and e.first_offset < end:
                found.append(e)
            if e.last_stable_offset >= end:
                return found
    return found


def _read(path: str) -> tuple[AbortedTxn, ...]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ()
    out = []
    last = None
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last_offset, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION or (last is not None and last_offset <= last):
            break  # not an entry we wrote: keep what precedes it
        out.append(AbortedTxn(pid, first, last_offset, lso))
        last = last_offset
    return tuple(out)
