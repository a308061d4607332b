"""One client connection to a broker, without I/O: requests in, bytes out; bytes in, responses out.

How this works
--------------
``ClientConnection`` holds what a Kafka client knows about one of its connections and nothing
else: it opens no socket and reads none. ``request(api_key, version, message)`` returns the
bytes of a request frame for the caller to write: the 4-byte size, the request header (v1, or
v2 for a flexible version) with the next correlation id and the connection's client id, then
the encoded body (``message`` is a request message, or its body already encoded). The request
is remembered as pending, with its API key and version, unless no response will come: a
Produce with acks=0 gets none. ``receive_data(data)`` takes the bytes the caller read, in any
split (a byte at a time, several frames at once), and returns the responses they complete, in
order, as ``Response`` events.

A broker answers the requests of a connection in the order they came, so the pending requests
form a queue: several may be pending at once (pipelining), and each response frame must carry
the correlation id of the oldest. A response for no pending request, or one that overtakes an
older request, is a broken stream: ``StreamError``. So is a frame size below 4 bytes (no room
for a correlation id) or over ``max_response_bytes``, raised as soon as the 4 size bytes are
in, before anything is buffered for the frame. After a ``StreamError`` the connection is of no
more use (every later call raises again): close its socket. ``StreamError`` is a
``ConnectionError``, so a caller that drops a connection on ``OSError`` drops this one too.

Each response's header is read (v0; v1 with its tagged fields for a flexible version, except
ApiVersions, which always answers with v0) and its body decoded with the codec into the
response message. A request made with ``raw=True`` is answered without decoding its body: the
event carries the frame and the offset where the body starts, for callers that walk the bytes
themselves. A body that does not decode is reported on its event (``error``, a
``DecodeError``), not raised: the frames around it are whole and the connection can go on.

Copies: a frame that arrives whole in one ``data`` is sliced out of it once (not at all when
``data`` is exactly the frame, as bytes); a frame that arrives in pieces is gathered in a
bytearray that becomes the event's frame. A caller that reads ``bytes_expected`` bytes at a
time (the rest of the size prefix, then the rest of the frame) gets every frame without a copy.
A caller that reads into buffers (asyncio's ``BufferedProtocol``) asks ``get_buffer`` where the
next bytes go and tells ``buffer_updated`` how many came, instead of calling ``receive_data``:
the size prefix goes into a 4-byte buffer, and each frame into a bytearray of its size, made
once the size is in and checked; the socket's bytes are then copied once, into the frame.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, NamedTuple, cast

from headrace.record_format import CorruptRecordError, read_uvarint

from .api import ApiKey, decode_response, encode_message, is_flexible, request_class
from .codec import DecodeError, EncodeError
from .headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_is_flexible,
)

__all__ = ["MAX_RESPONSE_BYTES", "ClientConnection", "Response", "StreamError", "request_frame"]

MAX_RESPONSE_BYTES = 64 << 20
_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_BUFFERS = (bytes, bytearray, memoryview)


class StreamError(ConnectionError):
    """The broker's bytes break Kafka's framing: a frame size out of bounds, or a correlation
    id that no pending request has, or not the oldest's. The connection cannot go on.

    ``responses``: the responses completed by the same ``receive_data`` call before the
    violation, in order (their requests were answered)."""

    def __init__(self, message: str, responses: list[Response] | None = None) -> None:
        super().__init__(message)
        self.responses: list[Response] = responses or []


class Response(NamedTuple):
    """One response frame, matched to its request.

    ``message`` is the decoded response (None for a ``raw`` request, or when ``error`` is
    set); ``frame`` the bytes after the size prefix (bytes or bytearray), the header first;
    ``body_offset`` where the body starts in it; ``error`` the ``DecodeError`` of a header or
    body that did not decode."""

    correlation_id: int
    api_key: int
    api_version: int
    message: Any
    frame: bytes | bytearray
    body_offset: int
    error: DecodeError | None = None


def request_frame(
    api_key: int, version: int, correlation_id: int, client_id: str | None, message: Any
) -> bytes:
    """A whole request frame: size, header, body. ``message``: a request message of
    ``api_key``, or its body already encoded (bytes-like, written as it is)."""
    header = encode_request_header(RequestHeader(api_key, version, correlation_id, client_id))
    if isinstance(message, _BUFFERS):
        return b"".join((_SIZE.pack(len(header) + len(message)), header, message))
    cls = request_class(api_key)
    if type(message) is not cls:
        raise EncodeError(f"expected a {cls.__name__}, got {type(message).__name__}")
    chunks = encode_message(message, version)
    size = len(header) + sum(len(c) for c in chunks)
    return b"".join((_SIZE.pack(size), header, *chunks))


class ClientConnection:
    """The client side of one connection: correlation ids, pending requests, response framing.

    ``client_id`` goes in every request header; ``max_response_bytes`` bounds a response frame
    (its size prefix not counted)."""

    def __init__(
        self, client_id: str | None = "headrace", *, max_response_bytes: int = MAX_RESPONSE_BYTES
    ) -> None:
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self.correlation_id = 0  # the last request's (0: none yet)
        # (correlation id, api key, version, flexible response header, raw), oldest first
        self._pending: deque[tuple[int, int, int, bool, bool]] = deque()
        self._head = bytearray()  # the size prefix read so far
        self._size = -1  # the size of the frame being read (-1: reading a size prefix)
        self._body = bytearray()  # the frame read so far, when it came in pieces
        self._prefix = bytearray(4)  # get_buffer's size prefix
        self._into: memoryview | None = None  # get_buffer's buffer being filled (prefix or frame)
        self._filled = 0  # bytes in it
        self._broken: str | None = None

    @property
    def in_flight(self) -> int:
        """Requests sent that still wait for their response."""
        return len(self._pending)

    @property
    def bytes_expected(self) -> int:
        """How many bytes complete what is being read: the rest of the size prefix, or the
        rest of the frame."""
        if self._size < 0:
            return 4 - len(self._head)
        return self._size - len(self._body)

    def request(
        self,
        api_key: int,
        version: int,
        message: Any,
        *,
        raw: bool = False,
        expect_response: bool | None = None,
    ) -> bytes:
        """The bytes of a request frame for ``message`` (a request message, or its encoded
        body) with the next correlation id (``correlation_id`` afterwards).

        ``raw``: its response event keeps the body undecoded. ``expect_response``: whether
        the broker will answer; None: yes, except for a Produce with acks=0."""
        self._check()
        correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        data = request_frame(api_key, version, correlation_id, self.client_id, message)
        self.correlation_id = correlation_id
        if expect_response is None:
            expect_response = api_key != ApiKey.PRODUCE or _produce_acks(version, message) != 0
        if expect_response:
            flexible = response_header_is_flexible(api_key, version)
            self._pending.append((correlation_id, api_key, version, flexible, raw))
        return data

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Response]:
        """The responses ``data`` completes (none while a frame is still partial), oldest
        first. Raises ``StreamError`` when the stream breaks Kafka's framing."""
        self._check()
        responses: list[Response] = []
        view = memoryview(data)
        pos, end = 0, len(view)
        try:
            while pos < end:
                size = self._size
                if size < 0:  # a size prefix
                    head = self._head
                    if head or end - pos < 4:
                        take = min(4 - len(head), end - pos)
                        head += view[pos : pos + take]
                        pos += take
                        if len(head) < 4:
                            break
                        (size,) = _SIZE.unpack(head)
                        head.clear()
                    else:
                        (size,) = _SIZE.unpack_from(view, pos)
                        pos += 4
                    self._check_size(size)
                    self._size = size
                body = self._body
                if not body and end - pos >= size:  # the whole frame is here
                    if pos == 0 and size == end and type(data) is bytes:
                        frame: bytes | bytearray = data
                    else:
                        frame = bytes(view[pos : pos + size])
                    pos += size
                else:
                    take = min(size - len(body), end - pos)
                    body += view[pos : pos + take]
                    pos += take
                    if len(body) < size:
                        break
                    frame, self._body = body, bytearray()
                self._size = -1
                responses.append(self._response(frame))
        except StreamError as e:
            e.responses = responses
            raise
        finally:
            view.release()
        return responses

    def get_buffer(self) -> memoryview:
        """Where the next bytes read go (read into buffers, not with ``receive_data``): the
        rest of the size prefix, or the rest of the frame. ``buffer_updated`` takes the count."""
        self._check()
        if self._into is None:
            self._into = memoryview(self._prefix)
        return self._into[self._filled :]

    def buffer_updated(self, nbytes: int) -> list[Response]:
        """The responses the ``nbytes`` just read into ``get_buffer``'s buffer complete (one at
        most). Raises ``StreamError`` when the stream breaks Kafka's framing."""
        self._check()
        into = self._into
        assert into is not None, "get_buffer first"
        self._filled += nbytes
        if self._filled < len(into):
            return []
        self._filled = 0
        if into.obj is self._prefix:
            (size,) = _SIZE.unpack(self._prefix)
            self._check_size(size)  # before anything is allocated for the frame
            self._into = memoryview(bytearray(size))
            return []
        self._into = None
        return [self._response(cast(bytearray, into.obj))]

    def _check(self) -> None:
        if self._broken is not None:
            raise StreamError(f"the connection is broken: {self._broken}")

    def _violation(self, what: str) -> StreamError:
        self._broken = what
        return StreamError(what)

    def _check_size(self, size: int) -> None:
        if size < 4:
            raise self._violation(f"a response frame of {size} bytes (no correlation id)")
        if size > self.max_response_bytes:
            raise self._violation(
                f"a response frame of {size} bytes (limit {self.max_response_bytes})"
            )

    def _response(self, frame: bytes | bytearray) -> Response:
        (correlation_id,) = _SIZE.unpack_from(frame)
        pending = self._pending
        if not pending or pending[0][0] != correlation_id:
            if any(p[0] == correlation_id for p in pending):
                raise self._violation(
                    f"a response to correlation id {correlation_id} before that of"
                    f" {pending[0][0]}, sent earlier (out of order)"
                )
            raise self._violation(
                f"a response to correlation id {correlation_id}, which no request is waiting for"
            )
        _, api_key, version, flexible, raw = pending.popleft()
        offset = 4
        try:
            if flexible:
                _, offset = decode_response_header(frame, True)
            message = None if raw else decode_response(api_key, version, frame, offset)
        except DecodeError as e:
            return Response(correlation_id, api_key, version, None, frame, offset, e)
        return Response(correlation_id, api_key, version, message, frame, offset)


def _produce_acks(version: int, message: Any) -> int:
    """The acks of a Produce request, from the message or from its encoded body (after the
    transactional id, which v3 added)."""
    if not isinstance(message, _BUFFERS):
        return message.acks
    pos = 0
    try:
        if version >= 3 and is_flexible(ApiKey.PRODUCE, version):
            length, pos = read_uvarint(message, 0)  # compact nullable string: length + 1
            pos += max(length - 1, 0)
        elif version >= 3:
            (length,) = _INT16.unpack_from(message, 0)
            pos = 2 + max(length, 0)
        return _INT16.unpack_from(message, pos)[0]
    except (struct.error, CorruptRecordError):
        return -1  # not a Produce body the codec would write: the broker will answer or close
