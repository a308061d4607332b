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
connection and one reader task matches each response frame to its request by correlation id.
The framing is ``headrace.protocol.client``'s: each socket has a ``ClientConnection`` that
makes the request bytes and turns the bytes read back into responses; the reader task reads
what it says is missing (the size prefix, then the rest of the frame) and hands each response
to the request waiting for it.

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
from headrace.protocol.client import ClientConnection, Response, StreamError

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
        return 0 if conn is None else len(conn.waiting)

    async def close(self) -> None:
        """Close every connection (and every channel's) and fail what waits on them."""
        channels, self._channels = self._channels, []
        for channel in channels:
            await channel.close()
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.fail(NetworkError("the broker client is closed"))
        for conn in connections:
            await conn.closed()


@dataclass
class _Peers:
    """How to reach the other brokers (one for a client and all its channels)."""

    address_of: Callable[[int], Address | None]
    security: ClientSecurity


class _Connection:
    """One socket to one node, with its reader task and the requests waiting on it."""

    def __init__(self, client: BrokerClient, node_id: int) -> None:
        self.client = client
        self.node_id = node_id
        self.slots = asyncio.Semaphore(client.max_in_flight)
        self.connecting = asyncio.Lock()
        self.writer: asyncio.StreamWriter | None = None
        self.wire: ClientConnection | None = None  # the socket's framing and correlation ids
        self.reader_task: asyncio.Task | None = None
        self.waiting: dict[int, asyncio.Future] = {}  # correlation id -> the caller's future
        self.correlation_id = 0  # the last one sent: a new socket goes on from it

    async def request(self, api_key: int, version: int, message):
        body = encode_request(api_key, version, message)  # before taking a slot: may raise
        async with self.slots:
            writer, wire = await self._connected()
            data = wire.request(api_key, version, body)
            cid = self.correlation_id = wire.correlation_id
            future = asyncio.get_running_loop().create_future()
            self.waiting[cid] = future
            try:
                writer.write(data)
                await writer.drain()
                return await future
            except NetworkError:
                raise
            except OSError as e:
                self.fail(NetworkError(f"node {self.node_id}: {e}"), writer)
                raise NetworkError(f"node {self.node_id}: {e}") from None
            except asyncio.CancelledError:
                # timed out (or the caller stopped) after sending: the answer may still come,
                # and the remote may still be busy with it; start afresh
                self.fail(RequestTimedOut(f"node {self.node_id}: request abandoned"), writer)
                raise
            finally:
                if self.waiting.get(cid) is future:
                    del self.waiting[cid]
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved, whichever way this ended

    async def _connected(self) -> tuple[asyncio.StreamWriter, ClientConnection]:
        async with self.connecting:
            if self.writer is not None and self.wire is not None and not self.writer.is_closing():
                return self.writer, self.wire
            address = self.client.address_of(self.node_id)
            if address is None:
                raise NetworkError(f"no address for node {self.node_id}")
            host, port = address
            security = self.client.security
            wire = ClientConnection(
                self.client.client_id, max_response_bytes=self.client.max_response_bytes
            )
            wire.correlation_id = self.correlation_id
            try:
                async with asyncio.timeout(self.client.connect_timeout):
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=security.tls, server_hostname=host if security.tls else None
                    )
                    try:
                        if security.mechanism:
                            await self._authenticate(reader, writer, wire, security)
                    except BaseException:
                        writer.close()
                        raise
            except (OSError, TimeoutError) as e:
                where = f"node {self.node_id} at {host}:{port}"
                raise NetworkError(f"cannot connect to {where}: {e!r}") from None
            self.writer, self.wire = writer, wire
            self.reader_task = asyncio.create_task(self._read(reader, writer, wire))
            return writer, wire

    async def _authenticate(
        self, reader, writer, wire: ClientConnection, security: ClientSecurity
    ) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism is done."""

        async def call(api_key: int, version: int, message):
            writer.write(wire.request(api_key, version, message))
            self.correlation_id = wire.correlation_id
            await writer.drain()
            responses: list[Response] = []
            try:
                while not responses:
                    responses = wire.receive_data(await reader.readexactly(wire.bytes_expected))
            except StreamError as e:
                raise NetworkError(f"node {self.node_id} sent {e}") from None
            except asyncio.IncompleteReadError:
                raise NetworkError(f"node {self.node_id} closed the connection") from None
            (answer,) = responses
            if answer.error is not None:
                raise NetworkError(f"malformed response from node {self.node_id}: {answer.error}")
            response = answer.message
            if response.error_code:
                log.warning(
                    "node %d refused %s authentication as %s on the inter-broker listener %s"
                    " (error %d): check its sasl.jaas.config and the user",
                    self.node_id,
                    security.mechanism,
                    security.username,
                    security.listener,
                    response.error_code,
                )
                raise NetworkError(
                    f"node {self.node_id} refused {security.mechanism} authentication as"
                    f" {security.username} (error {response.error_code}:"
                    f" {getattr(response, 'error_message', None) or ''})"
                )
            return response

        mechanism = security.mechanism
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
            raise NetworkError(f"SCRAM with node {self.node_id} failed: {e}") from None

    async def _read(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wire: ClientConnection
    ) -> None:
        error: NetworkError
        try:
            while True:
                # exactly what completes the size prefix or the frame: the frame is not copied
                data = await reader.readexactly(wire.bytes_expected)
                for response in wire.receive_data(data):
                    self._deliver(response)
        except StreamError as e:  # a frame over the limit, a correlation id out of order
            for response in e.responses:
                self._deliver(response)
            error = NetworkError(f"node {self.node_id} sent {e}")
        except (asyncio.IncompleteReadError, OSError) as e:
            error = NetworkError(f"connection to node {self.node_id} lost: {e!r}")
        except asyncio.CancelledError:
            error = NetworkError(f"connection to node {self.node_id} closed")
        self.fail(error, writer)

    def _deliver(self, response: Response) -> None:
        future = self.waiting.get(response.correlation_id)
        if future is None or future.done():
            return  # its request gave up (the connection is being closed)
        if response.error is not None:
            future.set_exception(
                NetworkError(f"malformed response from node {self.node_id}: {response.error}")
            )
        else:
            future.set_result(response.message)

    def fail(self, error: NetworkError, writer: asyncio.StreamWriter | None = None) -> None:
        """Close the socket and fail every request waiting on it. With ``writer``: only if
        that is still the current socket (a new one may have been opened since)."""
        if writer is not None and writer is not self.writer:
            writer.close()
            return
        writer, self.writer, self.wire = self.writer, None, None
        if writer is not None:
            writer.close()
        task = self.reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for future in list(self.waiting.values()):
            if not future.done():
                future.set_exception(error)

    async def closed(self) -> None:
        task = self.reader_task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
