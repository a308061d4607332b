"""The budget of open file descriptors: files are opened on demand, least recently used closed
first, under one limit shared by every log of the process (the broker's ``log.max.open.files``).

How this works
--------------
Every file a log reads or writes through a descriptor is a ``CachedFile``: a segment's
``.log``, the active segment's index files while entries are appended, an old segment's
memory-mapped index (``MappedFile``), a ``.txnindex`` being written. A CachedFile knows its
path and how to open it; its descriptor is open only while the file is in use or was used
recently. A log therefore knows its segments' names, sizes and offsets with no descriptor
open, and a partition nobody writes or reads holds none.

One ``OpenFiles`` owns them all. It counts the descriptors held (``open_count``) and, before
opening one more beyond ``max_open``, closes the least recently used file nobody is using.

Using a file: ``with f.use() as fd:`` (or ``acquire`` / ``release``) *pins* it: while pinned,
its descriptor is neither closed nor replaced, so the event loop's appends, the read threads
and the flush thread share one descriptor safely (a reference count per file; the counts, the
LRU order and ``open_count`` are guarded by one lock, held only for bookkeeping and the close
of a clean descriptor). A pin lasts one operation: a pread, a write, an fsync, a scan.

Writes and durability. ``release(wrote=True)`` marks the file dirty. Eviction prefers clean
files; a dirty one is fsynced *before* its descriptor is closed (outside the lock; the file
is marked as being evicted meanwhile). Fsyncing later through a new descriptor instead could
miss an error: Linux reports a writeback error to the descriptors that were open when it
happened, and a descriptor opened afterwards may never see it. An fsync that fails at
eviction is kept with the file and raised by the next ``sync`` that covers it, so the group
commit that was to make the data durable fails rather than advancing the recovery point.
``sync(files, backend)`` is the flush: it waits for evictions of those files in flight,
fsyncs the dirty open ones in one batch through the log's I/O backend (io_uring: in
parallel), and skips the ones whose descriptor was closed: they were fsynced at eviction.

A file that is deleted, replaced or belongs to a closed log is *retired*: its descriptor
closes now, or when its last user releases it; it is never opened again (a reader that pinned
it before the deletion finishes its read).

Limits. ``max_open`` defaults to half of RLIMIT_NOFILE's soft limit when the OpenFiles is
built; the rest is for sockets and short-lived descriptors (checkpoints, directory fsyncs,
producer snapshots, io_uring rings), at most a few per thread. When every open file is pinned,
or the OS answers EMFILE or ENFILE, ``OpenFilesExhausted`` (both a StorageError and an OSError
with errno EMFILE) names the setting and RLIMIT_NOFILE; callers report a storage error for
that one request and the process carries on.
"""

from __future__ import annotations

import errno
import mmap
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import StorageError, WouldBlock

SETTING = "log.max.open.files"
MIN_OPEN = 8  # a thread pins one or two files at a time; a few threads
_SCAN = 64  # how far past the first dirty candidate eviction looks for a clean one


class OpenFilesExhausted(StorageError, OSError):
    """No descriptor can be had within the budget or the process limit (errno EMFILE)."""


