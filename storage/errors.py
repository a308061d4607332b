"""Exceptions raised by the storage package."""

from __future__ import annotations


class StorageError(Exception):
    """A file operation failed or the files on disk are unusable (Kafka's KAFKA_STORAGE_ERROR)."""


class OffsetOutOfRange(Exception):
    """The requested offset is below the log start offset or above the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class WouldBlock(Exception):
    """A no-wait read (``nowait=True``) stopped where it would have waited: for the disk (data
    not in the page cache), for a lock another thread holds, or to open or map a file. Nothing
    was changed; the same read without ``nowait``, in a thread that may wait, does the rest."""
