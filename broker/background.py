"""Background jobs: a coroutine run again and again until the broker stops; the wall clock
the coordinators read by default."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("headrace")


async def run_every(
    interval: float | Callable[[], float], job: Callable[[], Awaitable[object]], what: str
) -> None:
    """Sleep ``interval`` seconds (or as long as ``interval()`` says), then ``await job()``;
    again until cancelled. A failure of one run is logged and the next run comes as usual."""
    while True:
        await asyncio.sleep(interval() if callable(interval) else interval)
        try:
            await job()
        except Exception:
            log.exception("%s failed", what)


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (Kafka's timestamps)."""
    return int(time.time() * 1000)
