"""The broker's data directory as a whole: who holds it, which cluster it belongs to, and
whether its last stop was clean.

How this works
--------------
One broker per directory, as Kafka's ``.lock``: an exclusive ``flock`` taken before anything in
the directory is read and held until the broker stops (the kernel releases it when the
process dies, however it dies); the file holds the holder's pid, which a second broker names
as it refuses to start. ``meta.properties`` holds the cluster id (Kafka's layout: ``version``,
``cluster.id``, ``node.id``): a broker on its own makes one for a new directory, a cluster
broker writes the cluster's once it has joined. The clean-shutdown marker
(``.clean_shutdown``) is written after every log is flushed at a clean stop and removed once
the logs are open again: a directory without it (and with a ``meta.properties``, so not new)
had its broker killed, and every log is recovered.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from headrace.storage import fsync_directory

CLEAN_SHUTDOWN = ".clean_shutdown"
META = "meta.properties"
LOCK = ".lock"


class DataDirInUse(OSError):
    """Another broker holds the directory's lock."""


class DataDir:
    def __init__(self, path: Path, node_id: int) -> None:
        self.path = path
        self.node_id = node_id
        self._lock_fd = -1

    def lock(self) -> None:
        """Make the directory if need be, take its lock and check that it can be written
        (``OSError`` when not; ``DataDirInUse`` naming the holder's pid)."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirInUse(
                f"data directory {self.path} is in use by another broker (pid {holder})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        pid = f"{os.getpid()}\n".encode()
        os.pwrite(fd, pid, 0)
        os.ftruncate(fd, len(pid))
        self._lock_fd = fd
        probe = self.path / ".probe"
        probe.write_bytes(b"")
        probe.unlink()

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the only descriptor releases the flock
            self._lock_fd = -1

    def stopped_cleanly(self) -> bool:
        """The last broker here stopped cleanly (or there was none: a new directory)."""
        return (self.path / CLEAN_SHUTDOWN).exists() or not (self.path / META).exists()

    def opened(self) -> None:
        """The logs are open: a crash from now on is not a clean stop."""
        (self.path / CLEAN_SHUTDOWN).unlink(missing_ok=True)
        fsync_directory(self.path)

    def closed(self) -> None:
        """(At a clean stop, every log flushed.) The marker, then the lock released."""
        (self.path / CLEAN_SHUTDOWN).write_bytes(b"")
        fsync_directory(self.path)
        self.unlock()

    def cluster_id(self) -> str:
        """The cluster id in ``meta.properties`` ("": none yet; the cluster metadata then
        gives one, ``agree_cluster_id``)."""
        path = self.path / META
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        return ""

    def write_cluster_id(self, cluster_id: str) -> None:
        path = self.path / META
        path.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
