"""One client connection: frames in, responses out in request order.

How this works
--------------
Kafka frames are a 4-byte big-endian size followed by that many bytes. ``Connection`` is an
asyncio ``BufferedProtocol``: the event loop reads straight into our buffers.

* Receive memory follows the bytes that arrived. An idle connection holds no receive buffer;
  when bytes come, it gets a small one (``RECEIVE_FIRST``), which doubles up to
  ``RECEIVE_MAX`` while reads fill it, and is dropped again once every byte in it has been
  taken out as a frame. A frame that does not fit in what is left of that buffer gets a
  ``bytearray`` of its own and the loop reads the rest of it directly into that, so a 1 MiB
  produce is copied from the socket once. Once the connection has sent a valid request, that
  buffer has the frame's whole size at once while the broker's request budget
  (``Limits.per_broker``) has room for it in its first half, and counts against the budget
  from then on; otherwise it starts small and quadruples as it fills, so a peer that announces
  100 MiB and sends little holds little memory.
* The size is checked before anything is allocated: below ``MIN_FRAME`` or above the limit
  closes the connection. Until the handler has accepted one request of the connection the
  limit is ``Limits.max_first_frame`` (small, as Kafka's 512 KiB before authentication) and
  only one request is read at a time (the next once this one is answered); after it,
  ``Limits.max_frame``. A handler that needs the client to authenticate first
  (``require_authentication``) keeps those limits until it says ``authenticated()``.
* Each frame gets an arrival sequence number and joins the connection's request queue, which
  the router drains; the connection does not wait for it. Responses may complete in any order:
  ``complete(seq, response)`` parks them until every earlier one has been written (a reorder
  buffer keyed by sequence number). ``None`` means "no response" (acks=0 produce) and only
  advances the sequence. A ``Response`` carries ``on_sent``, called once its bytes have left
  through the socket (or the connection closed).
* Backpressure, read side: requests read but not answered, and their bytes, are counted per
  connection, the bytes also for the whole broker (``Limits``); over a cap the connection
  stops reading.
* Writing: ``ResponseWriter`` (writer.py) sends the responses in order, bytes through the
  transport and file chunks (stored records in the page cache) with ``os.sendfile``.
* Backpressure, write side: the transport reports every partial write (high-water mark 0)
  and the moment its buffer is empty again. While the unsent responses (parked, in the
  transport's buffer, and what handled requests said their responses may take,
  ``Request.expect``; the writer's queue counts too) exceed ``Limits.response_bytes`` bytes or
  ``Limits.requests_per_connection`` responses, the connection is not ``writable``: the
  router takes none of its queued requests and it stops reading, until the client has read
  what it was sent. A client that does not read only stalls itself.
* Quotas: ``mute(seconds)`` stops reading the connection and handling its requests for that
  long (the broker's throttle time for a client over its quota; the connection is not
  ``writable`` meanwhile, so the router leaves its queued requests alone). ``hold(future)``
  does the same until a future is done: a request whose work must end before the next one's
  begins.
* Admission: ``Limits.admit`` (limits.py) counts connections in total and per peer address;
  one over a limit is accepted and closed at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from .router import Response
from .writer import ResponseWriter

if TYPE_CHECKING:
    from .limits import Limits
    from .router import Chunks, Request, Router

log = logging.getLogger(__name__)

RECEIVE_FIRST = 4 * 1024  # the receive buffer a connection gets when bytes arrive
RECEIVE_MAX = 64 * 1024  # it doubles up to this while reads fill it
FRAME_FIRST = 4 * 1024  # a frame's own buffer starts at least here, and quadruples as it fills
MIN_FRAME = 8  # api key, api version and correlation id alone take 8 bytes
_SIZE = 4

_ids = itertools.count(1)


class Connection(asyncio.BufferedProtocol):
    """A Kafka client connection (see the module docstring)."""

    __slots__ = (
        "id",
        "listener",
        "session",
        "peer",
        "host",
        "_router",
        "_limits",
        "_transport",
        "_buf",
        "_view",
        "_receive_size",
        "_start",
        "_end",
        "_frame",
        "_frame_filled",
        "_frame_size",
        "_frame_reserved",
        "_next_seq",
        "_next_write",
        "_done",
        "_parked_bytes",
        "_expected",
        "_expected_bytes",
        "_sizes",
        "_in_flight",
        "_writer",
        "_accepted",
        "_gated",
        "_reading",
        "_stopped",
        "_muted",
        "_held",
        "requests",
        "scheduled",
        "active_at",
        "closed",
    )

    def __init__(self, router: Router, limits: Limits, listener: object = None) -> None:
        self.id = next(_ids)
        self.listener = listener  # what ``serve`` was given for this socket (opaque here)
        self.session: object = None  # the handler's state for this connection
        self.peer: str = ""
        self.host: str | None = None  # the peer's address, once admitted
        self._router = router
        self._limits = limits
        self._transport: asyncio.Transport | None = None
        self._buf: bytearray | None = None  # the receive buffer, only while it holds bytes
        self._view = memoryview(b"")
        self._receive_size = RECEIVE_FIRST
        self._start = 0  # unread data is self._buf[_start:_end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being read in place
        self._frame_filled = 0
        self._frame_size = 0  # its declared size: the buffer grows towards it as bytes arrive
        self._frame_reserved = 0  # bytes of it counted in Limits.in_flight (allocated at once)
        self._next_seq = 0  # sequence number of the next request read
        self._next_write = 0  # sequence number of the next response to write
        self._done: dict[int, Response | list | None] = {}  # parked: completed out of order
        self._parked_bytes = 0
        self._expected: dict[int, int] = {}  # seq -> bytes its response may hold (Request.expect)
        self._expected_bytes = 0
        self._sizes: dict[int, int] = {}
        self._in_flight = 0
        self._writer: ResponseWriter | None = None  # set in connection_made
        self._accepted = False  # the handler has accepted one request
        self._gated = False  # the handler keeps the first-request limits until authenticated()
        self._reading = True
        self._stopped = False  # no more requests: the broker is shutting down
        self._muted: asyncio.TimerHandle | None = None  # throttled (a quota) until it fires
        self._held = 0  # requests whose work must end before the next request's begins
        self.requests: deque[Request] = deque()  # read, waiting for the router
        self.scheduled = False  # in a router queue
        self.active_at = time.monotonic()  # last traffic either way
        self.closed = False

    # asyncio protocol callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._writer = ResponseWriter(transport, self._wrote)  # type: ignore[arg-type]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        host = str(peer[0]) if peer else "?"
        refused = self._limits.admit(host)
        if refused is not None:
            self._limits.refused(self.peer, refused)
            self.closed = True
            transport.close()
            return
        self.host = host
        if self._limits.send_buffer > 0:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._limits.send_buffer)
        # pause_writing on every partial write, resume_writing once all has left
        transport.set_write_buffer_limits(high=0, low=0)  # type: ignore[attr-defined]
        self._router.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._muted is not None:
            self._muted.cancel()
            self._muted = None
        if self.host is None:
            return  # refused at admission
        self._limits.leave(self.host)
        self.host = None
        self._limits.forget(self)
        self._limits.release(self._in_flight + self._frame_reserved)
        self._in_flight = self._frame_reserved = 0
        self._sizes.clear()
        self.requests.clear()
        parked, self._done = self._done, {}
        self._parked_bytes = 0
        self._expected.clear()
        self._expected_bytes = 0
        for response in parked.values():
            if isinstance(response, Response):
                response.on_sent()
        if self._writer is not None:
            self._writer.close()
        # no references back to the transport: a TLS transport (and its buffers) goes with
        # its last reference, not at the collector's next pass, which under the broker's gc
        # thresholds can be thousands of connections later
        self._writer = self._transport = None
        self._buf = self._frame = None
        self._view = memoryview(b"")
        self._router.closed(self)

    def pause_writing(self) -> None:
        pass  # the write buffer is not empty: the writer waits for resume_writing

    def resume_writing(self) -> None:
        if self._writer is not None:
            self._writer.pump()
        self._wrote()

    def _wrote(self) -> None:
        """Bytes have left: maybe the connection may take requests again."""
        if self.closed:
            return
        self.active_at = time.monotonic()
        self._router.schedule(self)
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            if self._frame_filled == len(frame):
                # grow as bytes arrive, so memory follows what the peer really sent
                frame.extend(bytes(min(3 * len(frame), self._frame_size - len(frame))))
            return memoryview(frame)[self._frame_filled :]
        if self._buf is None:
            self._buf = bytearray(self._receive_size)
            self._view = memoryview(self._buf)
        elif self._end == len(self._buf):
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.active_at = time.monotonic()
        if self._frame is not None:
            self._frame_filled += nbytes
            if self._frame_filled == self._frame_size:
                frame, self._frame = self._frame, None
                self._limits.in_flight -= self._frame_reserved  # _dispatch counts it again
                self._frame_reserved = 0
                self._dispatch(frame)
            return
        self._end += nbytes
        if self._end == len(self._view) and self._receive_size < RECEIVE_MAX:
            self._receive_size *= 2  # reads fill the buffer: a bigger one next time
        self._parse()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # framing ------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        if buf is None:
            return
        view = self._view
        while self._reading and not self.closed and self._end - self._start >= _SIZE:
            start = self._start
            size = int.from_bytes(buf[start : start + _SIZE], "big", signed=True)
            limit = self._limits.max_frame if self._accepted else self._limits.max_first_frame
            if size < MIN_FRAME or size > limit:
                log.warning("closing %s: frame size %d out of bounds", self.peer, size)
                self.close()
                return
            available = self._end - start - _SIZE
            if available >= size:
                frame = bytearray(view[start + _SIZE : start + _SIZE + size])
                self._start = start + _SIZE + size
                self._dispatch(frame)
                continue
            if _SIZE + size > len(buf) - start:
                # does not fit in what is left of the buffer: give it a buffer of its own
                limits = self._limits
                if self._accepted and limits.in_flight + size <= limits.per_broker // 2:
                    # the broker's request budget has room: the whole frame at once, counted
                    first = size
                    limits.in_flight += size
                    self._frame_reserved = size
                else:
                    first = min(size, max(FRAME_FIRST, 2 * available))
                frame = bytearray(first)
                frame[:available] = view[start + _SIZE : self._end]
                self._frame, self._frame_filled, self._frame_size = frame, available, size
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
            self._buf, self._view = None, memoryview(b"")  # nothing left in it: drop it

    def _compact(self) -> None:
        assert self._buf is not None
        n = self._end - self._start
        if self._start == 0 or self._receive_size > len(self._buf):
            # full from the start (or reads keep filling it): a bigger buffer
            size = max(self._receive_size, 2 * len(self._buf) if self._start == 0 else 0)
            buf = bytearray(size)
            buf[:n] = self._view[self._start : self._end]
            self._buf, self._view = buf, memoryview(buf)
        else:
            self._buf[:n] = self._view[self._start : self._end]
        self._start, self._end = 0, n

    def _dispatch(self, frame: bytearray) -> None:
        seq = self._next_seq
        self._next_seq += 1
        size = len(frame)
        self._sizes[seq] = size
        self._in_flight += size
        self._limits.acquire(self, size)
        self._update_reading()
        self._router.submit(self, seq, frame)

    def expect(self, seq: int, size: int) -> None:
        """See ``Request.expect``."""
        if not self.closed and size > 0:
            self._expected[seq] = self._expected.get(seq, 0) + size
            self._expected_bytes += size

    def accepted(self) -> None:
        """The handler took a request of this connection: the full frame size applies (unless
        the connection must authenticate first)."""
        if not self._accepted and not self._gated:
            self._accepted = True
            self._update_reading()

    def require_authentication(self) -> None:
        """Keep the first-request limits (frames up to ``Limits.max_first_frame``, one request
        at a time) until ``authenticated()``, however many requests are accepted before."""
        if not self._accepted:
            self._gated = True

    def authenticated(self) -> None:
        """The client has authenticated: the full limits apply from its next request on."""
        self._gated = False
        self.accepted()

    # responses ----------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """Whether the client has taken enough of its responses for more to be made."""
        writer = self._writer
        if self.closed or writer is None or self._muted is not None or self._held:
            return False
        unsent = self._parked_bytes + self._expected_bytes + writer.buffered
        return (
            unsent <= self._limits.response_bytes
            and len(self._done) + writer.unsent < self._limits.requests_per_connection
        )

    def complete(self, seq: int, response: Response | Chunks | None) -> None:
        """Hand over the response to request ``seq``: its frame without the size prefix, as a
        list of bytes-like chunks, or a ``Response`` (``None``: the request has no response)."""
        if self.closed:
            if isinstance(response, Response):
                response.on_sent()
            return
        if self._expected:
            self._expected_bytes -= self._expected.pop(seq, 0)  # its real bytes count from now
        if seq != self._next_write:
            self._done[seq] = response
            if response is not None:
                chunks = response.chunks if isinstance(response, Response) else response
                self._parked_bytes += sum(map(len, chunks))
            return
        done, writer = self._done, self._writer
        assert writer is not None  # set in connection_made
        freed = 0
        while True:
            if response is not None:
                if isinstance(response, Response):
                    chunks, on_sent = response.chunks, response.on_sent
                else:
                    chunks, on_sent = response, None
                size = sum(map(len, chunks))
                writer.write([size.to_bytes(_SIZE, "big"), *chunks], on_sent)
            freed += self._sizes.pop(self._next_write)
            self._next_write += 1
            if self._next_write not in done:
                break
            response = done.pop(self._next_write)
            if response is not None:
                chunks = response.chunks if isinstance(response, Response) else response
                self._parked_bytes -= sum(map(len, chunks))
        self.active_at = time.monotonic()
        self._in_flight -= freed
        self._limits.release(freed)
        self._router.schedule(self)
        self._update_reading()

    def extra(self, name: str) -> object:
        """The transport's ``get_extra_info(name)`` (``peercert``: a verified TLS client's
        certificate), None once closed."""
        return None if self._transport is None else self._transport.get_extra_info(name)

    def close(self) -> None:
        """Close once the responses written so far have been sent (file chunks not yet
        handed to a step are not)."""
        if not self.closed and self._transport is not None:
            if self._writer is not None:
                self._writer.pump()  # responses of this pass: to the transport, which sends them
            self.closed = True
            self._transport.close()

    def stop_reading(self) -> None:
        """Take no more requests (shutdown); those already read are still answered."""
        self._stopped = True
        self._update_reading()

    def mute(self, seconds: float) -> None:
        """Neither read nor handle this client's requests for ``seconds`` (a quota's throttle
        time, as Kafka mutes a throttled channel): requests read before wait in its queue,
        responses already made still go out. A longer mute replaces a shorter one."""
        if self.closed or seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if self._muted is not None:
            if self._muted.when() >= until:
                return
            self._muted.cancel()
        self._muted = loop.call_at(until, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._muted = None
        if not self.closed:
            self._router.schedule(self)  # the requests read before the mute, first
            self._update_reading()

    def hold(self, until: asyncio.Future) -> None:
        """Handle none of this client's later requests until ``until`` is done: for a request
        whose work must end before the next one's begins (as Kafka handles a connection's
        requests one at a time). Requests read meanwhile wait in its queue."""
        self._held += 1
        self._update_reading()
        until.add_done_callback(self._release)

    def _release(self, _) -> None:
        self._held -= 1
        if not self._held and not self.closed:
            self._router.schedule(self)  # the requests read meanwhile, first
            self._update_reading()

    @property
    def muted(self) -> bool:
        return self._muted is not None

    @property
    def idle(self) -> bool:
        """Nothing in flight either way (for ``connections.max.idle.ms``)."""
        return (
            self._next_seq == self._next_write
            and self._writer is not None
            and not self._writer.buffered
        )

    def _update_reading(self) -> None:
        if self.closed or self._transport is None:
            return
        want = not (
            self._stopped
            or self._muted is not None
            or (not self._accepted and self._next_seq > self._next_write)
            or self._in_flight > self._limits.per_connection
            or self._next_seq - self._next_write >= self._limits.requests_per_connection
            or self._limits.over(self)
            or not self.writable
        )
        if want != self._reading:
            self._reading = want
            if want:
                self._parse()  # frames that arrived before we stopped come first
                if self._reading:
                    self._transport.resume_reading()
            else:
                self._transport.pause_reading()
