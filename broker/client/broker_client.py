"""The client one broker uses to send requests to another (WriteTxnMarkers, replica fetches).

How this works
--------------
``BrokerClient`` keeps at most one connection per remote node, opened on first use at the
address ``address_of(node_id)`` gives (the cluster's broker registry; ``None``: unknown node).

Each kind of traffic has a client of its own, made with ``channel(name)``: its own connections,
with the same address book, security and limits (as Kafka's replica fetcher threads, its
transaction marker channel and its controller channel each have their own). They must not
share a connection: a broker answers a connection's requests in the order they came, so a
request that waits for something another kind carries would hold that answer behind itself.
A transaction marker waits until its partition's ISR has fetched it; if the marker and the
coordinator broker's own replica fetches went over one connection, the fetch answer carrying
the marker would queue behind the marker's answer until the marker timed out.
``send(node_id, api_key, version, message, timeout)`` encodes the request with the next
correlation id, writes it and waits for its response; requests are pipelined on the
connection, and each response frame goes to its request by correlation id. The framing is
``headrace.protocol.client``'s: each socket has a ``ClientConnection`` that makes the request
bytes and turns the bytes read back into responses. The socket's protocol (``_Socket``, an
asyncio ``BufferedProtocol``) has the event loop read into the buffers the
``ClientConnection`` gives (the size prefix, then a frame of that size), so each byte a leader
sends (a replica fetch's records) is copied once, from the kernel into its frame, and the
decoded records are slices of that frame.

Bounds: at most ``max_in_flight`` requests wait on a connection (the others wait for a slot,
within their timeout); a response frame's length is checked against ``max_response_bytes``
before anything is read or allocated for it (over it, or a correlation id out of order: the
connection is closed and every request on it fails).

Failures raise ``NetworkError``: no address, the connection refused, lost or closed, a frame
over the limit, or the timeout (``RequestTimedOut``). A lost connection fails every request
waiting on it; a timed-out request closes its connection too (its answer could still arrive,
and the correlation id would then be stale), as Kafka's clients do. The next ``send`` to that
node connects again. Versions are fixed by the caller (one that Headrace serves): no
ApiVersions exchange. ``close`` (at broker stop) closes every connection and fails what waits.

Security (inter_broker.py's ``ClientSecurity``): on a TLS inter-broker listener the connection
is TLS from the start; on a SASL one, SaslHandshake (v1) and SaslAuthenticate (v2) run on the
new connection before its first request, within the connect timeout, with PLAIN or SCRAM
(scramp's client). A refused authentication is a ``NetworkError`` like a refused connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from headrace.protocol import ApiKey, encode_request, messages
from headrace.protocol.client import ClientConnection, StreamError

from .inter_broker import ClientSecurity

log = logging.getLogger("headrace.broker_client")

Address = tuple[str, int]
MAX_IN_FLIGHT = 16
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0


class NetworkError(ConnectionError):
    """The request could not be sent or its response not received."""


class RequestTimedOut(NetworkError):
    """No response within the request's timeout."""


