"""State batches: what a share group has done with a range of a partition's records, and how
a write's batches merge into the stored ones (Kafka's ``PersisterStateBatchCombiner``).

A ``StateBatch`` is (first offset, last offset, delivery state, delivery count), both offsets
included; delivery states are Kafka's numbers (0 available, 2 acknowledged, 4 archived).

How ``combine`` works
---------------------
Batches below the start offset are dropped and one that straddles it is cut to begin there
(a start offset of -1 keeps everything). Then the batches, old and new, are swept by offset:
where several cover an offset, the one with the highest delivery count wins, and among equal
counts the highest delivery state (a record delivered more often, or further along, is never
taken back by a stale batch). Adjacent runs with the same state and count are joined, so the
result is sorted, without overlaps, and as short as the states allow. The sweep visits only
batch ends, never single offsets: a batch spanning 2^62 offsets costs what any other does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import NamedTuple

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def batches_of(items: Iterable[Sequence[int]]) -> list[StateBatch]:
    """``StateBatch``es of any 4-sequences (tuples, wire structs are turned by the caller)."""
    return [StateBatch(*item) for item in items]


def pruned(batches: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    """The parts of ``batches`` at or above ``start_offset`` (-1: all of them)."""
    out = []
    for b in batches:
        if start_offset == -1 or b.first_offset >= start_offset:
            out.append(b)
        elif b.last_offset >= start_offset:
            out.append(b._replace(first_offset=start_offset))
    return out


def combine(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> list[StateBatch]:
    """The stored batches after a write of ``new`` with ``start_offset`` (see the module doc)."""
    batches = pruned(so_far, start_offset) + pruned(new, start_offset)
    if len(batches) <= 1:
        return batches
    # (offset, 0 = an end / 1 = a begin, priority): ends sort before begins at one offset
    events: list[tuple[int, int, tuple[int, int]]] = []
    for b in batches:
        priority = (b.delivery_count, b.delivery_state)
        events.append((b.first_offset, 1, priority))
        events.append((b.last_offset + 1, 0, priority))
    events.sort()
    active: dict[tuple[int, int], int] = {}  # priority -> batches open with it
    heap: list[tuple[int, int]] = []  # negated priorities, lazily pruned of closed ones
    out: list[StateBatch] = []
    open_from, winner = -1, None
    i = 0
    while i < len(events):
        offset = events[i][0]
        if winner is not None and offset > open_from:
            _append(out, open_from, offset - 1, winner)
        while i < len(events) and events[i][0] == offset:
            _, begin, priority = events[i]
            i += 1
            if begin:
                if priority not in active:
                    heapq.heappush(heap, (-priority[0], -priority[1]))
                active[priority] = active.get(priority, 0) + 1
            elif active[priority] == 1:
                del active[priority]
            else:
                active[priority] -= 1
        while heap and (-heap[0][0], -heap[0][1]) not in active:
            heapq.heappop(heap)
        winner = (-heap[0][0], -heap[0][1]) if heap else None
        open_from = offset
    return out


def _append(out: list[StateBatch], first: int, last: int, winner: tuple[int, int]) -> None:
    count, state = winner
    if out:
        tail = out[-1]
        if (
            tail.last_offset + 1 == first
            and tail.delivery_state == state
            and tail.delivery_count == count
        ):
            out[-1] = tail._replace(last_offset=last)
            return
    out.append(StateBatch(first, last, state, count))
