"""Handler queues: in-order processing per connection, without waiting for completion.

How this works
--------------
Each connection keeps the requests it has read in its own queue (``connection.requests``).
A connection with requests waiting is scheduled on handler queue ``connection.id % queues``.
A handler queue that gets a connection while idle is drained in the event loop's next pass
(``call_soon``: no task or future per wakeup), one request of the first connection at a time,
that connection put back at the end if it has more; after 64 requests the rest waits for the
next pass, so other queues and the network get a turn. A connection always lands in the same
queue, so its requests are handled one after another in arrival order, while different
connections spread over the queues and take turns within one.

A connection that is not ``writable`` (its client has not taken enough of its responses) is
not scheduled: its requests wait, unhandled, until the responses drain and the connection
asks to be scheduled again (``schedule``). So a client that does not read stalls only itself.

``Handler.handle(request)`` does the ordering-relevant work synchronously (decode, validate,
assign offsets, append to the page cache) and returns one of:

* a list of chunks: the complete response, written as soon as every earlier response on
  the connection has been. A chunk is bytes-like, or a file chunk (``fd``, ``position``,
  ``length``) sent from the file with ``os.sendfile`` (writer.py), whose file must stay
  readable until the response's ``on_sent``, so it comes in a ``Response``;
* ``None``: the request has no response (an acks=0 produce);
* an awaitable of either: the response completes later (after the flush stage made the data
  durable, or when a long-polling fetch has data). The queue does not wait for it and moves
  on to the next request at once: this is what keeps a connection pipelined;
* a ``Response``: chunks plus ``on_sent``, called once they have left through the socket
  (or the connection closed), to release memory reserved for them.

A handler that returns without raising has accepted the request's header: the connection may
then send frames up to the full size limit (``Connection.accepted``). Raising
``CloseConnection`` closes the connection, as Kafka does for requests it cannot parse.
``watch_idle`` closes connections idle for longer than a limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger(__name__)

Chunks = list  # bytes-like objects and file chunks, written by the connection's ResponseWriter


class Response(NamedTuple):
    """Response chunks, and what to call once they have left through the socket."""

    chunks: Chunks
    on_sent: Callable[[], None]


Outcome = Chunks | Response | None | Awaitable[Chunks | Response | None]


class CloseConnection(Exception):
    """Raised by a handler to close the connection the request came from."""


@dataclass(slots=True)
class Request:
    """A request frame (without its size prefix) and where it came from."""

    connection: Connection
    seq: int
    frame: bytearray

    def expect(self, size: int) -> None:
        """The response may hold up to ``size`` bytes in memory: count them as the connection's
        unsent response bytes from now until it completes, so that none of the connection's
        next requests is handled while that is over its limit."""
        self.connection.expect(self.seq, size)


class Handler(Protocol):
    def handle(self, request: Request) -> Outcome: ...

    def connection_closed(self, connection: Connection) -> None: ...


class Router:
    """Routes requests to ``queues`` handler queues by connection id."""

    def __init__(self, handler: Handler, queues: int = 4) -> None:
        self._handler = handler
        self._loop = asyncio.get_running_loop()
        self._queues: list[deque[Connection]] = [deque() for _ in range(queues)]
        self._draining = [False] * queues  # a drain of the queue is due in the loop's next pass
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self.connections: set[Connection] = set()
        self._pending: set[asyncio.Future] = set()

    def opened(self, conn: Connection) -> None:
        self.connections.add(conn)

    def closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._handler.connection_closed(conn)

    def submit(self, conn: Connection, seq: int, frame: bytearray) -> None:
        conn.requests.append(Request(conn, seq, frame))
        self.schedule(conn)

    def schedule(self, conn: Connection) -> None:
        """Put ``conn`` in its handler queue if it has requests waiting and may answer them."""
        if conn.scheduled or not conn.requests or not conn.writable:
            return
        conn.scheduled = True
        i = conn.id % len(self._queues)
        self._queues[i].append(conn)
        if not self._draining[i]:
            self._draining[i] = True
            self._loop.call_soon(self._drain, i)

    @property
    def queued(self) -> int:
        return sum(len(conn.requests) for conn in self.connections)

    def queue_depths(self) -> list[int]:
        """Requests read and waiting for their handler, per handler queue."""
        depths = [0] * len(self._queues)
        for conn in list(self.connections):
            depths[conn.id % len(depths)] += len(conn.requests)
        return depths

    def _drain(self, i: int) -> None:
        queue = self._queues[i]
        handled = 0
        while queue and handled < 64 and not self._closed:
            conn = queue.popleft()
            conn.scheduled = False
            if conn.closed or not conn.requests:
                continue
            if conn.writable:
                self._handle(conn.requests.popleft())
                self.schedule(conn)
            handled += 1
        if queue and not self._closed:
            self._loop.call_soon(self._drain, i)  # the rest in the next pass
        else:
            self._draining[i] = False

    def _handle(self, request: Request) -> None:
        conn = request.connection
        try:
            outcome = self._handler.handle(request)
        except CloseConnection as e:
            log.info("closing %s: %s", conn.peer, e)
            conn.close()
            return
        except Exception:
            log.exception("closing %s: request handler failed", conn.peer)
            conn.close()
            return
        conn.accepted()
        if outcome is None or isinstance(outcome, (list, Response)):
            conn.complete(request.seq, outcome)
            return
        future = asyncio.ensure_future(outcome)
        self._pending.add(future)
        future.add_done_callback(lambda f: self._completed(request, f))

    def _completed(self, request: Request, future: asyncio.Future) -> None:
        self._pending.discard(future)
        conn = request.connection
        if future.cancelled():
            conn.close()
            return
        exc = future.exception()
        if exc is not None:
            if not isinstance(exc, CloseConnection):
                log.error("closing %s: request failed", conn.peer, exc_info=exc)
            conn.close()
            return
        conn.complete(request.seq, future.result())

    def watch_idle(self, idle_ms: int) -> None:
        """Close connections with nothing in flight and no traffic for ``idle_ms``."""
        self._tasks.append(
            asyncio.get_running_loop().create_task(self._close_idle(idle_ms / 1000), name="idle")
        )

    async def _close_idle(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(max(idle_s / 10, 0.05), 30.0))
            cutoff = time.monotonic() - idle_s
            for conn in [c for c in self.connections if c.active_at < cutoff and c.idle]:
                log.info("closing %s: idle for more than %.0f ms", conn.peer, idle_s * 1000)
                conn.close()

    async def drain(self, timeout: float) -> None:
        """Stop reading requests; wait until those read are handled and answered."""
        for conn in self.connections:
            conn.stop_reading()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self.queued or self._pending) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
