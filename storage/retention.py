"""Which leading segments retention and DeleteRecords remove: policies over the segment list.

Both answer "how many segments, from the first, go"; the log removes them under its lock
(``Log.apply_retention``, ``Log.delete_records_before``) and deletes their files after. The
last segment (the active one) never goes.

Retention (``cleanup.policy`` containing ``delete``): with ``retention.bytes`` the oldest
segments go while the log is larger than the limit; with ``retention.ms`` a segment goes when
its largest timestamp is more than ``retention.ms`` older than now. Either stops at the first
segment that is kept.

DeleteRecords: the segments whose offsets all lie below the new log start offset.
"""

from __future__ import annotations

from collections.abc import Callable


def expired_segments(
    sizes: list[int],
    max_timestamp: Callable[[int], int],
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
) -> int:
    """How many leading segments retention deletes.

    ``sizes``: every segment's size in bytes, the active one last; ``max_timestamp(i)``: the
    largest timestamp in segment ``i`` (asked only when ``retention_ms`` applies).
    """
    excess = sum(sizes) - retention_bytes
    n = 0
    for size in sizes[:-1]:
        if retention_bytes >= 0 and excess >= size and excess > 0:
            excess -= size
        elif retention_ms < 0 or now_ms - max_timestamp(n) <= retention_ms:
            break
        n += 1
    return n


def segments_below(bases: list[int], offset: int) -> int:
    """How many leading segments hold only offsets below ``offset`` (``bases``: every
    segment's base offset, ascending; the last segment is never counted)."""
    n = 0
    while n < len(bases) - 1 and bases[n + 1] <= offset:
        n += 1
    return n
