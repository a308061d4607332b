"""A broker-wide budget of bytes, reserved before memory is used and released after.

How this works
--------------
``ByteBudget(capacity)`` hands out ``Reservation`` objects. ``await budget.reserve(want,
deadline)`` returns at once when ``want`` bytes are free; otherwise it waits, first come first
served, until they are or until ``deadline`` (an event-loop time) passes, and then returns an
empty reservation (size 0): the caller answers with what that allows instead of allocating.
A request for more than the whole capacity is cut to the capacity, so it can always be met.

``reservation.release()`` gives the bytes back (once; later calls do nothing) and wakes the
waiters that now fit. ``reservation.grow(n)`` takes ``n`` more bytes without waiting, for the
rare answer that must exceed what was reserved (its size is bounded elsewhere).
"""

from __future__ import annotations

import asyncio
from collections import deque


class Reservation:
    __slots__ = ("_budget", "size")

    def __init__(self, budget: ByteBudget | None, size: int) -> None:
        self._budget = budget
        self.size = size

    def grow(self, extra: int) -> None:
        if self._budget is not None and extra > 0:
            self._budget.available -= extra
            self.size += extra

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None and self.size:
            budget.available += self.size
            budget._wake()


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    @property
    def reserved(self) -> int:
        return self.capacity - self.available

    async def reserve(self, want: int, deadline: float) -> Reservation:
        want = max(0, min(want, self.capacity))
        if want == 0 or (not self._waiters and want <= self.available):
            self.available -= want
            return Reservation(self, want)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        entry = (want, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(max(0.0, deadline - loop.time())):
                await waiter
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return Reservation(self, want)  # granted just as the deadline passed
            return Reservation(None, 0)
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                Reservation(self, want).release()
            raise
        finally:
            try:
                self._waiters.remove(entry)
            except ValueError:
                pass
            self._wake()
        return Reservation(self, want)

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            want, waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            if want > self.available:
                return
            waiters.popleft()
            self.available -= want
            waiter.set_result(None)
