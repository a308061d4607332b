"""One client connection: frames in, responses out in request order.

How this works
--------------
Kafka frames are a 4-byte big-endian size followed by that many bytes. ``Connection`` is an
asyncio ``BufferedProtocol``: the event loop reads straight into our buffers.

* Small frames are read into a shared receive buffer (``RECEIVE_BUFFER`` bytes) and copied out
  one frame at a time into their own ``bytearray``; a frame larger than the space left in that
  buffer gets a ``bytearray`` of its own and the loop reads the rest of it directly into that,
  so a 1 MiB produce is copied from the socket once. That buffer starts at
  ``FIRST_ALLOCATION`` bytes and doubles as data arrives, so a peer that announces 100 MiB and
  sends little holds little memory.
* The size is checked before anything is allocated: a size below ``MIN_FRAME`` or above the
  limit (Kafka's ``socket.request.max.bytes``) closes the connection.
* Each frame gets an arrival sequence number and goes to the router; the connection does not
  wait for it. Responses may complete in any order: ``complete(seq, chunks)`` parks them until
  every earlier one has been written (a reorder buffer keyed by sequence number). ``None``
  means "no response" (acks=0 produce) and only advances the sequence.
* Backpressure: requests in flight (read but not yet answered) and their bytes are counted
  per connection, the bytes also for the whole broker (``Limits``). Over a cap, or while the
  transport's write buffer is above its high-water mark, the connection stops reading (and
  stops taking frames out of what it has already read) until responses drain.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .router import Router

log = logging.getLogger(__name__)

RECEIVE_BUFFER = 256 * 1024
FIRST_ALLOCATION = 1024 * 1024  # a large frame's buffer starts here and doubles as bytes arrive
MIN_FRAME = 8  # api key, api version and correlation id alone take 8 bytes
_SIZE = 4

_ids = itertools.count(1)


class Limits:
    """Caps on request bytes in flight, per connection and for the whole broker."""

    def __init__(
        self, *, max_frame: int, per_connection: int, per_broker: int, requests_per_connection: int
    ) -> None:
        self.max_frame = max_frame
        self.per_connection = per_connection
        self.per_broker = per_broker
        self.requests_per_connection = requests_per_connection
        self.in_flight = 0
        self._paused: set[Connection] = set()

    def acquire(self, conn: Connection, size: int) -> None:
        self.in_flight += size
        if self.in_flight > self.per_broker:
            self._paused.add(conn)

    def release(self, size: int) -> None:
        self.in_flight -= size
        if self._paused and self.in_flight <= self.per_broker:
            paused, self._paused = self._paused, set()
            for conn in paused:
                conn._update_reading()

    def over(self, conn: Connection) -> bool:
        return conn in self._paused

    def forget(self, conn: Connection) -> None:
        self._paused.discard(conn)


class Connection(asyncio.BufferedProtocol):
    """A Kafka client connection (see the module docstring)."""

    def __init__(self, router: Router, limits: Limits) -> None:
        self.id = next(_ids)
        self.peer: str = ""
        self._router = router
        self._limits = limits
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray(RECEIVE_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # unread data is self._buf[_start:_end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being read in place
        self._frame_filled = 0
        self._frame_size = 0  # its declared size: the buffer grows towards it as bytes arrive
        self._next_seq = 0  # sequence number of the next request read
        self._next_write = 0  # sequence number of the next response to write
        self._done: dict[int, list | None] = {}
        self._sizes: dict[int, int] = {}
        self._in_flight = 0
        self._reading = True
        self._write_paused = False
        self._stopped = False  # no more requests: the broker is shutting down
        self.closed = False

    # asyncio protocol callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._router.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._limits.forget(self)
        self._limits.release(self._in_flight)
        self._in_flight = 0
        self._sizes.clear()
        self._done.clear()
        self._router.closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            if self._frame_filled == len(frame):
                # grow by doubling, so memory follows the bytes that really arrived
                frame.extend(bytes(min(len(frame), self._frame_size - len(frame))))
            return memoryview(frame)[self._frame_filled :]
        if self._end == len(self._buf):
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_filled += nbytes
            if self._frame_filled == self._frame_size:
                frame, self._frame = self._frame, None
                self._dispatch(frame)
            return
        self._end += nbytes
        self._parse()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # framing ------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while self._reading and not self.closed and self._end - self._start >= _SIZE:
            start = self._start
            size = int.from_bytes(buf[start : start + _SIZE], "big", signed=True)
            if size < MIN_FRAME or size > self._limits.max_frame:
                log.warning("closing %s: frame size %d out of bounds", self.peer, size)
                self.close()
                return
            available = self._end - start - _SIZE
            if available >= size:
                frame = bytearray(self._view[start + _SIZE : start + _SIZE + size])
                self._start = start + _SIZE + size
                self._dispatch(frame)
                continue
            if _SIZE + size > len(buf) - start:
                # does not fit in what is left of the buffer: give it a buffer of its own
                frame = bytearray(max(min(size, FIRST_ALLOCATION), available))
                frame[:available] = self._view[start + _SIZE : self._end]
                self._frame, self._frame_filled, self._frame_size = frame, available, size
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _compact(self) -> None:
        n = self._end - self._start
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

    # responses ----------------------------------------------------------------------------

    def complete(self, seq: int, chunks: list | None) -> None:
        """Hand over the response to request ``seq``: its frame without the size prefix, as a
        list of bytes-like chunks (``None``: the request has no response)."""
        if self.closed:
            return
        self._done[seq] = chunks
        if seq != self._next_write:
            return
        done, transport = self._done, self._transport
        freed = 0
        while self._next_write in done:
            chunks = done.pop(self._next_write)
            if chunks:
                size = sum(len(c) for c in chunks)
                transport.writelines([size.to_bytes(_SIZE, "big"), *chunks])  # type: ignore
            freed += self._sizes.pop(self._next_write)
            self._next_write += 1
        self._in_flight -= freed
        self._limits.release(freed)
        self._update_reading()

    def close(self) -> None:
        if not self.closed and self._transport is not None:
            self.closed = True
            self._transport.close()

    def stop_reading(self) -> None:
        """Take no more requests (shutdown); those already read are still answered."""
        self._stopped = True
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self._transport is None:
            return
        want = not (
            self._stopped
            or self._write_paused
            or self._in_flight > self._limits.per_connection
            or self._next_seq - self._next_write >= self._limits.requests_per_connection
            or self._limits.over(self)
        )
        if want != self._reading:
            self._reading = want
            if want:
                self._parse()  # frames that arrived before we stopped come first
                if self._reading:
                    self._transport.resume_reading()
            else:
                self._transport.pause_reading()
