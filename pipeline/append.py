"""The append stage: copies into the page cache, off the event loop.

How this works
--------------
Copying a produce payload into the page cache is most of what storing it costs (about 3 ms
per MiB on a machine whose memory the page cache has not used yet), and ``os.pwrite``
releases the interpreter while it copies. ``Appender.write(call)`` runs ``call`` (a log's
``append_later`` write) in the stage's one thread and returns a future that completes on the
event loop when it has run, with its exception if it raised. (The write of a log flushed after
every append goes around the page cache instead: ``storage.io.pwrite_direct``.) Calls run in
the order they were given, so the writes of one log keep their reservation order; the thread
waits for the next call when there is none. While it copies one request's batches, the event
loop reads, checks and reserves the next ones: one connection's pipelined requests, or
another's.

The queue holds what handlers wait for: a produce request stays in flight (counted against
the connection's and the broker's request bytes, ``Limits``) until its write has run, so the
request limits bound the queue too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from queue import SimpleQueue

_STOP = None


class Appender:
    def __init__(self) -> None:
        self._calls: SimpleQueue = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def write(self, call: Callable[[], None]) -> asyncio.Future:
        """Run ``call`` in the stage's thread after every call given before it (once the stage
        is closed: at once, in the caller's)."""
        future = asyncio.get_running_loop().create_future()
        if self._closed:
            try:
                call()
            except Exception as e:
                future.set_exception(e)
            else:
                future.set_result(None)
            return future
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="headrace-append", daemon=True)
            self._thread.start()
        self._calls.put((call, future))
        return future

    def _run(self) -> None:
        calls = self._calls
        while (item := calls.get()) is not _STOP:
            call, future = item
            try:
                call()
            except Exception as e:  # the caller's to handle, on the loop
                _complete_soon(future, e)
            else:
                _complete_soon(future, None)

    async def close(self) -> None:
        """Run every call given so far, then stop the thread."""
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._calls.put(_STOP)
            await asyncio.to_thread(thread.join)


def _complete_soon(future: asyncio.Future, error: BaseException | None) -> None:
    try:
        future.get_loop().call_soon_threadsafe(_complete, future, error)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _complete(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
