"""Writing a connection's responses: bytes through the transport, file chunks by sendfile.

How this works
--------------
A response is a list of chunks: bytes-like objects, and *file chunks*: any other object with
``fd``, ``position`` and ``length`` (and ``len()``), such as the regions of segment files a
fetch returns (stored record batches, left in the page cache). ``write(chunks, on_sent)``
queues a response behind the earlier ones; ``pump`` hands the queue out in order. The pump
runs once per pass of the event loop, after the handlers: the responses a pass completes
(pipelined requests handled together) leave in one write, not one each. In order:

* bytes-like chunks go to the transport (``writelines``: one write for the run of them),
  which sends what the socket takes at once and keeps the rest in its buffer;
* a file chunk waits until the transport's buffer is empty (the bytes before it have left;
  the transport then calls ``resume_writing`` and the connection pumps again) and is sent
  with ``os.sendfile`` from the file to the socket: the bytes go from the page cache to the
  socket without passing through Python or a buffer of ours. A *step* runs in a thread of
  a small pool of the process's (sendfile waits for the disk when a page is not in the page
  cache; the event loop must not) and sends the queue from that chunk on, in order (bytes
  chunks with ``os.write``, file chunks with sendfile: one thread hop for many chunks).
  When the socket's buffer fills, the step waits in its thread (``poll``) for the reader to
  make room and goes on, so a fast reader takes a whole response in one step instead of one
  per socket buffer (with ``socket.send.buffer.bytes``' 100 KiB, a round trip through the
  event loop at every full socket doubled the CPU per byte served). For a file chunk that
  loop runs in C where the install built it (``_send.c``: the interpreter lock taken once per
  chunk, not after every wait; Kafka's consumers take 64 KiB at a time, so a 1 MiB chunk
  fills the socket a dozen times), else in Python (``send_file``). A step ends when its
  chunks are sent or after ``STEP_MS``, whichever comes first; the writer then takes what
  was sent off the queue and, if there is more, waits until the socket is writable
  (``loop.add_writer`` on a duplicate of the socket's descriptor: the transport owns the
  original) and pumps again. So a slow reader holds a thread for ``STEP_MS`` at the most,
  and stalled readers cannot keep the others waiting. Nothing goes through the
  transport while a step runs or waits, so the bytes of responses never interleave. Where
  the file system cannot sendfile (EINVAL, ENOSYS), a step copies through a buffer of its
  thread's instead (``os.preadv`` then ``os.write``: two copies, no allocation).

Over TLS the socket carries encrypted bytes, so nothing may be written to it past the
transport: a file chunk is read instead (``os.pread`` in the same pool, at most
``READ_STEP`` bytes at a time) and the bytes go through the transport like any others; the
next read starts once the transport's buffer is empty again, so a slow reader holds about one
step's worth in memory. Responses stay pipelined and in order either way.

The steps write to the duplicate descriptor, which stays open while a step runs even if the
transport closes its own meanwhile; it is closed when the queue is empty or the connection
closed, once no step is running. A file shorter than its chunk (cut meanwhile) closes the
connection, since the length was already sent.

``on_sent`` of a response is called once all its bytes have left (its chunks are out of the
queue and the transport's buffer is empty), or when the connection closes; never while a
step may still read one of its files, so the owner of a file chunk may release it there.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

_BYTES = (bytes, bytearray, memoryview)


def _noop() -> None:
    pass


class _Sent:
    """A queue entry after a response's last chunk: its ``on_sent``."""

    __slots__ = ("on_sent",)

    def __init__(self, on_sent: Callable[[], None]) -> None:
        self.on_sent = on_sent


class ShortFile(OSError):
    """A file chunk's file ended before the chunk did."""


_STEP_ITEMS = 256  # chunks handed to one step at the most
READ_STEP = 1 << 20  # over TLS, file bytes read at a time
STEP_MS = 20  # a step waits for the socket for this long at the most, then lets others in


def send_step(sock_fd: int, items: list) -> int:
    """Send ``items`` in order to the non-blocking socket, waiting for room while the reader
    keeps taking bytes (see the module docstring); returns how many bytes were sent (runs in
    a thread). An item is (-1, bytes-like, 0, length) or (file descriptor, None, position,
    length)."""
    sent = 0
    poller = None
    deadline = time.monotonic() + STEP_MS / 1000
    for fd, data, position, count in items:
        done = 0
        if fd >= 0 and _send_in_c is not None:  # the lock taken once, not at every filling
            left_ms = int((deadline - time.monotonic()) * 1000)
            done = _send_in_c(sock_fd, fd, position, count, max(left_ms, 0))
        while True:
            if done == count:
                break
            if fd >= 0:
                done += send_file(sock_fd, fd, position + done, count - done)
            else:
                try:
                    done += os.write(sock_fd, memoryview(data)[done:] if done else data)
                except BlockingIOError:
                    pass
            if done == count:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return sent + done
            if poller is None:
                poller = select.poll()
                poller.register(sock_fd, select.POLLOUT)
            if not poller.poll(left * 1000):
                return sent + done  # a slow reader: wait on the event loop instead
        sent += count
    return sent


