"""The request path: framing, handler queues, the flush stage and ordered responses.

``serve(handler, host, port, limits)`` listens for Kafka clients; each frame goes to a
handler queue chosen by connection id (``Router``), and responses go back in request order
per connection (``Connection``). This package knows nothing of Kafka APIs or storage: it
calls the ``Handler`` it is given.

Files, in reading order:

* ``router.py``: handler queues, what a handler returns, idle connections closed.
* ``connection.py``: framing, receive buffers, ordered responses, backpressure on both sides.
* ``limits.py``: ``Limits``, every cap of the request path and the broker-wide counters
  (request bytes in flight, connections per address).
* ``budget.py``: ``ByteBudget``, broker-wide bytes reserved before memory is used (fetch
  responses) and released once the response has left.
* ``flush.py``: ``GroupCommit``, the flush stage.
"""

from __future__ import annotations

import asyncio

from .budget import ByteBudget, Reservation
from .connection import Connection
from .flush import GroupCommit
from .limits import Limits
from .router import CloseConnection, Handler, Request, Response, Router

__all__ = [
    "ByteBudget",
    "CloseConnection",
    "Connection",
    "GroupCommit",
    "Handler",
    "Limits",
    "Request",
    "Reservation",
    "Response",
    "Router",
    "serve",
]


async def serve(
    handler: Handler, host: str, port: int, limits: Limits, queues: int = 4
) -> tuple[asyncio.Server, Router]:
    """Start listening; returns the server and its router (for draining on shutdown)."""
    router = Router(handler, queues)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(router, limits), host, port, reuse_address=True, backlog=1024
    )
    if limits.idle_ms is not None and limits.idle_ms > 0:
        router.watch_idle(limits.idle_ms)
    return server, router
