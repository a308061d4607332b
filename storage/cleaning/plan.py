"""Planning a pass: which segments, whether they are dirty enough, how they are grouped.

The *cleanable* segments are the inactive ones from the first (``Log.inactive_segments``),
stopping before the first segment holding a record younger than ``min_compaction_lag_ms``
and before the first reaching past ``below`` (an undecided transaction); the active segment
is never cleaned. Offsets below ``log.cleaner_offset`` were compacted before (*clean*); the
rest of the cleanable range is *dirty*. The pass goes ahead when dirty bytes / cleanable
bytes >= ``min_cleanable_dirty_ratio``, or when the first batch of a dirty segment is older
than ``max_compaction_lag_ms``.

Consecutive cleanable segments are then grouped while their sizes add up to at most
``segment_bytes``; each group becomes one new segment.
"""

from __future__ import annotations

from ..segment import INT32_MAX, read_first_batch_timestamp
from ..txn_index import AbortedTxn


class Plan:
    """One pass's work: the segments (segment, size, file) and where each one's offsets end,
    the first dirty offset, the end of the cleaned range, the log generation they were taken
    at and the aborted transactions in the range."""

    __slots__ = ("segments", "ends", "first_dirty", "end_offset", "generation", "aborted")

    segments: list[tuple]
    ends: list[int]
    first_dirty: int
    end_offset: int
    generation: int
    aborted: list[AbortedTxn]


def make_plan(log, now_ms: int, force: bool, below: int | None) -> Plan | None:
    """The pass to make over ``log`` now; None when there is nothing (enough) to clean."""
    cfg = log.config
    newest = now_ms - cfg.min_compaction_lag_ms if cfg.min_compaction_lag_ms > 0 else None
    found = log.inactive_segments(below=below, max_timestamp_at_most=newest)
    if found is None or not found.segments:
        return None
    cleanable, ends = found.segments, found.ends  # each segment's offsets end below its end
    end_offset = ends[-1]
    first_dirty = min(max(found.cleaner_offset, found.log_start_offset), end_offset)
    if first_dirty >= end_offset and not force:
        return None
    total = sum(size for _, size, _ in cleanable)
    dirty = sum(size for (_, size, _), end in zip(cleanable, ends) if end > first_dirty)
    if total == 0:
        return None
    if not force and dirty / total < cfg.min_cleanable_dirty_ratio:
        if not overdue(cleanable, ends, first_dirty, now_ms, cfg.max_compaction_lag_ms):
            return None
    plan = Plan()
    plan.segments = cleanable
    plan.ends = ends
    plan.first_dirty = first_dirty
    plan.end_offset = end_offset
    plan.generation = found.generation
    plan.aborted = log.aborted_txns(cleanable[0][0].base_offset, end_offset)
    return plan


def overdue(cleanable, ends, first_dirty: int, now_ms: int, max_lag_ms: int) -> bool:
    """max.compaction.lag.ms: the earliest first-batch timestamp of the dirty segments is
    older than the limit, so they are compacted whatever the dirty ratio."""
    if max_lag_ms <= 0 or max_lag_ms >= 1 << 62:
        return False
    first = [
        _first_batch_timestamp(seg, size, ref)
        for (seg, size, ref), end in zip(cleanable, ends)
        if end > first_dirty
    ]
    first = [ts for ts in first if ts > 0]
    return bool(first) and min(first) < now_ms - max_lag_ms


def _first_batch_timestamp(seg, size: int, ref) -> int:
    # the segment's cached value when it has one; else read it (without caching: the log's
    # owner thread may change the segment meanwhile)
    ts = seg.rolling_ts
    if ts is not None:
        return ts
    with ref.use() as fd:
        return read_first_batch_timestamp(fd, size)


def limit(plan: Plan, map_end: int) -> None:
    """Only the segments below ``map_end`` (where the offset map stopped) are rewritten."""
    n = sum(1 for seg, _, _ in plan.segments if seg.base_offset < map_end)
    plan.segments = plan.segments[:n]
    plan.ends = plan.ends[:n]
    plan.end_offset = map_end


def groups(plan: Plan, segment_bytes: int) -> list[list[tuple]]:
    """Consecutive segments merged into one while the sizes fit in ``segment_bytes``."""
    out: list[list[tuple]] = []
    total = 0
    for entry, end in zip(plan.segments, plan.ends):
        seg, size, _ref = entry
        if (
            out
            and total + size <= segment_bytes
            and end - 1 - out[-1][0][0].base_offset <= INT32_MAX
        ):
            out[-1].append(entry)
            total += size
        else:
            out.append([entry])
            total = size
    return out