def read_file(file_fd: int, position: int, count: int) -> bytes:
    """``count`` bytes of the file at ``position`` (runs in a thread; over TLS)."""
    data = os.pread(file_fd, count, position)
    if len(data) < count:
        raise ShortFile(f"file ended {count - len(data)} bytes before the chunk")
    return data


def send_file(sock_fd: int, file_fd: int, position: int, count: int) -> int:
    """Send up to ``count`` bytes of the file at ``position`` to the non-blocking socket until
    it would block; returns how many were sent. With ``os.sendfile``, or where the file
    system cannot (EINVAL, ENOSYS...) through a reused buffer."""
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(sock_fd, file_fd, position + sent, count - sent)
        except BlockingIOError:
            break
        except OSError as e:
            if e.errno not in _NO_SENDFILE:
                raise
            return sent + copy_step(sock_fd, file_fd, position + sent, count - sent)
        if n == 0:
            raise ShortFile(f"file ended {count - sent} bytes before the chunk")
        if n < count - sent:
            return sent + n  # the socket's buffer is full: wait until it is writable
        sent += n
    return sent


try:  # C, built when the install had a compiler: the loop above for a file chunk, unlocked
    from ._send import send_file as _send_in_c  # type: ignore[import-not-found]
except ImportError:
    _send_in_c = None

