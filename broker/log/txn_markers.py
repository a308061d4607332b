"""Transaction markers (control batches) and the per-partition aborted-transactions index.

Control batch (what the coordinator appends to every partition of a finished transaction):
attributes transactional | control, the transaction's producer id and epoch, baseSequence -1,
one record whose key and value are::

    key:   int16 version (0), int16 type (0 abort, 1 commit)
    value: int16 version (0), int32 coordinator epoch

The aborted-transactions index is the storage engine's (``.txnindex`` beside each segment,
``headrace.storage.AbortedTxn``): an abort marker is appended together with its entry
(producer id, first offset, marker offset, last stable offset). A ``read_committed`` fetch
returns the entries whose range overlaps the fetched offsets, and the client drops the
aborted producer's batches itself (the broker never filters records). Earlier versions kept
one ``transactions.index`` per partition (``LEGACY_INDEX_FILE``); it is imported once.
"""

from __future__ import annotations

import struct

from headrace.protocol.records import (
    BATCH_HEADER_SIZE,
    Record,
    build_batch,
    decode_records,
)

ABORT, COMMIT = 0, 1
LEGACY_INDEX_FILE = "transactions.index"

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int | None = None,
) -> bytearray:
    """A writable control batch (base offset 0: set it before appending)."""
    record = Record(
        key=_KEY.pack(0, COMMIT if commit else ABORT),
        value=_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp,
    )
    return bytearray(
        build_batch(
            [record],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            is_transactional=True,
            is_control=True,
        )
    )


def control_marker(batch) -> tuple[int, int]:
    """(ABORT or COMMIT, coordinator epoch) of the control batch starting at ``batch[0]``;
    (-1, -1) if unreadable."""
    try:
        for _, _, key, value, _ in decode_records(memoryview(batch)):
            if key is None or len(key) < _KEY.size:
                return -1, -1
            epoch = -1
            if value is not None and len(value) >= _VALUE.size:
                epoch = _VALUE.unpack_from(value)[1]
            return _KEY.unpack_from(key)[1], epoch
    except ValueError:
        return -1, -1
    return -1, -1


def control_type(batch) -> int:
    """ABORT or COMMIT for the control batch starting at ``batch[0]``; -1 if unreadable."""
    try:
        for _, _, key, _, _ in decode_records(memoryview(batch)):
            if key is None or len(key) < _KEY.size:
                return -1
            return _KEY.unpack_from(key)[1]
    except ValueError:
        return -1
    return -1


CONTROL_READ_BYTES = BATCH_HEADER_SIZE + 64  # a control batch is about 80 bytes
