"""The records of a partition that a ``read_committed`` consumer gets, read back from its log
into columns (plain lists, one per field), in a translator worker process (from the log's files:
``storage.LogFilesView``) or from a ``Log``.

What is read: ``[start, end)`` where ``end`` is the partition's last stable offset (so below the
high watermark and below every undecided transaction). Control batches are skipped, and so are
the batches of aborted transactions, found as a Kafka consumer finds them: the log's
aborted-transactions index gives (producer id, first offset) of each aborted transaction in the
range; from a batch at or past that first offset on, the producer's transactional batches are
dropped until its abort marker. Every batch's CRC-32C is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headrace.broker.log.txn_markers import control_marker
from headrace.protocol.compression import decompress
from headrace.protocol.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    crc_matches,
    decode_records,
    iter_batches,
)
from headrace.record_format import read_varint
from headrace.storage import Log, LogFilesView

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
    # nothing read: the first batch (this many bytes) is larger than the budget
    blocked_by: int = 0
    # what the C decoder (headrace._record_columns) made, instead of the lists above
    chunks: list[tuple] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets) + sum(c[0] for c in self.chunks)

    def arrays(self) -> dict[str, Any]:
        """The columns as Arrow arrays (chunked arrays from the C decoder): key, value
        (binary), headers (list of (str, bytes) pairs, as Python lists: made into Arrow by
        rows.py), offset, timestamp (ms), timestamp_type."""
        import pyarrow as pa

        if not self.chunks:
            return {
                "key": pa.array(self.keys, pa.binary()),
                "value": pa.array(self.values, pa.binary()),
                "headers": self.headers,
                "offset": pa.array(self.offsets, pa.int64()),
                "timestamp": pa.array(self.timestamps, pa.int64()),
                "timestamp_type": pa.array(self.timestamp_types, pa.int32()),
            }
        parts = [_chunk_arrays(c) for c in self.chunks]
        found = {  # (chunked: the chunks are not copied into one array)
            name: pa.chunked_array([p[name] for p in parts])
            for name in ("key", "value", "offset", "timestamp", "timestamp_type")
        }
        headers: list[list] = []
        for c in self.chunks:
            n, by_row = c[0], c[10]
            headers += [by_row.get(i, []) for i in range(n)] if by_row else [[]] * n
        found["headers"] = headers
        return found

    def value_list(self) -> list[bytes | None]:
        """The values as Python bytes (None: a null value)."""
        if not self.chunks:
            return self.values
        return self.arrays()["value"].to_pylist()


def _chunk_arrays(chunk: tuple) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    n, offsets, timestamps, types, k_offsets, k_valid, k_data, v_offsets, v_valid, v_data, _ = chunk

    def binary(offsets: bytes, valid: bytes, data: bytes) -> Any:
        bitmap = None
        if valid.count(0):  # (some null: Arrow's validity bitmap from the byte per record)
            flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)])
            bitmap = pc.not_equal(flags, 0).buffers()[1]
        return pa.Array.from_buffers(
            pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    return {
        "key": binary(k_offsets, k_valid, k_data),
        "value": binary(v_offsets, v_valid, v_data),
        "offset": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        "timestamp": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(timestamps)]),
        "timestamp_type": pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    }


def read_committed(
    plog: Log | LogFilesView, partition: int, start: int, end: int, max_bytes: int
) -> Columns:
    """The records of ``plog`` in ``[start, end)`` a read_committed consumer gets, whole
    batches of at most ``max_bytes`` together. When the first batch alone is larger, nothing
    is read and ``blocked_by`` is its size (the caller may read again with that budget). A
    start below the log start offset (retention went first) starts there. Raises
    ``CorruptRecordError`` or ``StorageError``."""
    offset = max(start, plog.log_start_offset)
    out = Columns(partition, start, offset)
    if offset >= end:
        out.next_offset = max(offset, start)
        return out
    waiting = sorted(plog.aborted_txns(offset, end), key=lambda a: a.first_offset)
    aborting: set[int] = set()  # producers whose batches are dropped until their abort marker
    pending = _Pending()
    while offset < end and out.bytes_read < max_bytes:
        data = plog.read(offset, min(READ_BYTES, max_bytes - out.bytes_read), max_offset=end)
        if not data:
            break  # (a gap up to the end; the next round reads on from here)
        view = memoryview(data)
        for pos, size, h in iter_batches(view):
            last = h.base_offset + h.last_offset_delta
            if h.base_offset >= end:
                break
            if out.bytes_read + size > max_bytes:  # (a batch is never split)
                if not out.bytes_read:
                    out.blocked_by = size
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
            if _columns is None:
                _decode_into(out, batch, h, start, end)
            else:
                pending.append(batch, h)
            if out.bytes_read >= max_bytes:
                break
        else:
            pending.decode_into(out, start, end)
            continue
        break
    pending.decode_into(out, start, end)
    out.next_offset = max(offset, start)
    out.more = out.next_offset < end
    return out


try:
    from headrace._record_columns import (  # type: ignore[import-not-found]
        columns as _columns,  # (built by setup.py; optional)
    )
except ImportError:  # no C compiler at install: the Python twin, _decode_into
    _columns = None


class _Pending:
    """Batches kept for the C decoder, decoded in one call."""

    __slots__ = ("payloads", "bases", "base_ts", "max_ts", "types", "counts")

    def __init__(self) -> None:
        self.payloads: list = []
        self.bases: list[int] = []
        self.base_ts: list[int] = []
        self.max_ts: list[int] = []
        self.types: list[int] = []
        self.counts: list[int] = []

    def append(self, batch: memoryview, h) -> None:
        payload: Any = batch[BATCH_HEADER_SIZE:]
        if h.compression:
            try:
                payload = decompress(h.compression, payload)
            except Exception as e:  # codec libraries raise their own types
                raise CorruptRecordError(f"cannot decompress batch: {e}") from e
        self.payloads.append(payload)
        self.bases.append(h.base_offset)
        self.base_ts.append(h.base_timestamp)
        self.max_ts.append(h.max_timestamp)
        self.types.append(h.timestamp_type)
        self.counts.append(h.records_count)

    def decode_into(self, out: Columns, start: int, end: int) -> None:
        """The kept batches (at most one read's: ``READ_BYTES``) decoded as one chunk of
        ``out``, then forgotten. (Decoding a read at a time keeps each call into the C decoder,
        which holds the interpreter, short: the event loop waits for it at most that long.)"""
        if not self.payloads:
            return
        out.chunks.append(self.decode(start, end))
        self.__init__()  # type: ignore[misc]

    def decode(self, start: int, end: int) -> tuple:
        assert _columns is not None
        try:
            return _columns(
                self.payloads,
                self.bases,
                self.base_ts,
                self.max_ts,
                self.types,
                self.counts,
                start,
                end,
            )
        except ValueError as e:
            raise CorruptRecordError(str(e)) from None


def _decode_into(out: Columns, batch: memoryview, h, start: int, end: int) -> None:
    """Append the records of one (CRC-checked) batch in ``[start, end)`` to ``out``'s columns:
    ``decode_records`` unrolled into the columns, with one-byte varints (the common case for
    lengths and deltas of small records) read inline; a record with headers goes through
    ``decode_records``' own parser."""
    payload = batch[BATCH_HEADER_SIZE:]
    if h.compression:
        try:
            data = bytes(decompress(h.compression, payload))
        except Exception as e:  # codec libraries raise their own types
            raise CorruptRecordError(f"cannot decompress batch: {e}") from e
    else:
        data = bytes(payload)
    n = len(data)
    base, base_ts = h.base_offset, h.base_timestamp
    ts_type = h.timestamp_type
    log_append = ts_type == 1
    offsets, timestamps, types = out.offsets, out.timestamps, out.timestamp_types
    keys, values, headers = out.keys, out.values, out.headers
    first = len(offsets)  # (the batch's rows start here)
    pos = 0
    for _ in range(h.records_count):
        b = data[pos] if pos < n else 0x80
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = read_varint(data, pos, n, 5)
        rec_end = pos + length
        if length < 0 or rec_end > n:
            raise CorruptRecordError(f"record length {length} runs past the batch")
        pos += 1  # attributes
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = read_varint(data, pos, rec_end)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = read_varint(data, pos, rec_end, 5)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            size, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            size, pos = read_varint(data, pos, rec_end, 5)
        key = None
        if size >= 0:
            key, pos = data[pos : pos + size], pos + size
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            size, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            size, pos = read_varint(data, pos, rec_end, 5)
        value = None
        if size >= 0:
            value, pos = data[pos : pos + size], pos + size
        if pos >= rec_end or data[pos] != 0:  # headers (or a malformed record): the full parser
            return _decode_slowly(out, batch, start, end, first, ts_type)
        pos += 1
        if pos != rec_end:
            raise CorruptRecordError("record length does not match its contents")
        offset = base + offset_delta
        if start <= offset < end:
            offsets.append(offset)
            timestamps.append(h.max_timestamp if log_append else base_ts + ts_delta)
            types.append(ts_type)
            keys.append(key)
            values.append(value)
            headers.append([])
    if pos != n:
        raise CorruptRecordError(f"{n - pos} bytes left after the last record")


def _decode_slowly(
    out: Columns, batch: memoryview, start: int, end: int, first: int, ts_type: int
) -> None:
    """The batch again with ``decode_records`` (records with headers): its rows already taken
    (from ``first`` on) are dropped first."""
    for column in (out.offsets, out.timestamps, out.timestamp_types, out.keys, out.values):
        del column[first:]
    del out.headers[first:]
    for offset, timestamp, key, value, headers in decode_records(batch):
        if start <= offset < end:
            out.offsets.append(offset)
            out.timestamps.append(timestamp)
            out.timestamp_types.append(ts_type)
            out.keys.append(key)
            out.values.append(value)
            out.headers.append(headers)
