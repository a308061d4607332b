"""One share group's view of one partition (KIP-932): which records are in flight, who holds
them, how often each was delivered.

How this works
--------------
Records below the *start offset* are done with; records from the *end offset* on have never
been handed out. Between the two every offset is in exactly one *run*: a range of offsets in
one state, with one delivery count, holder and lock deadline (``Run``). The runs tile
``[start, end)`` in order, so the state costs one entry per range, not per record:

- AVAILABLE: to be delivered (again): released, or its lock ran out;
- ACQUIRED: handed to ``member`` until ``deadline`` (the acquisition lock);
- ACKNOWLEDGED and ARCHIVED: done (accepted; rejected, skipped, or delivered too often).

``acquire`` hands out records of batches the caller read from the log: first the AVAILABLE
ones among them, then new ones from the end offset, whole batches at a time (a batch is never
split when handing out new records, so ``max_records`` may be exceeded to the end of a batch,
as in Kafka), while fewer than ``max_locks`` records are in flight. Each delivery counts one.
``acknowledge`` changes records the member holds: ACCEPT to ACKNOWLEDGED, RELEASE to AVAILABLE,
REJECT and GAP (an offset without a record: a control record, or one compacted away) to
ARCHIVED, RENEW to a new lock. A record released (by the member, by its lock running out, or
by its share session closing) after ``delivery_limit`` deliveries is ARCHIVED instead. Then
the start offset moves past the leading done runs. A run is split only where an
acknowledgement or a delivery covers part of it, and neighbours that agree are merged again.

Locks: one timer per share partition, at the earliest deadline; when it fires every lock
that ran out is released and the timer is set for the next. ``waiters`` are share fetches
waiting for records: released records wake them.

Dead letters: a record rejected, or archived because it reached the delivery limit, is also
noted in ``dead`` as (first, last, delivery count, why), for the share group's dead-letter
queue if it has one (share/dead_letters.py).

Persistence: every change that must outlive this broker (an acknowledgement, a release, with
its delivery count) is noted in ``changes`` as (first, last, state, delivery count), for the
share partition manager to write (share_partition_manager.py); handing records out is not
noted (a record held when the leader dies is delivered again). ``restore`` rebuilds the runs
from what was written: offsets between the start and the last one written that no batch
covers are AVAILABLE, never delivered as far as anyone knows.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterable

from headrace.protocol import ErrorCode

# record states, with Kafka's numbers (they are what the persisted state holds)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# acknowledge types
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_DONE = (ACKNOWLEDGED, ARCHIVED)
# why a record is a dead letter (share/dead_letters.py), as Kafka words it
REJECTED = "Offset rejected by client."
EXHAUSTED = "Offset delivery count exceeded the threshold."
_ACKED_STATE = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, REJECT: ARCHIVED}


class Run:
    """Offsets ``first``..``last`` (inclusive), all in one state."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(
        self, first: int, last: int, state: int, count: int, member: str = "", deadline=0.0
    ):
        self.first = first
        self.last = last
        self.state = state
        self.count = count  # deliveries so far
        self.member = member  # the holder, while ACQUIRED
        self.deadline = deadline  # loop time its lock runs out, while ACQUIRED

    def same(self, other: Run) -> bool:
        return (
            self.state == other.state
            and self.count == other.count
            and self.member == other.member
            and self.deadline == other.deadline
        )

    def copy(self, first: int, last: int) -> Run:
        return Run(first, last, self.state, self.count, self.member, self.deadline)

    def __repr__(self) -> str:
        return f"Run({self.first}-{self.last} s{self.state} n{self.count} {self.member!r})"


