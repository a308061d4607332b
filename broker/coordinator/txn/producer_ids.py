"""Producer ids for idempotent and transactional producers, none given twice.

Ids are handed out from blocks of ``BLOCK`` reserved in ``producer-ids`` in the data directory
(written and fsynced before the first id of a block is used), so no id is given twice, even
across a crash; in a cluster the blocks come from ZooKeeper (``Cluster.producer_id_block``), so
no two brokers give the same id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from headrace.storage import replace_file

BLOCK = 1000
FILE = "producer-ids"


class ProducerIdManager:
    """Producer ids from blocks reserved in ``data_dir`` (the file is read at the first id),
    or taken from ``blocks`` (an async callable: the first id of a new block of a size)."""

    def __init__(
        self, data_dir: Path, blocks: Callable[[int], Awaitable[int]] | None = None
    ) -> None:
        self._path = data_dir / FILE
        self._blocks = blocks
        self._reserved = self._next = -1  # not read yet
        self._lock = asyncio.Lock()

    def _load(self) -> None:
        try:
            self._reserved = int(self._path.read_text())
        except (FileNotFoundError, ValueError):
            self._reserved = 0
        self._next = self._reserved

    async def next_id(self) -> int:
        async with self._lock:
            if self._blocks is not None and self._next >= self._reserved:
                self._next = await self._blocks(BLOCK)
                self._reserved = self._next + BLOCK
            if self._reserved < 0:
                await asyncio.to_thread(self._load)
            if self._next >= self._reserved:
                await asyncio.to_thread(self._reserve, self._next + BLOCK)
            pid = self._next
            self._next += 1
            return pid

    def _reserve(self, upto: int) -> None:
        replace_file(self._path, str(upto).encode())
        self._reserved = upto
