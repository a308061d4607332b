"""The request path: framing, handler queues, the flush stage and ordered responses.

``serve(handler, host, port, limits)`` listens for Kafka clients; each frame goes to a
handler queue chosen by connection id (``Router``), and responses go back in request order
per connection (``Connection``). This package knows nothing of Kafka APIs or storage: it
calls the ``Handler`` it is given.

Files, in reading order:

* ``router.py``: handler queues, what a handler returns, idle connections closed.
* ``connection.py``: framing, receive buffers, ordered responses, backpressure on both sides.
* ``writer.py``: ``ResponseWriter``, a connection's output: bytes through the transport,
  file chunks (stored records) with ``os.sendfile``, ``on_sent`` once they have left.
* ``limits.py``: ``Limits``, every cap of the request path and the broker-wide counters
  (request bytes in flight, connections per address).
* ``budget.py``: ``ByteBudget``, broker-wide bytes reserved before memory is used (fetch
  responses) and released once the response has left.
* ``append.py``: ``Appender``, the append stage: copies into the page cache in a thread.
* ``flush.py``: ``GroupCommit``, the flush stage.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module

from .append import Appender
from .budget import ByteBudget, Reservation
from .connection import Connection
from .flush import GroupCommit
from .limits import Limits
from .router import CloseConnection, Handler, Request, Response, Router

__all__ = [
    "Appender",
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
    handler: Handler,
    host: str,
    port: int,
    limits: Limits,
    queues: int = 4,
    *,
    ssl: ssl_module.SSLContext | None = None,
    listener: object = None,
    router: Router | None = None,
    start_serving: bool = True,
) -> tuple[asyncio.Server, Router]:
    """Start listening; returns the server and its router (for draining on shutdown).
    With ``start_serving=False`` the port is bound and listens, but no connection is
    accepted (they wait in the backlog) until ``server.start_serving()``.

    With ``ssl`` the connections speak TLS (the handshake happens before the first frame).
    ``listener`` is given to each connection as it is (``Connection.listener``: the handler
    tells its listeners apart by it). Several servers (one per listener) share one ``router``
    when it is given: the handler queues and the limits are the broker's, not a listener's."""
    if router is None:
        router = Router(handler, queues)
        if limits.idle_ms is not None and limits.idle_ms > 0:
            router.watch_idle(limits.idle_ms)
    shared = router
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(shared, limits, listener),
        host,
        port,
        reuse_address=True,
        backlog=1024,
        ssl=ssl,
        start_serving=start_serving,
    )
    return server, router
