"""One compaction pass after another: ``clean(log, ...)``, and what it reports.

A pass plans (plan.py), builds the offset map (key_map.py), rewrites each group of segments
into the staging directory (rewrite.py, transactions.py) and hands the result to
``Log.replace_segments``, which swaps it in unless the log changed meanwhile. When the
offset map fills up before the end of the cleanable range, another pass follows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import swap
from .._batch import BadBatch
from ..errors import StorageError
from . import key_map
from .batches import Codec, Decompressor
from .key_map import DEFAULT_MAP_BYTES, MAP_ENTRY_BYTES
from .plan import groups, limit, make_plan
from .rewrite import Rules, rewrite_group
from .transactions import Producers, Transactions


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    cleaned_up_to: int  # the new cleaner offset
    passes: int = 1  # more than one when the offset map filled up


def clean(
    log,
    now_ms: int | None = None,
    *,
    decompress: Decompressor | None = None,
    compress: Codec | None = None,
    force: bool = False,
    below: int | None = None,
    producers: Producers | None = None,
    map_bytes: int = DEFAULT_MAP_BYTES,
) -> CleanResult | None:
    """Compact ``log``; None when there was nothing (enough) to do.

    ``force`` ignores min_cleanable_dirty_ratio and cleans even with nothing dirty (markers
    and tombstones past their horizon go). ``below`` limits the work to segments whose
    offsets all lie below it (the broker passes the last stable offset, so records of an
    undecided transaction are never compacted). ``producers`` names the active producers:
    producer id -> (base offset of its last data batch, or -1 when its last entry is a
    marker; its epoch); that batch (or that producer's marker of that epoch) is kept, empty
    if need be. ``map_bytes`` bounds the offset map; when it fills, several passes are made.
    Call from one thread at a time per log.
    """
    total = None
    while True:
        result = _clean_once(
            log,
            now_ms,
            decompress,
            compress,
            force or total is not None,
            below,
            producers or {},
            map_bytes,
        )
        if result is None:
            return total
        result, more = result
        if total is not None:
            result = CleanResult(
                total.segments_before + result.segments_before,
                total.segments_after + result.segments_after,
                total.bytes_before + result.bytes_before,
                total.bytes_after + result.bytes_after,
                total.records_removed + result.records_removed,
                result.cleaned_up_to,
                total.passes + 1,
            )
        total = result
        if not more:
            return total


def _clean_once(log, now_ms, decompress, compress, force, below, producers, map_bytes):
    cfg = log.config
    if not cfg.compacts:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        plan = make_plan(log, now_ms, force, below)
    except OSError as e:
        raise StorageError(f"compaction of {log.directory} failed: {e}") from e
    if plan is None:
        return None
    try:
        offsets, map_end = key_map.offset_map(
            plan, decompress, max(1, map_bytes // MAP_ENTRY_BYTES)
        )
        more = map_end < plan.end_offset
        if more:
            limit(plan, map_end)
        staged = swap.stage(log.directory)
        rules = Rules(
            offsets,
            now_ms,
            cfg.delete_retention_ms,
            producers,
            Transactions(plan.aborted),
            decompress,
            compress,
        )
        removed = 0
        for group in groups(plan, cfg.segment_bytes):
            removed += rewrite_group(staged, group, rules, cfg.index_interval_bytes)
    except (OSError, BadBatch) as e:
        swap.discard(log.directory)
        if any(seg.deleted for seg, _, _ in plan.segments):
            return None  # retention or truncation removed a segment meanwhile: nothing to do
        raise StorageError(f"compaction of {log.directory} failed: {e}") from e
    old = [seg for seg, _, _ in plan.segments]
    new = log.replace_segments(
        old, staged, generation=plan.generation, cleaner_offset=plan.end_offset
    )
    if new is None:
        return None
    before = sum(size for _, size, _ in plan.segments)
    after = sum(s.size for s in new)
    return CleanResult(len(old), len(new), before, after, removed, plan.end_offset), more