class BrokerClient:
    def __init__(
        self,
        address_of: Callable[[int], Address | None],
        *,
        client_id: str = "headrace-broker",
        max_in_flight: int = MAX_IN_FLIGHT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        # shared with every channel: set ``address_of`` or ``security`` on any, all follow
        self._peers = _Peers(address_of, security or ClientSecurity())
        self._channels: list[BrokerClient] = []
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.max_response_bytes = max_response_bytes
        self.connect_timeout = connect_timeout
        self._connections: dict[int, _Connection] = {}
        self._closed = False

    @property
    def address_of(self) -> Callable[[int], Address | None]:
        return self._peers.address_of

    @address_of.setter
    def address_of(self, address_of: Callable[[int], Address | None]) -> None:
        self._peers.address_of = address_of

    @property
    def security(self) -> ClientSecurity:
        return self._peers.security

    @security.setter
    def security(self, security: ClientSecurity) -> None:
        self._peers.security = security

    def channel(self, name: str) -> BrokerClient:
        """A client for another kind of traffic: connections of its own, this one's address
        book, security and limits; its client id ends in ``-name``. ``close`` of this client
        closes it too."""
        other = BrokerClient(
            self.address_of,
            client_id=f"{self.client_id}-{name}",
            max_in_flight=self.max_in_flight,
            max_response_bytes=self.max_response_bytes,
            connect_timeout=self.connect_timeout,
        )
        other._peers = self._peers
        self._channels = [c for c in self._channels if not c._closed]
        self._channels.append(other)
        return other

    async def send(self, node_id: int, api_key: int, version: int, message, timeout: float):
        """The decoded response of ``message`` sent to ``node_id``; ``NetworkError`` if none."""
        if self._closed:
            raise NetworkError("the broker client is closed")
        conn = self._connections.get(node_id)
        if conn is None:
            conn = self._connections[node_id] = _Connection(self, node_id)
        try:
            async with asyncio.timeout(timeout):
                return await conn.request(api_key, version, message)
        except TimeoutError:
            raise RequestTimedOut(f"no response from node {node_id} in {timeout:.1f} s") from None

    def disconnect(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (its address changed, or it left)."""
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.fail(NetworkError(f"disconnected from node {node_id}"))

    def in_flight(self, node_id: int) -> int:
        """Requests sent to ``node_id`` and not answered yet."""
        conn = self._connections.get(node_id)
        sock = None if conn is None else conn.socket
        return 0 if sock is None else len(sock.waiting)

    async def close(self) -> None:
        """Close every connection (and every channel's) and fail what waits on them."""
        channels, self._channels = self._channels, []
        for channel in channels:
            await channel.close()
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.fail(NetworkError("the broker client is closed"))


@dataclass
class _Peers:
    """How to reach the other brokers (one for a client and all its channels)."""

    address_of: Callable[[int], Address | None]
    security: ClientSecurity


class _Connection:
    """The socket to one node (a new one once the last is lost) and the requests' slots."""

    def __init__(self, client: BrokerClient, node_id: int) -> None:
        self.client = client
        self.node_id = node_id
        self.slots = asyncio.Semaphore(client.max_in_flight)
        self.connecting = asyncio.Lock()
        self.socket: _Socket | None = None

    async def request(self, api_key: int, version: int, message):
        body = encode_request(api_key, version, message)  # before taking a slot: may raise
        async with self.slots:
            return await (await self._connected()).exchange(api_key, version, body)

    async def _connected(self) -> _Socket:
        async with self.connecting:
            last = self.socket
            if last is not None and last.error is None:
                return last
            address = self.client.address_of(self.node_id)
            if address is None:
                raise NetworkError(f"no address for node {self.node_id}")
            host, port = address
            security = self.client.security
            wire = ClientConnection(
                self.client.client_id, max_response_bytes=self.client.max_response_bytes
            )
            if last is not None:  # correlation ids go on from the last socket's
                wire.correlation_id = last.wire.correlation_id
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(self.client.connect_timeout):
                    _, sock = await loop.create_connection(
                        lambda: _Socket(self.node_id, wire),
                        host,
                        port,
                        ssl=security.tls,
                        server_hostname=host if security.tls else None,
                    )
                    try:
                        if security.mechanism:
                            await _authenticate(sock, security)
                    except BaseException:
                        sock.close(NetworkError(f"node {self.node_id}: authentication stopped"))
                        raise
            except (OSError, TimeoutError) as e:
                where = f"node {self.node_id} at {host}:{port}"
                raise NetworkError(f"cannot connect to {where}: {e!r}") from None
            self.socket = sock
            return sock

    def fail(self, error: NetworkError) -> None:
        """Close the socket and fail every request waiting on it (the next request opens
        another)."""
        if self.socket is not None:
            self.socket.close(error)


class _Socket(asyncio.BufferedProtocol):
    """One socket to a node. Its bytes are read straight into the response frames
    (``ClientConnection.get_buffer``: a 1 MiB replica fetch answer is copied once, from the
    kernel into its frame), and each response goes to the request waiting for it."""

    def __init__(self, node_id: int, wire: ClientConnection) -> None:
        self.node_id = node_id
        self.wire = wire  # the socket's framing and correlation ids
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future] = {}  # correlation id -> the caller's future
        self.error: NetworkError | None = None  # why the socket closed (None: open)
        self._room: asyncio.Future | None = None  # while the transport's buffer is full

    async def exchange(self, api_key: int, version: int, message):
        """Send a request (``message``, or its encoded body) and return the decoded response."""
        if self.error is not None:
            raise self.error
        try:
            data = self.wire.request(api_key, version, message)
        except OSError as e:  # (a StreamError: the stream broke before)
            error = NetworkError(f"node {self.node_id}: {e}")
            self.close(error)
            raise error from None
        cid = self.wire.correlation_id
        future = asyncio.get_running_loop().create_future()
        self.waiting[cid] = future
        try:
            assert self.transport is not None
            self.transport.write(data)
            while self._room is not None and self.error is None:
                await asyncio.shield(self._room)
            return await future
        except asyncio.CancelledError:
            # timed out (or the caller stopped) after sending: the answer may still come,
            # and the remote may still be busy with it; start afresh
            self.close(RequestTimedOut(f"node {self.node_id}: request abandoned"))
            raise
        finally:
            if self.waiting.get(cid) is future:
                del self.waiting[cid]
            if future.done() and not future.cancelled():
                future.exception()  # retrieved, whichever way this ended

    def close(self, error: NetworkError) -> None:
        """Close the socket (once) and fail every request waiting on it."""
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.close()
        for future in list(self.waiting.values()):
            if not future.done():
                future.set_exception(self.error)
        self.resume_writing()  # (writers waiting for room see the error)

    # the transport's calls

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.wire.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            responses = self.wire.buffer_updated(nbytes)
        except StreamError as e:  # a frame over the limit, a correlation id out of order
            self.close(NetworkError(f"node {self.node_id} sent {e}"))
            return
        for response in responses:
            future = self.waiting.get(response.correlation_id)
            if future is None or future.done():
                continue  # its request gave up (the socket is being closed)
            if response.error is not None:
                future.set_exception(
                    NetworkError(f"malformed response from node {self.node_id}: {response.error}")
                )
            else:
                future.set_result(response.message)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(NetworkError(f"connection to node {self.node_id} lost: {exc!r}"))

    def pause_writing(self) -> None:
        self._room = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)


async def _authenticate(sock: _Socket, security: ClientSecurity) -> None:
    """SaslHandshake, then SaslAuthenticate until the mechanism is done, on a new socket."""
    node_id, mechanism = sock.node_id, security.mechanism

    async def call(api_key: int, version: int, message):
        response = await sock.exchange(api_key, version, message)
        if response.error_code:
            log.warning(
                "node %d refused %s authentication as %s on the inter-broker listener %s"
                " (error %d): check its sasl.jaas.config and the user",
                node_id,
                mechanism,
                security.username,
                security.listener,
                response.error_code,
            )
            raise NetworkError(
                f"node {node_id} refused {mechanism} authentication as"
                f" {security.username} (error {response.error_code}:"
                f" {getattr(response, 'error_message', None) or ''})"
            )
        return response

    await call(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism=mechanism))

    async def authenticate(token: bytes) -> bytes:
        request = messages.SaslAuthenticateRequest(auth_bytes=token)
        return bytes((await call(ApiKey.SASL_AUTHENTICATE, 2, request)).auth_bytes)

    if mechanism == "PLAIN":
        await authenticate(f"\0{security.username}\0{security.password}".encode())
        return
    from scramp import ScramClient, ScramException  # (SCRAM only: a faster start)

    scram = ScramClient([mechanism], security.username, security.password)
    try:
        scram.set_server_first((await authenticate(scram.get_client_first().encode())).decode())
        scram.set_server_final((await authenticate(scram.get_client_final().encode())).decode())
    except (ScramException, UnicodeDecodeError) as e:
        raise NetworkError(f"SCRAM with node {node_id} failed: {e}") from None
