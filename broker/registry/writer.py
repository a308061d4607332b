"""The write path: how every change to the registry is made, at the leader of ``_schemas``.

How this works
--------------
A write (``async with writer.turn(): ... await writer.write(changes)``) makes sure the topic
exists, then takes the one lock, so writes run one at a time, and waits until this broker's
view holds every record of the leader's log (50004 when this broker does not lead
``_schemas``, 50002 when its view does not catch up within the write timeout). The decisions
made inside the turn (ids, versions, what is refused) are made on that whole view, so none
is made twice. ``write`` appends the records (acks=all, schemas_log.py) and waits until the
view has applied them, so the writer reads its own write; it answers the offset after them,
which the HTTP layer hands to the broker that forwarded the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from . import errors
from .records import Change, encode
from .schemas_log import SchemasLog, SchemasReader


class SchemasWriter:
    def __init__(self, log_: SchemasLog, reader: SchemasReader, *, timeout_s: float) -> None:
        self.log, self.reader, self.timeout_s = log_, reader, timeout_s
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """This writer's turn, on a view caught up with the leader's whole log."""
        await self.log.topic()
        async with self._lock:
            partition = self.log.replica()
            if partition is None or not self.log.leads():
                raise errors.unknown_leader("this broker does not lead _schemas")
            end = partition.log.log_end_offset
            if not await self.reader.wait_for(end, self.timeout_s):
                raise errors.timed_out("_schemas is not replicated up to its end yet")
            yield

    async def write(self, changes: list[Change]) -> int:
        """Write ``changes`` (in a turn) and wait until they are applied here: the offset
        after them."""
        end = await self.log.append([encode(c) for c in changes])
        if not await self.reader.wait_for(end, self.timeout_s):
            raise errors.timed_out("the write was not read back in time")
        return end
