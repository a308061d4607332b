"""The request path: framing, handler queues, the flush stage and ordered responses.

``serve(handler, host, port, limits)`` listens for Kafka clients; each frame goes to a
handler queue chosen by connection id (``Router``), and responses go back in request order
per connection (``Connection``). ``GroupCommit`` is the flush stage. This package knows
nothing of Kafka APIs or storage: it calls the ``Handler`` it is given.
"""

from __future__ import annotations

import asyncio

from .connection import Connection, Limits
from .flush import GroupCommit
from .router import CloseConnection, Handler, Request, Router

__all__ = [
    "CloseConnection",
    "Connection",
    "GroupCommit",
    "Handler",
    "Limits",
    "Request",
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
    return server, router
