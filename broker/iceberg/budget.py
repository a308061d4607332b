"""The translator's memory bound: record bytes held by every round at once, at most
``iceberg.buffer.max.bytes``.

Two sides use it. The broker's event loop reserves each round's share before it sends the
round to a worker process, without waiting (``Hold.try_take``, ``Hold.try_take_whole``: the
event loop looks again a little later), and gives it back when the answer comes. The worker
reads within its share through a budget of that capacity of its own, with the waiting calls
below (one round per budget there, so they never wait long).

A round takes bytes before it reads a partition (``Hold.take``), gives back what the read did
not need, and gives the rest back when its commit is done (or failed). It never waits while it
holds some, so two rounds cannot wait on each other: a round that holds nothing waits until some
bytes are free; one that already read other partitions takes what is free now, maybe nothing,
and then commits what it holds, leaving the rest for its next round.

A record batch is never split, so a round whose first batch is larger than what ``take`` gave
waits for that batch's size (``take_whole``); a batch larger than the whole budget is read
alone, once no other round holds anything, and the budget then holds that one batch. Every
other time the held bytes stay at or below the bound. ``peak`` is the most ever held and
``peak_holders`` the most rounds that held bytes at once (the broker's metrics show both).
"""

from __future__ import annotations

import threading


class BufferBudget:
    """Bytes held by rounds, at most ``capacity`` (but for one oversized batch read alone)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.peak = 0
        self.holders = 0  # rounds holding bytes now
        self.peak_holders = 0
        self._changed = threading.Condition()

    def hold(self) -> Hold:
        """What one round holds: give it back with ``release`` (or ``with``)."""
        return Hold(self)


class Hold:
    """The bytes one round holds of a ``BufferBudget``."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BufferBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, want: int) -> int:
        """Up to ``want`` more bytes: what is free now, maybe 0; a round holding nothing waits
        until some are free."""
        b = self.budget
        with b._changed:
            while not self.held and b.held >= b.capacity:
                b._changed.wait()
            got = max(0, min(want, b.capacity - b.held))
            self._add(got)
            return got

    def take_whole(self, size: int) -> None:
        """``size`` bytes for one batch larger than what ``take`` gave (the caller holds
        nothing): once that many are free, or, for a batch larger than the whole budget, once
        no other round holds anything."""
        assert not self.held
        b = self.budget
        with b._changed:
            while b.held and b.capacity - b.held < size:
                b._changed.wait()
            self._add(size)

    def try_take(self, want: int) -> int:
        """Up to ``want`` more bytes, what is free now (0: none; never waits)."""
        b = self.budget
        with b._changed:
            got = max(0, min(want, b.capacity - b.held))
            self._add(got)
            return got

    def try_take_whole(self, size: int) -> bool:
        """``size`` bytes for one batch (the caller holds nothing), if that many are free or,
        for a batch larger than the whole budget, if no other round holds anything; else
        False (never waits)."""
        assert not self.held
        b = self.budget
        with b._changed:
            if b.held and b.capacity - b.held < size:
                return False
            self._add(size)
            return True

    def give_back(self, size: int) -> None:
        """Some of the held bytes (a read that needed less than it took)."""
        b = self.budget
        size = min(size, self.held)
        if size <= 0:
            return
        with b._changed:
            self.held -= size
            b.held -= size
            if not self.held:
                b.holders -= 1
            b._changed.notify_all()

    def release(self) -> None:
        b = self.budget
        with b._changed:
            if self.held:
                b.held -= self.held
                b.holders -= 1
                self.held = 0
                b._changed.notify_all()

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _add(self, size: int) -> None:
        b = self.budget
        if not size:
            return
        if not self.held:
            b.holders += 1
            b.peak_holders = max(b.peak_holders, b.holders)
        self.held += size
        b.held += size
        b.peak = max(b.peak, b.held)
