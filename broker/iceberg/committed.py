"""The records of a partition that a ``read_committed`` consumer gets, read back from its log
into columns (plain lists, one per field), in a worker thread.

What is read: ``[start, end)`` where ``end`` is the partition's last stable offset (so below the
high watermark and below every undecided transaction). Control batches are skipped, and so are
the batches of aborted transactions, found as a Kafka consumer finds them: the log's
aborted-transactions index gives (producer id, first offset) of each aborted transaction in the
range; from a batch at or past that first offset on, the producer's transactional batches are
dropped until its abort marker. Every batch's CRC-32C is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headrace.broker.log.txn_markers import control_marker
from headrace.protocol.records import (
    CorruptRecordError,
    crc_matches,
    decode_records,
    iter_batches,
)
from headrace.storage import Log

READ_BYTES = 1 << 20  # one read of the log


@dataclass(slots=True)
class Columns:
    """A partition's committed records in ``[start, next_offset)``, a column per field."""

    partition: int
    start: int
    next_offset: int  # where the next read starts: every offset below was read (or skipped)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # milliseconds
    timestamp_types: list[int] = field(default_factory=list)  # 0 CreateTime, 1 LogAppendTime
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)
    bytes_read: int = 0
    more: bool = False  # stopped at the byte budget, not at ``end``

    def __len__(self) -> int:
        return len(self.offsets)


def read_committed(plog: Log, partition: int, start: int, end: int, max_bytes: int) -> Columns:
    """The records of ``plog`` in ``[start, end)`` a read_committed consumer gets, whole
    batches up to about ``max_bytes`` (at least one batch). A start below the log start offset
    (retention went first) starts there. Raises ``CorruptRecordError`` or ``StorageError``."""
    offset = max(start, plog.log_start_offset)
    out = Columns(partition, start, offset)
    if offset >= end:
        out.next_offset = max(offset, start)
        return out
    waiting = sorted(plog.aborted_txns(offset, end), key=lambda a: a.first_offset)
    aborting: set[int] = set()  # producers whose batches are dropped until their abort marker
    while offset < end and out.bytes_read < max_bytes:
        data = plog.read(offset, min(READ_BYTES, max_bytes - out.bytes_read), max_offset=end)
        if not data:
            break  # (a gap up to the end; the next round reads on from here)
        view = memoryview(data)
        for pos, size, h in iter_batches(view):
            last = h.base_offset + h.last_offset_delta
            if h.base_offset >= end:
                break
            batch = view[pos : pos + size]
            if not crc_matches(batch):
                raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC")
            while waiting and waiting[0].first_offset <= h.base_offset:
                aborting.add(waiting.pop(0).producer_id)
            out.bytes_read += size
            offset = last + 1
            if h.is_control:
                kind, _ = control_marker(batch)
                if kind == 0:  # ABORT: the producer's batches after it are its next ones
                    aborting.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborting:
                continue
            ts_type = h.timestamp_type
            for record_offset, timestamp, key, value, headers in decode_records(batch):
                if record_offset < start or record_offset >= end:
                    continue
                out.offsets.append(record_offset)
                out.timestamps.append(timestamp)
                out.timestamp_types.append(ts_type)
                out.keys.append(key)
                out.values.append(value)
                out.headers.append(headers)
            if out.bytes_read >= max_bytes:
                break
        else:
            continue
        break
    out.next_offset = max(offset, start)
    out.more = out.next_offset < end
    return out