class SharePartition:
    """The in-flight records of one share group on one partition."""

    def __init__(
        self,
        group_id: str,
        start: int,
        *,
        delivery_limit: Callable[[], int],  # share.delivery.count.limit, read when needed
        on_change: Callable[[], None] = lambda: None,  # ``changes`` has more to write
    ) -> None:
        self.group_id = group_id
        self.start = start
        self.end = start
        self.runs: list[Run] = []
        self.delivery_limit = delivery_limit
        self.waiters: list[asyncio.Future] = []  # share fetches waiting for records
        self.changes: list[tuple[int, int, int, int]] = []  # not yet written (see above)
        self.dead: list[tuple[int, int, int, str]] = []  # dead letters not yet sent (see above)
        self.on_change = on_change
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # -- reading the state

    def next_offset(self) -> int:
        """Where the next delivery starts: the first AVAILABLE record, else the end."""
        for run in self.runs:
            if run.state == AVAILABLE:
                return run.first
        return self.end

    def in_flight(self) -> int:
        return self.end - self.start

    def counts(self) -> dict[int, int]:
        """Records per state between start and end."""
        out = dict.fromkeys((AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED), 0)
        for run in self.runs:
            out[run.state] += run.last - run.first + 1
        return out

    def delivery_complete(self) -> int:
        """Records past the start offset that are done (ACKNOWLEDGED or ARCHIVED): what the
        lag is computed from (KIP-1226)."""
        return sum(run.last - run.first + 1 for run in self.runs if run.state in _DONE)

    # -- handing out

    def acquire(
        self,
        member: str,
        batches: Iterable[tuple[int, int, bool]],
        max_records: int,
        max_locks: int,
        deadline: float,
    ) -> list[tuple[int, int, int]]:
        """Hand records of ``batches`` ((base offset, last offset, aborted) in log order) to
        ``member`` until ``deadline``: ``[(first, last, delivery count)]``. An aborted batch
        (read_committed) is archived, not delivered."""
        got: list[tuple[int, int, int]] = []
        taken = 0
        for base, last, aborted in batches:
            if taken >= max_records:
                break
            if last < self.start:
                continue
            first = max(base, self.start)
            if first < self.end:  # records delivered before: the available ones
                top = min(last, self.end - 1)
                i, j = self._slice(first, top)
                for run in self.runs[i:j]:
                    if run.state != AVAILABLE:
                        continue
                    if aborted:
                        run.state = ARCHIVED
                        continue
                    run.state, run.member, run.deadline = ACQUIRED, member, deadline
                    run.count += 1
                    got.append((run.first, run.last, run.count))
                    taken += run.last - run.first + 1
                first = top + 1
            if first > last or taken >= max_records:
                continue
            if self.end - self.start >= max_locks:
                break  # as many records in flight as allowed
            if first > self.end:  # offsets without records (compacted away): nothing to deliver
                self.runs.append(Run(self.end, first - 1, ARCHIVED, 0))
            if aborted:
                self.runs.append(Run(first, last, ARCHIVED, 0))
            else:
                self.runs.append(Run(first, last, ACQUIRED, 1, member, deadline))
                got.append((first, last, 1))
                taken += last - first + 1
            self.end = last + 1
        self._tidy()
        if got:
            self._schedule(deadline)
        return _joined(got)

    # -- acknowledgements

    def acknowledge(
        self, member: str, batches: list[tuple[int, int, list[int]]], deadline: float
    ) -> tuple[int, str | None]:
        """Apply a member's acknowledgements ((first, last, types): one type for the whole
        range or one per offset); all or none. (error code, message)."""
        for first, last, _ in batches:
            if first < self.start or last >= self.end:
                return ErrorCode.INVALID_RECORD_STATE, f"offsets {first}-{last} are not in flight"
            i, j = self._slice(first, last)
            for run in self.runs[i:j]:
                if run.state != ACQUIRED or run.member != member:
                    self._tidy()
                    return (
                        ErrorCode.INVALID_RECORD_STATE,
                        f"offsets {run.first}-{run.last} are not acquired by this member",
                    )
        released = False
        limit = self.delivery_limit()
        for first, last, types in batches:
            if len(types) == 1:
                spans = [(first, last, types[0])]
            else:
                spans = list(_spans(first, types))
            for lo, hi, kind in spans:
                i, j = self._slice(lo, hi)
                for run in self.runs[i:j]:
                    if kind == RENEW:
                        run.deadline = deadline
                        continue
                    if kind == RELEASE:
                        run.state = ARCHIVED if run.count >= limit else AVAILABLE
                        released = True
                        if run.state == ARCHIVED:
                            self.dead.append((run.first, run.last, run.count, EXHAUSTED))
                    else:
                        run.state = _ACKED_STATE[kind]
                        if kind == REJECT:
                            self.dead.append((run.first, run.last, run.count, REJECTED))
                    run.member, run.deadline = "", 0.0
                    self.changes.append((run.first, run.last, run.state, run.count))
        if any(kind == RENEW for _, _, types in batches for kind in types):
            self._schedule(deadline)
        moved = self._tidy()
        if released or moved:
            self._wake()
        if self.changes:
            self.on_change()
        return ErrorCode.NONE, None

    def release(self, member: str | None = None, now: float | None = None) -> int:
        """Give back the records ``member`` holds (None: every holder's), or, with ``now``,
        those whose lock ran out by then. How many."""
        limit = self.delivery_limit()
        count = 0
        for run in self.runs:
            if run.state != ACQUIRED:
                continue
            if (member is not None and run.member != member) or (
                now is not None and run.deadline > now
            ):
                continue
            run.state = ARCHIVED if run.count >= limit else AVAILABLE
            run.member, run.deadline = "", 0.0
            count += run.last - run.first + 1
            if run.state == ARCHIVED:
                self.dead.append((run.first, run.last, run.count, EXHAUSTED))
            self.changes.append((run.first, run.last, run.state, run.count))
        if count:
            self._tidy()
            self._wake()
            self.on_change()
        return count

    def restore(self, start: int, batches: Iterable[tuple[int, int, int, int]]) -> None:
        """Rebuild from written state: the start offset and (first, last, state, delivery
        count) batches."""
        self.start = self.end = start
        self.runs = []
        for first, last, state, count in sorted(batches):
            first = max(first, self.end)
            if last < first:
                continue
            if first > self.end:
                self.runs.append(Run(self.end, first - 1, AVAILABLE, 0))
            if state not in _DONE:
                state = AVAILABLE
            self.runs.append(Run(first, last, state, count))
            self.end = last + 1
        self._tidy()

    def skip_to(self, log_start: int) -> None:
        """The log now starts at ``log_start`` (retention, DeleteRecords): what lay below is
        gone, delivered or not."""
        if log_start <= self.start:
            return
        self.runs = [r for r in self.runs if r.last >= log_start]
        if self.runs and self.runs[0].first < log_start:
            self.runs[0] = self.runs[0].copy(log_start, self.runs[0].last)
        self.start = log_start
        self.end = max(self.end, log_start)
        self._tidy()

    def _wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    def close(self) -> None:
        self._wake()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- the runs

    def _slice(self, first: int, last: int) -> tuple[int, int]:
        """Indexes ``i, j`` such that ``runs[i:j]`` cover exactly ``first``..``last`` (runs
        split where needed); ``start <= first <= last < end``."""
        runs = self.runs
        i = self._split(first)
        j = self._split(last + 1) if last + 1 < self.end else len(runs)
        return i, j

    def _split(self, offset: int) -> int:
        """Make ``offset`` the first of a run; that run's index."""
        runs = self.runs
        k = bisect.bisect_right(runs, offset, key=lambda r: r.first) - 1
        run = runs[k]
        if run.first == offset:
            return k
        runs[k : k + 1] = [run.copy(run.first, offset - 1), run.copy(offset, run.last)]
        return k + 1

    def _tidy(self) -> bool:
        """Drop the leading done runs (moving the start offset) and merge neighbours that
        agree. Whether the start moved."""
        runs = self.runs
        k = 0
        while k < len(runs) and runs[k].state in _DONE:
            k += 1
        moved = k > 0
        if moved:
            del runs[:k]
            self.start = runs[0].first if runs else self.end
        merged: list[Run] = []
        for run in runs:
            if merged and merged[-1].same(run) and merged[-1].last + 1 == run.first:
                merged[-1].last = run.last
            else:
                merged.append(run)
        self.runs = merged
        return moved

    # -- acquisition locks

    def _schedule(self, deadline: float) -> None:
        if self._timer is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = deadline
        self._timer = loop.call_at(deadline, self._locks_ran_out)

    def _locks_ran_out(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        self.release(now=now)
        pending = [r.deadline for r in self.runs if r.state == ACQUIRED]
        if pending:
            self._schedule(min(pending))


def _spans(first: int, types: list[int]):
    """(first, last, type) for each stretch of equal types."""
    lo = first
    for k in range(1, len(types) + 1):
        if k == len(types) or types[k] != types[k - 1]:
            yield lo, first + k - 1, types[k - 1]
            lo = first + k


def _joined(got: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for first, last, count in got:
        if out and out[-1][1] + 1 == first and out[-1][2] == count:
            out[-1] = (out[-1][0], last, count)
        else:
            out.append((first, last, count))
    return out