def nofile_limit() -> int:
    """RLIMIT_NOFILE's soft limit (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def default_max_open() -> int:
    """Half of RLIMIT_NOFILE's soft limit: the default of ``log.max.open.files``."""
    return max(MIN_OPEN, nofile_limit() // 2)


class OpenFiles:
    """The descriptors of many logs' files, at most ``max_open`` at a time."""

    _shared: OpenFiles | None = None
    _shared_lock = threading.Lock()

    def __init__(self, max_open: int | None = None) -> None:
        if max_open is None or max_open <= 0:
            max_open = default_max_open()
        if max_open < MIN_OPEN:
            raise ValueError(f"{SETTING} must be at least {MIN_OPEN}")
        self.max_open = max_open
        # held for bookkeeping with ``with self._lock`` (the Condition's own ``with`` is a
        # Python-level call each way, on every pin); waits and notifications go through _cond
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._lru: OrderedDict[CachedFile, None] = OrderedDict()  # open files, oldest first
        self._held = 0  # descriptors open, including ones being evicted
        self._evicting = 0  # evictions in flight (fsync outside the lock)
        self.peak = 0  # the most descriptors held at once
        self.opens = 0  # descriptors opened (for tests and the benchmark)
        self.evictions = 0

    @classmethod
    def shared(cls) -> OpenFiles:
        """The process-wide instance with the default budget (logs opened without one)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    @property
    def open_count(self) -> int:
        return self._held

    def file(self, path: str, flags: int) -> CachedFile:
        """A file opened with ``os.open(path, flags, 0o644)`` when used."""
        return CachedFile(self, path, flags)

    def mapped(self, path: str, length: int) -> MappedFile:
        """The first ``length`` bytes of a file that no longer changes, mapped read-only."""
        return MappedFile(self, path, length)

    # -- pinning ------------------------------------------------------------------------------

    def _acquire(self, f: CachedFile, nowait: bool = False) -> Any:
        cond = self._cond
        while True:
            with self._lock:
                if f.retired:
                    raise FileNotFoundError(errno.ENOENT, "file is no longer in use", f.path)
                res = f.res
                if res is not None:
                    f.users += 1
                    self._lru.move_to_end(f)
                    return res
                if nowait:
                    raise WouldBlock  # opening may wait for the disk, or for an eviction
                if f.opening:
                    cond.wait()
                    continue
                victim = None
                if self._held >= self.max_open:
                    victim = self._victim()
                    if victim is None:
                        if self._evicting:
                            cond.wait()
                            continue
                        raise self._exhausted("every open file is in use")
                    old = self._detach(victim)
                    if not victim.dirty:
                        self._close_locked(victim, old)
                        victim = None
                    else:
                        victim.dirty = False
                        victim.evicting += 1
                        self._evicting += 1
                if victim is None:
                    f.opening = True
                    self._held += 1  # reserved for f
                    self.peak = max(self.peak, self._held)
            if victim is not None:
                self._finish_eviction(victim, old)
                continue
            return self._open(f)

    def _open(self, f: CachedFile) -> Any:
        cond = self._cond
        try:
            res = f._open_resource()
        except OSError as e:
            with self._lock:
                f.opening = False
                self._held -= 1
                cond.notify_all()
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise self._exhausted(f"opening {f.path}: {e.strerror}") from e
            raise
        with self._lock:
            f.opening = False
            cond.notify_all()
            if f.retired:
                f._close_resource(res)
                self._held -= 1
                raise FileNotFoundError(errno.ENOENT, "file is no longer in use", f.path)
            f.res = res
            f.users += 1
            self._lru[f] = None
            self.opens += 1
            return res

    def _release(self, f: CachedFile, wrote: bool) -> None:
        with self._lock:
            f.users -= 1
            if wrote:
                f.dirty = True
                f.writes += 1
            if f.users == 0 and f.retired and f.res is not None:
                self._close_locked(f, self._detach(f))

    def _close_if_idle(self, f: CachedFile) -> None:
        with self._lock:
            if f.res is not None and f.users == 0 and not f.dirty:
                self._close_locked(f, self._detach(f))

    def _retire(self, f: CachedFile) -> None:
        with self._lock:
            f.retired = True
            f.dirty = False
            if f.users == 0 and f.res is not None:
                self._close_locked(f, self._detach(f))

    # -- eviction -----------------------------------------------------------------------------

    def _victim(self) -> CachedFile | None:
        """The least recently used unpinned file, a clean one if one is near the front."""
        dirty = None
        seen = 0
        for f in self._lru:
            if f.users:
                continue
            if not f.dirty:
                return f
            if dirty is None:
                dirty = f
            seen += 1
            if seen > _SCAN:
                break
        return dirty

    def _detach(self, f: CachedFile) -> Any:
        res, f.res = f.res, None
        del self._lru[f]
        return res

    def _close_locked(self, f: CachedFile, res: Any) -> None:
        try:
            f._close_resource(res)
        except OSError:
            pass
        self._held -= 1
        self.evictions += 1
        self._cond.notify_all()

    def _finish_eviction(self, f: CachedFile, fd: int) -> None:
        """Fsync a dirty file's descriptor, then close it (outside the lock)."""
        error = None
        try:
            os.fsync(fd)
        except OSError as e:
            error = e
        try:
            os.close(fd)
        except OSError:
            pass
        with self._lock:
            if error is not None and f.error is None:
                f.error = error
            f.evicting -= 1
            self._evicting -= 1
            self._held -= 1
            self.evictions += 1
            self._cond.notify_all()

    def _exhausted(self, why: str) -> OpenFilesExhausted:
        return OpenFilesExhausted(
            errno.EMFILE,
            f"out of file descriptors ({why}): {SETTING}={self.max_open}, "
            f"{self._held} open, RLIMIT_NOFILE={nofile_limit()}; raise {SETTING} "
            "and ulimit -n together",
        )

    # -- flushing -----------------------------------------------------------------------------

    def sync(self, files: Iterable[CachedFile], backend=None) -> None:
        """Make every write released to ``files`` so far durable (see the module docstring).

        Raises OSError: the backend's, or an earlier eviction's fsync failure."""
        pinned: list[tuple[CachedFile, int]] = []
        error: OSError | None = None
        with self._lock:
            for f in files:
                while f.evicting:
                    self._cond.wait()
                if f.error is not None:
                    error = error or f.error
                    f.error = None
                if f.res is not None and f.dirty:
                    f.users += 1
                    pinned.append((f, f.writes))
        try:
            if pinned and error is None:
                fds = [f.res for f, _ in pinned]
                if backend is None:
                    for fd in fds:
                        os.fsync(fd)
                else:
                    backend.fsync_many(fds)
        except OSError as e:
            error = e
        finally:
            with self._lock:
                for f, writes in pinned:
                    f.users -= 1
                    if error is None and f.writes == writes:
                        f.dirty = False
                    if f.users == 0 and f.retired and f.res is not None:
                        self._close_locked(f, self._detach(f))
        if error is not None:
            raise error


class CachedFile:
    """One file under an OpenFiles budget; see the module docstring."""

    __slots__ = (
        "owner",
        "path",
        "flags",
        "res",
        "users",
        "opening",
        "dirty",
        "writes",
        "evicting",
        "error",
        "retired",
        "__weakref__",
    )

    def __init__(self, owner: OpenFiles, path: str, flags: int) -> None:
        self.owner = owner
        self.path = path
        self.flags = flags
        self.res: Any = None  # the open descriptor (MappedFile: the mapping); None: closed
        self.users = 0  # pins
        self.opening = False
        self.dirty = False  # written since its last fsync
        self.writes = 0  # releases with wrote=True
        self.evicting = 0  # evictions of it in flight
        self.error: OSError | None = None  # an fsync failure at eviction, not yet reported
        self.retired = False

    def acquire(self, nowait: bool = False) -> int:
        """Pin the file and return its descriptor (opening it, maybe closing another);
        ``nowait``: only if it is open, else raise WouldBlock."""
        return self.owner._acquire(self, nowait)

    def release(self, wrote: bool = False) -> None:
        """Unpin; ``wrote``: data was written through the descriptor (flush must fsync it)."""
        self.owner._release(self, wrote)

    @contextmanager
    def use(self, wrote: bool = False) -> Iterator[int]:
        fd = self.acquire()
        try:
            yield fd
        finally:
            self.release(wrote)

    def close_if_idle(self) -> None:
        """Close the descriptor now if nobody uses it and it holds no unflushed data (a file
        opened for a one-off scan, such as recovery, need not wait for eviction)."""
        self.owner._close_if_idle(self)

    def retire(self) -> None:
        """The file is deleted, replaced or its log closed: close it once unused."""
        self.owner._retire(self)

    def _open_resource(self) -> Any:
        return os.open(self.path, self.flags, 0o644)

    def _close_resource(self, res: Any) -> None:
        os.close(res)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, open={self.res is not None})"


class MappedFile(CachedFile):
    """A read-only memory mapping of a file's first ``length`` bytes (an old segment's
    index). The mapping holds one descriptor (Python's mmap keeps a duplicate), so it counts
    as an open file; ``acquire`` returns the mapping."""

    __slots__ = ("length",)

    def __init__(self, owner: OpenFiles, path: str, length: int) -> None:
        super().__init__(owner, path, os.O_RDONLY)
        self.length = length

    def _open_resource(self) -> Any:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < self.length:
                raise OSError(errno.EINVAL, "mapped file shrank", self.path)
            return mmap.mmap(fd, self.length, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def _close_resource(self, res: Any) -> None:
        res.close()
