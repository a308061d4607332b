"""ByteBudget: reservations granted at once while there is room, waiting (first come first
served) while there is not, empty once the deadline passes; and the write-side backpressure of
the request path, with the echo handler and a client that does not read."""

from __future__ import annotations

import asyncio
import struct

from headrace.pipeline import ByteBudget, Limits, serve


async def test_reserve_waits_for_room_and_gives_up_empty_at_the_deadline():
    loop = asyncio.get_running_loop()
    budget = ByteBudget(100)
    a = await budget.reserve(60, loop.time() + 1)
    assert a.size == 60 and budget.available == 40
    waiting = asyncio.ensure_future(budget.reserve(50, loop.time() + 5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    late = await budget.reserve(
        10, loop.time() + 0.05
    )  # behind the waiter: first come first served
    assert late.size == 0
    a.release()
    a.release()  # a second release does nothing
    b = await asyncio.wait_for(waiting, 1)
    assert b.size == 50 and budget.available == 50
    b.release()
    huge = await budget.reserve(1000, loop.time() + 1)  # more than the capacity: cut to it
    assert huge.size == 100 and budget.available == 0


async def test_grow_goes_over_and_release_gives_all_back():
    loop = asyncio.get_running_loop()
    budget = ByteBudget(100)
    r = await budget.reserve(80, loop.time() + 1)
    r.grow(50)
    assert budget.available == -30
    r.release()
    assert budget.available == 100


class Flood:
    """Answers every frame with ``size`` bytes."""

    def __init__(self, size: int):
        self.size = size
        self.handled = 0

    def handle(self, request):
        self.handled += 1
        return [bytes(self.size)]

    def connection_closed(self, connection):
        pass


async def test_a_client_that_does_not_read_stops_being_handled_then_resumes():
    handler = Flood(64 * 1024)
    limits = Limits(
        max_frame=1 << 20,
        per_connection=1 << 20,
        per_broker=1 << 24,
        requests_per_connection=500,
        response_bytes=1 << 20,
    )
    server, router = await serve(handler, "127.0.0.1", 0, limits)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        frame = struct.pack(">i", 8) + bytes(8)
        writer.write(frame * 2000)  # 2000 requests, 125 MiB of answers if all were made
        writer.transport.pause_reading()  # and read nothing
        await asyncio.sleep(0.5)
        handled = handler.handled
        # at most the budget (1 MiB) of answers beyond what the kernel's buffers took
        assert handled < 2000, handled
        unsent = sum(c._parked_bytes for c in router.connections)
        assert unsent <= 2 << 20
        writer.transport.resume_reading()
        got = 0
        while got < 2000:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            await reader.readexactly(size)
            got += 1
        assert handler.handled == 2000
        writer.close()
    finally:
        server.close()
        await router.close()
