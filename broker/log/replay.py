"""Reading an internal topic back whole at start-up (``__consumer_offsets``,
``__transaction_state``): the coordinators' state is replayed from it, in a worker thread.
"""

from __future__ import annotations

import os

from headrace.protocol.compression import UnsupportedCompressionError
from headrace.protocol.records import CorruptRecordError, crc_matches, decode_records, iter_batches
from headrace.storage import Log, StorageError


class ReplayError(Exception):
    """An internal topic's partition could not be read back whole at start-up: a read that
    failed, a batch whose CRC does not match or whose records cannot be decoded, or batches
    missing below the log end offset. Its state (groups, transactions) would be partial."""

    def __init__(self, directory: str, offset: int, cause: str) -> None:
        super().__init__(f"{os.path.basename(directory)} at offset {offset}: {cause}")
        self.directory, self.offset, self.cause = directory, offset, cause


def stored_records(plog: Log, *, skip_transactional: bool = False):
    """(key, value) of every record of ``plog`` from its start, read a MiB of batches at a
    time: how internal topics are replayed at start-up (in a worker thread). Every batch's
    CRC is checked; anything that keeps a record from being read raises ``ReplayError``."""
    for _, key, value in stored_records_at(plog, skip_transactional=skip_transactional):
        yield key, value


def stored_records_at(
    plog: Log, *, skip_transactional: bool = False, start: int = 0, end: int | None = None
):
    """(offset, key, value) of every record of ``plog`` from its start (or ``start``, when
    later) up to its end (or ``end``, when sooner), as ``stored_records``."""
    offset = first = max(plog.log_start_offset, start)
    end = plog.log_end_offset if end is None else min(end, plog.log_end_offset)
    while offset < end:
        try:
            data = plog.read(offset, 1 << 20, max_offset=end)
        except StorageError as e:
            raise ReplayError(plog.directory, offset, f"cannot read: {e}") from e
        if not data:
            raise ReplayError(plog.directory, offset, f"no batch below the log end {end}")
        before = offset
        try:
            for pos, size, h in iter_batches(data):
                batch = memoryview(data)[pos : pos + size]
                if not crc_matches(batch):
                    raise ReplayError(
                        plog.directory, h.base_offset, "the batch's CRC-32C does not match"
                    )
                if not (skip_transactional and h.is_transactional):
                    for record_offset, _, key, value, _ in decode_records(batch):
                        if record_offset >= first:  # (a read starts at a batch's start)
                            yield record_offset, key, value
                offset = h.base_offset + h.last_offset_delta + 1
        except (CorruptRecordError, UnsupportedCompressionError) as e:
            raise ReplayError(plog.directory, offset, f"unreadable batch: {e}") from e
        if offset <= before:
            raise ReplayError(plog.directory, offset, "no whole batch where one should start")
