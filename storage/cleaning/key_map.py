"""The offset map: key -> the greatest offset holding it, over a pass's dirty batches.

Keys are kept as 16-byte BLAKE2b digests and the map holds at most ``map_bytes //
MAP_ENTRY_BYTES`` of them (Kafka's ``log.cleaner.dedupe.buffer.size``). When it is full the
pass ends at the last batch that fit (at a segment boundary when a whole segment fit): only
the segments below that point are rewritten, and ``clean`` starts another pass from there.
Records of aborted transactions never enter the map, nor do control batches.
"""

from __future__ import annotations

import hashlib

from headrace.record_format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    INT16,
    INT64,
    PRODUCER_ID_OFFSET,
)

from .batches import Decompressor, data_records, read_batches
from .plan import Plan
from .transactions import Transactions, control_type

# What one offset map entry costs in memory: a dict slot, a 16-byte digest as bytes and an int.
MAP_ENTRY_BYTES = 128
DEFAULT_MAP_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size


def digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def offset_map(
    plan: Plan, decompress: Decompressor | None, max_entries: int
) -> tuple[dict[bytes, int], int]:
    """(key digest -> greatest offset, where the map ends): the dirty batches from the first
    dirty offset, until the map holds ``max_entries`` keys."""
    offsets: dict[bytes, int] = {}
    first_dirty = plan.first_dirty
    txns = Transactions(plan.aborted)
    end = plan.end_offset
    for (seg, size, ref), seg_end in zip(plan.segments, plan.ends):
        if seg_end <= first_dirty:
            continue
        seg_start_entries = len(offsets)
        for info, data in read_batches(ref, size):
            if info.last_offset < first_dirty:
                continue
            attributes = INT16.unpack_from(data, ATTRIBUTES_OFFSET)[0]
            pid = INT64.unpack_from(data, PRODUCER_ID_OFFSET)[0]
            if attributes & ATTR_CONTROL:
                txns.on_marker(pid, control_type(data), info.last_offset)
                continue
            if txns.on_batch(pid, bool(attributes & ATTR_TRANSACTIONAL), info.last_offset):
                continue  # aborted: its keys must not hide committed records
            walked = data_records(data, decompress)
            if walked is None:
                continue
            keys = [(r.key, r.offset_delta) for r in walked[1] if r.key is not None]
            if len(offsets) + len(keys) > max_entries and offsets:
                # full: stop at this segment's start if an earlier one fit whole, else here
                whole = seg_start_entries > 0 and seg.base_offset > first_dirty
                return offsets, seg.base_offset if whole else info.base_offset
            for key, delta in keys:
                offsets[digest(key)] = info.base_offset + delta
        if len(offsets) >= max_entries and seg_end < end:
            return offsets, seg_end
    return offsets, end
