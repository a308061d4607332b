"""The translator's worker processes: a small pool, at most ``iceberg.max.open.files`` of
them, each running one round at a time, so that reading, decoding, Parquet writing and the
catalog's commit never hold the broker's interpreter lock.

How this works
--------------
A worker is a ``multiprocessing`` process of the ``forkserver`` context with one end of a
pipe: forked from a single-threaded server process (started, from a fresh interpreter, with
the first worker), so it has no copy of the broker's threads, locks or sockets, and the
server imported pyarrow and pyiceberg once (``preload``) so a new worker starts at once. The
broker sends it a request (a pickled ``(function, argument)``), it answers with ``("ok",
result)`` or ``("error", text)``, and waits for the next. The event loop never blocks on a
worker: it sends to an idle one (which is waiting in ``recv``) and waits for the answer with
``add_reader`` on the pipe. Workers are started (in a thread: the first start waits for the
server's imports) when a round first needs one (so only with ``iceberg.enabled`` and a topic
to write) and kept; ``close`` ends them with the broker.

A worker that dies (its pipe reads EOF) or answers no sooner than ``timeout_s`` fails its
request (``WorkerFailed``): it is killed and forgotten, the next request starts a new one,
and the translator retries the round with its backoff. Nothing a worker does outlives the
request in the broker's memory; what it committed is in the table, which is where every
round starts.

A worker never outlives the broker: a thread of the worker waits for its pipe to hang up (the
broker's end closed, by ``close`` or by the broker's death, kill -9 included) and ends the
process at once (``os._exit``), mid-round or not; it checks at start that the broker is still
there, and it asks the kernel for SIGKILL should the fork server die (``PR_SET_PDEATHSIG``,
Linux). The fork server ends when the broker and its workers have (its pipe reads EOF). A
worker runs under Linux's ``SCHED_IDLE`` policy (``sched_idle``: it gets only the CPU time no
other process wants, and any other process that wakes takes its core at once), or else at
``nice`` (a lower CPU priority than the broker's event loop, which still shares busy cores).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("headrace")

PR_SET_PDEATHSIG = 1  # prctl(2)


class WorkerFailed(Exception):
    """The worker died, hung past its timeout, or its pipe broke: the request did not answer
    (what it committed, if anything, is in the table)."""


class RemoteError(Exception):
    """The request raised in the worker: its type and message."""


class WorkerPool:
    """At most ``size`` worker processes; ``run`` gives a request to an idle one."""

    def __init__(
        self,
        size: int,
        nice: int = 0,
        timeout_s: float = 300.0,
        preload: Sequence[str] = (),
        sched_idle: bool = False,
    ) -> None:
        self.size = size
        self.priority = (nice, sched_idle)
        self.timeout_s = timeout_s
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._closed = False
        self._ctx = multiprocessing.get_context("forkserver")
        if preload:  # (the server's imports, shared by every worker it forks)
            self._ctx.set_forkserver_preload(list(preload))
        self._starting = 0

    @property
    def processes(self) -> int:
        return len(self._idle) + len(self._busy) + self._starting

    async def run(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` in a worker process (``fn`` importable by name). Raises what ``fn``
        raised as ``RemoteError``, ``WorkerFailed`` when the worker did not answer. The caller
        keeps at most ``size`` requests running at once."""
        if self._closed:
            raise WorkerFailed("the worker pool is closed")
        worker = self._idle.pop() if self._idle else None
        if worker is None:
            if self.processes >= self.size:
                raise RuntimeError("more requests at once than the pool's size")
            self._starting += 1
            try:
                worker = await asyncio.to_thread(_Worker, self._ctx, self.priority)
            except OSError as e:
                raise WorkerFailed(f"cannot start a worker: {e}") from e
            finally:
                self._starting -= 1
            if self._closed:
                worker.kill()
                raise WorkerFailed("the worker pool is closed")
        self._busy.add(worker)
        ok = False
        try:
            answer = await worker.call((fn, arg), self.timeout_s)
            ok = True
        finally:
            self._busy.discard(worker)
            if ok and not self._closed:
                self._idle.append(worker)
            else:
                worker.kill()
        kind, value = answer
        if kind == "error":
            raise RemoteError(value)
        return value

    def close(self) -> None:
        """End every worker: idle ones read EOF and exit; busy ones (a round cut short by the
        broker's stop) are killed, their rounds failing."""
        self._closed = True
        for worker in self._idle:
            worker.close()
        for worker in list(self._busy):
            worker.kill()
        self._idle.clear()


class _Worker:
    def __init__(self, ctx: Any, priority: tuple[int, bool]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_serve,
            args=(child, os.getpid(), priority),
            name="headrace-iceberg",
            daemon=True,
        )
        self.process.start()
        child.close()

    async def call(self, request: Any, timeout_s: float) -> Any:
        loop = asyncio.get_running_loop()
        try:
            self.conn.send(request)  # (the worker waits in recv: this does not block long)
        except OSError as e:
            raise WorkerFailed(f"worker {self.process.pid}: {e}") from e
        ready = loop.create_future()
        fd = self.conn.fileno()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await asyncio.wait_for(ready, timeout_s)
        except TimeoutError:
            raise WorkerFailed(
                f"worker {self.process.pid} gave no answer in {timeout_s:.0f} s"
            ) from None
        finally:
            loop.remove_reader(fd)
        try:
            return self.conn.recv()
        except (EOFError, OSError) as e:
            self.process.join(1.0)
            raise WorkerFailed(
                f"worker {self.process.pid} ended (exit code {self.process.exitcode})"
            ) from e

    def close(self) -> None:
        """The worker reads EOF and exits; killed if it has not within a second."""
        self.conn.close()
        self.process.join(1.0)
        if self.process.is_alive():
            self.kill()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(1.0)


def _serve(conn: Any, broker_pid: int, priority: tuple[int, bool]) -> None:
    """A worker process: answer requests until the pipe reads EOF."""
    _die_with_parent(broker_pid)
    threading.Thread(target=_end_on_hangup, args=(conn.fileno(),), daemon=True).start()
    nice, sched_idle = priority
    if sched_idle and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the broker's stop ends workers)
    while True:
        try:
            fn, arg = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[str, Any] = ("ok", fn(arg))
        except BaseException as e:  # (sent back: the broker counts the round as failed)
            answer = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(answer)
        except (OSError, ValueError):
            return


def _end_on_hangup(fd: int) -> None:
    """(A thread of the worker.) End the process when the broker's end of the pipe closes."""
    poll = select.poll()
    poll.register(fd, getattr(select, "POLLRDHUP", 0x2000))  # (only hangups and errors wake it)
    while True:
        with contextlib.suppress(InterruptedError):
            if poll.poll():
                os._exit(0)


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent (the fork server, which ends with the broker)
    dies (Linux); exit now if the broker already has."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        os._exit(0)