_NO_SENDFILE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
SEND_THREADS = 4  # steps are short (STEP_MS at the most): a few threads serve every connection
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _senders() -> ThreadPoolExecutor:
    """The threads that run send steps, one pool for the process (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="headrace-send")
        return _pool


_COPY_BUFFER = 1 << 20
_local = threading.local()


def copy_step(sock_fd: int, file_fd: int, position: int, count: int) -> int:
    """``send_file`` with ``os.preadv`` into a buffer of the thread's, reused, and
    ``os.write``: two copies instead of none."""
    view = getattr(_local, "view", None)
    if view is None:
        view = _local.view = memoryview(bytearray(_COPY_BUFFER))
    sent = 0
    while sent < count:
        got = os.preadv(file_fd, [view[: min(_COPY_BUFFER, count - sent)]], position + sent)
        if got == 0:
            raise ShortFile(f"file ended {count - sent} bytes before the chunk")
        try:
            n = os.write(sock_fd, view[:got])
        except BlockingIOError:
            break
        sent += n
        if n < got:
            break  # the socket's buffer is full (what was read past it is read again later)
    return sent


class ResponseWriter:
    """The output side of one connection (see the module docstring)."""

    __slots__ = (
        "_transport",
        "_progress",
        "_loop",
        "_queue",
        "_queued",
        "_passed",
        "unsent",
        "_fd",
        "_step",
        "_done_in_chunk",
        "_waiting",
        "_closed",
        "_pumping",
        "_soon",
        "_tls",
        "sendfile_steps",
        "transport_writes",
    )

    def __init__(
        self, transport: asyncio.WriteTransport, progress: Callable[[], None] = _noop
    ) -> None:
        self._transport = transport
        self._progress = progress  # called after each pump or step that took bytes off the queue
        self._loop = asyncio.get_running_loop()
        self._queue: deque = deque()  # chunks, and a _Sent after each response's last one
        self._queued = 0  # bytes in the queue (file chunks: what is left of them)
        self._passed: list[Callable[[], None]] = []  # on_sent of responses out of the queue
        self.unsent = 0  # responses written whose on_sent has not been called
        self._fd = -1  # our duplicate of the socket's descriptor (-1: none)
        self._step: asyncio.Future | None = None  # a sendfile step running in a thread
        self._done_in_chunk = 0  # bytes of the file chunk at the head already sent
        self._waiting = False  # for the socket to become writable
        self._closed = False
        self._pumping = False
        self._soon = False  # a pump is due in the loop's next pass
        # over TLS the socket is not ours to write: file chunks are read and go through the
        # transport (see the module docstring)
        self._tls = transport.get_extra_info("ssl_object") is not None
        self.sendfile_steps = 0  # (for tests) steps taken
        self.transport_writes = 0  # (for tests) writes of bytes chunks to the transport

    @property
    def buffered(self) -> int:
        """Bytes written and not yet sent: in the queue and in the transport's buffer."""
        return self._queued + self._transport.get_write_buffer_size()

    def write(self, chunks: Iterable, on_sent: Callable[[], None] | None = None) -> None:
        """Queue one response's chunks (after the earlier ones) and send what can be sent."""
        if self._closed:
            if on_sent is not None:
                on_sent()
            return
        queue = self._queue
        self.unsent += 1
        for c in chunks:
            queue.append(c)
            self._queued += len(c)
        queue.append(_Sent(on_sent or _noop))
        if not self._soon:  # the responses written in this pass of the loop go out together
            self._soon = True
            self._loop.call_soon(self._pump_soon)

    def _pump_soon(self) -> None:
        self._soon = False
        if not self._closed:
            self.pump()
            self._progress()

    def pump(self) -> None:
        """Hand out the queue, up to a file chunk that must wait (see the module docstring)."""
        if self._closed or self._step is not None or self._waiting or self._pumping:
            return
        self._pumping = True
        try:
            self._pump()
        finally:
            self._pumping = False

    def _pump(self) -> None:
        queue, transport = self._queue, self._transport
        batch: list = []
        while queue:
            c = queue[0]
            if type(c) is _Sent:
                queue.popleft()
                self._passed.append(c.on_sent)
            elif isinstance(c, _BYTES):
                queue.popleft()
                self._queued -= len(c)
                batch.append(c)
            else:
                if batch:
                    transport.writelines(batch)
                    self.transport_writes += 1
                    batch = []
                if not transport.get_write_buffer_size() and not transport.is_closing():
                    if self._tls:
                        self._start_read()
                    else:
                        self._start_step()
                break
        if batch:
            transport.writelines(batch)
            self.transport_writes += 1
        if not queue and self._step is None:
            self._close_fd()
        if not transport.get_write_buffer_size():
            self.left()

    def left(self) -> None:
        """The transport's buffer is empty: every response out of the queue has left."""
        if self._passed:
            callbacks, self._passed = self._passed, []
            self.unsent -= len(callbacks)
            for on_sent in callbacks:
                on_sent()

    def _start_step(self) -> None:
        """Hand the queue, from the file chunk at its head on, to a thread."""
        try:
            if self._fd < 0:
                sock = self._transport.get_extra_info("socket")
                self._fd = os.dup(sock.fileno())
        except (OSError, AttributeError) as e:
            log.warning("closing a connection: no descriptor to send a file with: %s", e)
            self._transport.abort()
            return
        items: list[tuple[int, object, int, int]] = []
        done = self._done_in_chunk  # of the file chunk at the head
        for c in self._queue:
            if type(c) is _Sent:
                continue
            if isinstance(c, _BYTES):
                items.append((-1, c, 0, len(c)))
            else:
                items.append((c.fd, None, c.position + done, c.length - done))
                done = 0
            if len(items) == _STEP_ITEMS:
                break
        self.sendfile_steps += 1
        step = self._loop.run_in_executor(_senders(), send_step, self._fd, items)
        self._step = step
        step.add_done_callback(functools.partial(self._stepped, sum(i[3] for i in items)))

    def _start_read(self) -> None:
        """Over TLS: read (part of) the file chunk at the head of the queue in a thread."""
        c = self._queue[0]
        done = self._done_in_chunk
        count = min(c.length - done, READ_STEP)
        self.sendfile_steps += 1
        step = self._loop.run_in_executor(_senders(), read_file, c.fd, c.position + done, count)
        self._step = step
        step.add_done_callback(self._read)

    def _read(self, step: asyncio.Future) -> None:
        self._step = None
        if self._closed:
            self._finish_close()
            return
        try:
            data = step.result()
        except OSError as e:
            log.warning("closing a connection: reading a file chunk failed: %s", e)
            self._transport.abort()  # connection_lost closes this writer
            return
        self._advance(len(data))
        self._transport.write(data)
        self.pump()
        self._progress()

    def _stepped(self, handed: int, step: asyncio.Future) -> None:
        self._step = None
        if self._closed:
            self._finish_close()
            return
        try:
            sent = step.result()
        except OSError as e:
            if not isinstance(e, (BrokenPipeError, ConnectionResetError)):
                log.warning("closing a connection: sendfile failed: %s", e)
            self._transport.abort()  # connection_lost closes this writer
            return
        self._advance(sent)
        self.left()  # (nothing went through the transport meanwhile: its buffer is empty)
        if sent == handed:
            self.pump()
        else:
            self._waiting = True
            self._loop.add_writer(self._fd, self._writable)
        self._progress()

    def _advance(self, n: int) -> None:
        """Take ``n`` bytes sent off the head of the queue."""
        queue = self._queue
        self._queued -= n
        while queue:
            c = queue[0]
            if type(c) is _Sent:
                queue.popleft()
                self._passed.append(c.on_sent)
                continue
            rest = len(c) - self._done_in_chunk
            if n < rest:
                if n and isinstance(c, _BYTES):  # the rest goes as a bytes chunk of its own
                    queue[0] = memoryview(c).cast("B")[n:]
                elif n:
                    self._done_in_chunk += n
                return
            n -= rest
            queue.popleft()
            self._done_in_chunk = 0

    def _writable(self) -> None:
        self._loop.remove_writer(self._fd)
        self._waiting = False
        self.pump()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def close(self) -> None:
        """The connection closed: nothing more is sent; every on_sent is called, at once or
        (while a step is running) when it ends."""
        if self._closed:
            return
        self._closed = True
        if self._waiting:
            self._waiting = False
            self._loop.remove_writer(self._fd)
        if self._step is None:
            self._finish_close()

    def _finish_close(self) -> None:
        self._close_fd()
        queue, self._queue = self._queue, deque()
        self._queued = 0
        self._passed.extend(c.on_sent for c in queue if type(c) is _Sent)
        self.left()
