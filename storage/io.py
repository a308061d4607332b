"""I/O backends: how a log writes batches, fsyncs files and reads batches back.

How this works
--------------
A log's three hot operations go through a backend, chosen by ``LogConfig.io_backend``:

    write_all(fd, data, n, position)   write all n bytes at position (one call normally);
                                       on failure undo a partial write, raise OSError
    fsync_many(fds)                    fsync every descriptor; return when all are durable
    pread(fd, n, position) -> bytes    read n bytes at position (fewer only at end of file)

Everything else (index entries, scans at open, recovery, compaction) uses plain ``os`` calls:
it is rare or off the request path. So does ``pwrite_direct``, the append stage's write around
the page cache for a log flushed after every append (through a 1 MiB buffer per writing
thread).

``os`` (default): ``os.pwrite``, ``os.fsync`` and ``os.pread``; the caller runs fsyncs off the
event loop (the broker's flush stage) and reads in its read threads.

``io_uring``: fsyncs and reads as io_uring submissions through the PyPI ``liburing``
package, one ring per thread (a ring is not thread-safe; threads here are the event loop,
the flush thread and the read pool). ``fsync_many`` submits one fsync per descriptor in a
single ``io_uring_enter`` and waits for them all, so a group commit that touches several files
(segments and their indexes, several partitions) syncs them in parallel rather than one after
another. The wait happens in ``io_uring_wait_cqe``, which releases the GIL
(``io_uring_submit_and_wait`` does not, and stalled the appending thread during fsyncs).
Appends are buffered writes into the page cache, and the kernel hands buffered io_uring writes
on this filesystem to its worker threads: measured here, 11.7 us per 1 KiB append through the
ring against 4.1 us with ``pwrite``, and group commit fell to a quarter of ``dd``'s
write-plus-fsync rate because ring writes queued behind the fsyncs. So appends use
``pwrite`` by default; ``UringBackend(ring_writes=True)`` sends them through the ring too
(``liburing`` takes ``bytes``/``bytearray`` only, so a memoryview is copied first).

Whether io_uring is usable is checked once per process, in a child process that sets up a
ring: a native library that cannot run on this machine (a wheel built for instructions the
CPU lacks dies of SIGILL) then makes the backend unavailable instead of killing the broker.

No-wait reads (``pread_nowait``, for reads on the event loop: see reads.py) bypass both
backends: ``preadv2`` with ``RWF_NOWAIT`` copies what is in the page cache and fails instead of
reading the disk. Where the kernel or file system cannot do that, every no-wait read fails
(``nowait_reads()`` then says False) and the callers read in their threads as before.

Errors surface as OSError with the kernel's errno in both backends (ENOSPC, EIO, EBADF...).

Descriptors: every fd passed to a backend is pinned by the caller in the log's OpenFiles
budget (open_files.py) for the whole call, submission to completion, so neither backend can
see it closed or reused under it; both therefore honour ``log.max.open.files`` as they are.
The io_uring rings (one per thread that used the backend) are descriptors outside the budget.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import signal
import subprocess
import sys
import threading

from .errors import WouldBlock


class OsBackend:
    name = "os"

    def write_all(self, fd: int, data, n: int, position: int) -> None:
        pwrite_all(fd, data, n, position)

    def fsync_many(self, fds) -> None:
        for fd in fds:
            os.fsync(fd)

    def pread(self, fd: int, n: int, position: int) -> bytes:
        return os.pread(fd, n, position)

    def close(self) -> None:
        pass


_ROUND = 64 * 1024


class UringBackend:
    """io_uring through ``liburing``; one ring per thread, created on first use."""

    name = "io_uring"
    ENTRIES = 64

    def __init__(self, ring_writes: bool = False) -> None:
        import liburing  # noqa: F401  (raises ImportError when the package is missing)

        self.ring_writes = ring_writes
        self._lu = liburing
        self._local = threading.local()
        self._rings: list = []
        self._lock = threading.Lock()

    def _ring(self):
        state = getattr(self._local, "state", None)
        if state is None:
            lu = self._lu
            ring = lu.Ring()
            lu.io_uring_queue_init(self.ENTRIES, ring)
            state = self._local.state = (ring, lu.Cqe())
            with self._lock:
                self._rings.append(ring)
        return state

    def _run(self, count: int) -> list[int]:
        """Submit the prepared entries, wait for ``count`` completions; their results in
        submission order (user data = index). Raises OSError for the first failure."""
        lu = self._lu
        ring, cqe = self._ring()
        lu.io_uring_submit(ring)  # then wait in io_uring_wait_cqe, which releases the GIL
        results: list = [None] * count
        error = None
        got = 0
        while got < count:
            try:
                lu.io_uring_wait_cqe(ring, cqe)
                c = cqe[0]
                results[lu.io_uring_cqe_get_data64(c)] = c.res
            except OSError as e:
                error = error or e
            finally:
                lu.io_uring_cq_advance(ring, 1)
            got += 1
        if error is not None:
            raise error
        return results

    def write_all(self, fd: int, data, n: int, position: int) -> None:
        if not self.ring_writes:
            return pwrite_all(fd, data, n, position)
        lu = self._lu
        buf = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        done = 0
        try:
            while done < n:
                part = buf if done == 0 else buf[done:]
                ring, _ = self._ring()
                sqe = lu.io_uring_get_sqe(ring)
                lu.io_uring_prep_write(sqe, fd, part, position + done)
                lu.io_uring_sqe_set_data64(sqe, 0)
                written = self._run(1)[0]
                if written <= 0:
                    raise OSError(f"io_uring write returned {written}")
                done += written
        except OSError:
            undo_write(fd, position)
            raise

    def fsync_many(self, fds) -> None:
        fds = list(fds)
        lu = self._lu
        for start in range(0, len(fds), self.ENTRIES):
            chunk = fds[start : start + self.ENTRIES]
            ring, _ = self._ring()
            for i, fd in enumerate(chunk):
                sqe = lu.io_uring_get_sqe(ring)
                lu.io_uring_prep_fsync(sqe, fd)
                lu.io_uring_sqe_set_data64(sqe, i)
            self._run(len(chunk))

    def pread(self, fd: int, n: int, position: int) -> bytes:
        # Large reads land in per-thread buffers that are reused (a fresh 1 MiB buffer per
        # read ran at a twentieth of the speed here), then are copied out once. liburing reads
        # a whole buffer, so buffers come in sizes rounded up to 64 KiB (a read may fetch up
        # to 64 KiB more than asked from the page cache); small reads get an exact buffer.
        lu = self._lu
        if n <= _ROUND:
            buf = bytearray(n)
        else:
            size = -(-n // _ROUND) * _ROUND
            cache = getattr(self._local, "bufs", None)
            if cache is None:
                cache = self._local.bufs = {}
            buf = cache.pop(size, None)
            if buf is None:
                buf = bytearray(size)
                if len(cache) >= 4:
                    del cache[next(iter(cache))]
            cache[size] = buf  # most recently used last
        ring, _ = self._ring()
        sqe = lu.io_uring_get_sqe(ring)
        lu.io_uring_prep_read(sqe, fd, buf, position)
        lu.io_uring_sqe_set_data64(sqe, 0)
        got = min(self._run(1)[0], n)
        view = memoryview(buf)
        if got < n:
            if got <= 0:
                return b""
            rest = os.pread(fd, n - got, position + got)  # a short read mid-file: finish it
            return bytes(view[:got]) + rest
        return bytes(view[:n])

    def close(self) -> None:
        with self._lock:
            rings, self._rings = self._rings, []
        for ring in rings:
            try:
                self._lu.io_uring_queue_exit(ring)
            except Exception:
                pass


_nowait = hasattr(os, "RWF_NOWAIT")


def nowait_reads() -> bool:
    """Whether ``pread_nowait`` can succeed here (False once the kernel refused the flag)."""
    return _nowait


def pread_nowait(fd: int, n: int, position: int) -> bytes:
    """n bytes at ``position``, if all of them are in the page cache; raises WouldBlock when
    reading them would wait for the disk, and when the read fails (the caller's read that may
    wait meets the error again and reports it)."""
    global _nowait
    if not _nowait:
        raise WouldBlock
    buf = bytearray(n)
    try:
        got = os.preadv(fd, [buf], position, os.RWF_NOWAIT)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            _nowait = False  # not here: never try again
        raise WouldBlock from e
    if got != n:
        raise WouldBlock  # part of it is not in the page cache (or the file is shorter)
    return bytes(buf)


def pwrite_all(fd: int, data, n: int, position: int) -> None:
    """Write all ``n`` bytes of ``data`` at ``position`` with ``os.pwrite``; on failure cut
    the file back to ``position`` and raise OSError."""
    try:
        written = os.pwrite(fd, data, position)
        if written < n:
            view = memoryview(data).cast("B")
            while written < n:
                written += os.pwrite(fd, view[written:], position + written)
    except OSError:
        undo_write(fd, position)
        raise


DIRECT_BLOCK = 4096  # O_DIRECT alignment of offsets, lengths and memory (a page: safe for any disk)
DIRECT_CHUNK = 4 << 20  # bytes per O_DIRECT write at most: the size of each thread's buffer
_direct_buffers = threading.local()  # per writing thread: a page-aligned buffer


def pwrite_direct(path: str, fd: int, parts: list, position: int) -> None:
    """``pwrite_all`` around the page cache: the bytes of the buffers ``parts``, one after the
    other, go from memory to the disk (``O_DIRECT``), and the file ``fd`` (open at ``path``)
    ends after them.

    ``O_DIRECT`` takes whole aligned blocks from aligned memory, so the bytes are copied into
    the thread's buffer behind the bytes before ``position`` in its block (read back through
    ``fd``) and written ``DIRECT_CHUNK`` at a time; the last block is padded with zeros, and
    the file is cut back to where the bytes end. Where the file system refuses ``O_DIRECT`` or
    these blocks (EINVAL), writes through ``fd``.
    """
    try:
        dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return _pwrite_parts(fd, parts, position)
    try:
        os.ftruncate(fd, _write_blocks(dfd, fd, parts, position))
    except OSError as e:
        undo_write(fd, position)
        if e.errno != errno.EINVAL:
            raise
        _pwrite_parts(fd, parts, position)
    finally:
        os.close(dfd)


def _pwrite_parts(fd: int, parts: list, position: int) -> None:
    start = position
    try:
        for part in parts:
            n = memoryview(part).nbytes
            pwrite_all(fd, part, n, position)
            position += n
    except OSError:
        undo_write(fd, start)
        raise


def _write_blocks(dfd: int, fd: int, parts: list, position: int) -> int:
    """Write ``parts`` at ``position`` through ``dfd`` in whole blocks; where they end."""
    buf = getattr(_direct_buffers, "buf", None)
    if buf is None:
        buf = _direct_buffers.buf = mmap.mmap(-1, DIRECT_CHUNK)
    start = position - position % DIRECT_BLOCK
    fill = position - start  # bytes in the buffer
    with memoryview(buf) as view:
        if fill and os.preadv(fd, [view[:fill]], start) != fill:
            raise OSError(errno.EIO, "the block being appended to is short")
        end = position
        for part in parts:
            with memoryview(part) as src:
                done, n = 0, src.nbytes
                while done < n:
                    take = min(n - done, DIRECT_CHUNK - fill)
                    view[fill : fill + take] = src[done : done + take]
                    done += take
                    fill += take
                    if fill == DIRECT_CHUNK:
                        start, fill = _write_out(dfd, view, start, fill), 0
                end += n
        if fill:  # the last write: pad its last block
            size = -(-fill // DIRECT_BLOCK) * DIRECT_BLOCK
            view[fill:size] = bytes(size - fill)
            _write_out(dfd, view, start, size)
    return end


def _write_out(dfd: int, view: memoryview, start: int, size: int) -> int:
    """Write the buffer's first ``size`` bytes (whole blocks) at ``start``; the next start.
    A short write is followed by one of the rest, which raises why (ENOSPC)."""
    done = 0
    while done < size:
        written = os.pwrite(dfd, view[done:size], start + done)
        if written <= 0:
            raise OSError(errno.EIO, "short write")
        done += written
    return start + size


def undo_write(fd: int, position: int) -> None:
    """Cut a file back to ``position`` after a failed write (best effort)."""
    try:
        os.ftruncate(fd, position)
    except OSError:
        pass


BACKENDS = ("os", "io_uring")
_instances: dict[str, object] = {}
_instances_lock = threading.Lock()


def get_backend(name: str):
    """The process-wide backend called ``name`` (raises ValueError or ImportError)."""
    with _instances_lock:
        backend = _instances.get(name)
        if backend is None:
            if name == "os":
                backend = OsBackend()
            elif name == "io_uring":
                try:
                    backend = UringBackend()
                except ImportError as e:
                    raise ValueError(f"the io_uring backend needs the liburing package: {e}") from e
                why = _uring_unusable()
                if why:
                    raise ValueError(f"io_uring is not usable here: {why}")
                try:
                    backend._ring()
                except OSError as e:
                    raise ValueError(f"io_uring is not usable here: {e}") from e
            else:
                raise ValueError(f"unknown I/O backend {name!r}; choose from {BACKENDS}")
            _instances[name] = backend
        return backend


_PROBE = (
    "import liburing as lu; r = lu.Ring(); lu.io_uring_queue_init(8, r); lu.io_uring_queue_exit(r)"
)


@functools.cache
def _uring_unusable() -> str:
    """Why setting up a ring fails in a child process ("" when it works); asked once."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"the check could not run: {e}"
    if done.returncode < 0:
        killed_by = signal.strsignal(-done.returncode) or f"signal {-done.returncode}"
        return f"setting up a ring with the liburing package killed a process ({killed_by})"
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit status {done.returncode}"
    return ""


def available_backends() -> list[str]:
    out = ["os"]
    try:
        get_backend("io_uring")._ring()
    except Exception:
        return out
    out.append("io_uring")
    return out
