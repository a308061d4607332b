"""A blocking connection to a broker: a socket driven by ``headrace.protocol.client``.

How this works
--------------
``BlockingConnection(sock)`` takes a connected socket (plain or TLS, with the timeout the caller
gave it); ``BlockingConnection.connect(host, port, timeout)`` opens one. ``request(api_key,
version, message)`` writes one request and reads until its response is whole, and returns the
decoded response. ``send`` and ``receive`` are the two halves, for pipelining (several sends,
then as many receives: a broker answers in order) and for raw frames (``send(..., raw=True)``:
the ``Response`` keeps the body undecoded). The framing, the correlation ids and the bound on a
response frame (``max_response_bytes``, checked before the frame is read) are the
``ClientConnection``'s; this module only moves bytes, reading up to 64 KiB at a time.

Errors: ``OSError`` from the socket (``TimeoutError`` after its timeout); ``ConnectionError``
when the broker closes the connection, and ``StreamError`` (a ``ConnectionError``) when its
bytes break Kafka's framing: close the connection after either. ``DecodeError`` from
``request`` when a response does not decode; the connection can go on.
"""

from __future__ import annotations

import socket
from collections import deque
from typing import Any

from headrace.protocol.client import MAX_RESPONSE_BYTES, ClientConnection, Response

READ_SIZE = 64 << 10


class BlockingConnection:
    """One socket to one broker, requests answered in the order they were sent."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        client_id: str | None = "headrace",
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.sock = sock
        self.wire = ClientConnection(client_id, max_response_bytes=max_response_bytes)
        self._received: deque[Response] = deque()

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        timeout: float,
        *,
        client_id: str | None = "headrace",
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> BlockingConnection:
        """A new PLAINTEXT connection to ``host:port`` (an IPv6 host may be in brackets)."""
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout)
        return cls(sock, client_id=client_id, max_response_bytes=max_response_bytes)

    def request(self, api_key: int, version: int, message: Any) -> Any:
        """Send ``message`` and return its decoded response (None for a Produce with acks=0,
        which gets none). Nothing else may be in flight."""
        if self.in_flight:
            raise RuntimeError(f"{self.in_flight} requests in flight: use send and receive")
        self.send(api_key, version, message)
        if not self.in_flight:
            return None
        response = self.receive()
        if response.error is not None:
            raise response.error
        return response.message

    def send(
        self,
        api_key: int,
        version: int,
        message: Any,
        *,
        raw: bool = False,
        expect_response: bool | None = None,
    ) -> int:
        """Write a request (``ClientConnection.request``); its correlation id."""
        self.sock.sendall(
            self.wire.request(api_key, version, message, raw=raw, expect_response=expect_response)
        )
        return self.wire.correlation_id

    def receive(self) -> Response:
        """The response to the oldest request still waiting, read as far as it takes."""
        while not self._received:
            if not self.wire.in_flight:
                raise RuntimeError("no request is waiting for a response")
            data = self.sock.recv(READ_SIZE)
            if not data:
                raise ConnectionError("connection closed by the broker")
            self._received.extend(self.wire.receive_data(data))
        return self._received.popleft()

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses ``receive`` has not returned yet."""
        return self.wire.in_flight + len(self._received)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
