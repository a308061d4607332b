"""The request path on its own: framing, ordering, backpressure, group commit.

The handler here is a small echo service (the pipeline knows nothing of Kafka); the client
side is a real socket.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time

import pytest

from headrace.pipeline import CloseConnection, GroupCommit, Limits, serve


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class Echo:
    """Answers each frame with its own bytes, after a delay the frame names (ms, one byte)."""

    def __init__(self):
        self.seen: list[bytes] = []

    def handle(self, request):
        data = bytes(request.frame)
        self.seen.append(data)
        if data.startswith(b"close"):
            raise CloseConnection("asked to")
        if data.startswith(b"none"):
            return None
        delay = data[0] / 1000
        if delay == 0:
            return [data]

        async def later():
            await asyncio.sleep(delay)
            return [data]

        return later()

    def connection_closed(self, connection):
        pass


def limits(**kw):
    values = dict(max_frame=1 << 20, per_connection=1 << 20, per_broker=1 << 24, requests_per_connection=500)
    values.update(kw)
    return Limits(**values)


async def start(handler, **kw):
    server, router = await serve(handler, "127.0.0.1", 0, limits(**kw))
    return server, router, server.sockets[0].getsockname()[1]


async def read_frames(reader, n):
    out = []
    for _ in range(n):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        out.append(await reader.readexactly(size))
    return out


def payload(delay_ms: int, tag: int, size: int = 16) -> bytes:
    body = bytes([delay_ms]) + tag.to_bytes(4, "big")
    return body + bytes(size - len(body))


async def test_responses_in_request_order_despite_out_of_order_completion():
    handler = Echo()
    server, router, port = await start(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # the first requests take longest, so completions arrive in reverse order
        sent = [payload(delay_ms=50 - 5 * i, tag=i) for i in range(10)]
        writer.write(b"".join(frame(p) for p in sent))
        got = await asyncio.wait_for(read_frames(reader, 10), 5)
        assert got == sent
        writer.close()
    finally:
        server.close()
        await router.close()


async def test_frames_split_at_every_byte_and_large_frames():
    handler = Echo()
    server, router, port = await start(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        rng = random.Random(7)
        sent = [payload(0, i, size=rng.choice([8, 100, 5000, 300_000])) for i in range(12)]
        stream = b"".join(frame(p) for p in sent)
        for i in range(0, len(stream), 1 if len(stream) < 2000 else 997):
            writer.write(stream[i : i + (1 if len(stream) < 2000 else 997)])
            if i % 50 == 0:
                await writer.drain()
        got = await asyncio.wait_for(read_frames(reader, len(sent)), 10)
        assert got == sent
        writer.close()
    finally:
        server.close()
        await router.close()


@pytest.mark.parametrize("size", [-1, 0, 7, (1 << 20) + 1, 0x7FFFFFFF])
async def test_out_of_bounds_frame_size_closes_the_connection(size):
    handler = Echo()
    server, router, port = await start(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", size) + b"x" * 16)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        assert handler.seen == []
        # the server still serves others
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", port)
        writer2.write(frame(payload(0, 1)))
        assert await asyncio.wait_for(read_frames(reader2, 1), 5) == [payload(0, 1)]
        writer.close()
        writer2.close()
    finally:
        server.close()
        await router.close()


async def test_no_response_requests_and_close_requests():
    handler = Echo()
    server, router, port = await start(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"none-----") + frame(payload(0, 2)) + frame(b"none-----") + frame(payload(0, 3)))
        assert await asyncio.wait_for(read_frames(reader, 2), 5) == [payload(0, 2), payload(0, 3)]
        writer.write(frame(b"close----"))
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        server.close()
        await router.close()


async def test_reading_stops_at_the_in_flight_cap_and_resumes():
    handler = Echo()
    server, router, port = await start(handler, per_connection=4096)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # 200 slow requests of 1000 bytes: at most ~5 may be read before responses drain
        sent = [payload(100, i, size=1000) for i in range(200)]
        writer.write(b"".join(frame(p) for p in sent))
        await asyncio.sleep(0.05)
        assert 1 <= len(handler.seen) <= 6
        got = await asyncio.wait_for(read_frames(reader, 200), 30)
        assert got == sent
        writer.close()
    finally:
        server.close()
        await router.close()


async def test_a_connection_with_many_requests_lets_others_in_its_queue_take_turns():
    """One handler queue: 300 pipelined requests that arrive in one read are handled 64
    at a time, so a request another connection sends meanwhile does not wait for all of them."""
    handler = Echo()
    server, router = await serve(handler, "127.0.0.1", 0, limits(), 1)
    port = server.sockets[0].getsockname()[1]
    try:
        (ra, wa), (rb, wb) = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        many = [payload(0, i, size=8) for i in range(300)]  # 3,600 bytes: one read
        wa.write(b"".join(frame(p) for p in many))
        while not handler.seen:  # the first of them is being handled...
            await asyncio.sleep(0)
        other = payload(0, 10_000)
        wb.write(frame(other))  # ...when the other connection's request arrives
        assert await asyncio.wait_for(read_frames(rb, 1), 10) == [other]
        assert await asyncio.wait_for(read_frames(ra, 300), 10) == many
        assert handler.seen.index(other) < 200
        wa.close()
        wb.close()
    finally:
        server.close()
        await router.close()


class SlowLog:
    """A flush target whose flush takes time and records what it covered."""

    def __init__(self):
        self.appended = 0
        self.flushed = 0
        self.flush_calls = 0
        self.lock = threading.Lock()

    def append(self):
        with self.lock:
            self.appended += 1

    def flush(self):
        with self.lock:
            target = self.appended
        time.sleep(0.01)
        self.flush_calls += 1
        self.flushed = target


async def test_group_commit_covers_every_earlier_append_with_few_flushes():
    group = GroupCommit()
    log = SlowLog()
    waits = []
    for _ in range(50):
        log.append()
        promised = log.appended
        waits.append((promised, group.flush([log])))
        await asyncio.sleep(0.001)
    for promised, fut in waits:
        await fut
        assert log.flushed >= promised
    assert log.flush_calls < 50 / 3
    assert log.flush_calls == group.flushes
    await group.close()


async def test_group_commit_failure_reaches_the_waiters():
    class Broken:
        def flush(self):
            raise OSError(28, "No space left on device")

    group = GroupCommit()
    with pytest.raises(OSError):
        await group.flush([Broken()])
    await group.close()


async def test_group_commit_flushes_a_groups_logs_at_once_and_fails_it_on_any_error():
    """The logs of one group are fsynced on threads of their own (every one of them inside its
    flush at the same moment: the barrier would time out otherwise); one that fails fails the
    group after the others have flushed."""
    together = threading.Barrier(4, timeout=10)

    class Meeting:
        def __init__(self, broken=False):
            self.broken, self.flushed = broken, False

        def flush(self):
            together.wait()
            if self.broken:
                raise OSError(5, "Input/output error")
            self.flushed = True

    group = GroupCommit(threads=4)
    logs = [Meeting() for _ in range(4)]
    await group.flush(logs)
    assert all(log.flushed for log in logs) and group.flushes == 1
    logs = [Meeting() for _ in range(3)] + [Meeting(broken=True)]
    with pytest.raises(OSError, match="Input/output"):
        await group.flush(logs)
    assert all(log.flushed for log in logs[:3])
    await group.close()


async def test_large_frames_grow_their_buffer_and_arrive_whole():
    handler = Echo()
    server, router, port = await start(handler, max_frame=16 << 20, per_connection=64 << 20)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        rng = random.Random(3)
        sent = [payload(0, i, size=5) + rng.randbytes(n - 5) for i, n in enumerate([3_000_001, 1 << 20, 5_555_555])]
        for p in sent:
            writer.write(frame(p))
        got = await asyncio.wait_for(read_frames(reader, 3), 30)
        assert got == sent
        writer.close()
    finally:
        server.close()
        await router.close()


async def test_an_announced_large_frame_holds_memory_only_for_bytes_sent():
    import tracemalloc

    handler = Echo()
    server, router, port = await start(handler, max_frame=100 << 20)
    try:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 100 << 20) + b"x" * (300 * 1024))  # announce 100 MiB, send 300 KiB
        await writer.drain()
        await asyncio.sleep(0.2)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert held < 8 << 20, f"{held} bytes held for a frame that sent 300 KiB"
        writer.close()
    finally:
        server.close()
        await router.close()
