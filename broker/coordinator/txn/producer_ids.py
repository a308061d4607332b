"""Producer ids for idempotent and transactional producers, none given twice.

Ids are handed out from blocks of ``BLOCK`` that the cluster metadata reserves
(``producer_id_block``): in ZooKeeper, so that no two brokers give the same id, or on a broker
on its own in the data directory, written and fsynced before the first id of a block is used,
so that no id is given twice, even across a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

BLOCK = 1000


class ProducerIdManager:
    """Producer ids from blocks taken from ``blocks`` (an async callable: the first id of a
    new block of a size)."""

    def __init__(self, blocks: Callable[[int], Awaitable[int]]) -> None:
        self._blocks = blocks
        self._reserved = self._next = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._reserved:
                self._next = await self._blocks(BLOCK)
                self._reserved = self._next + BLOCK
            pid = self._next
            self._next += 1
            return pid
