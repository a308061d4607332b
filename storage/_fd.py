"""A file descriptor that closes itself when the last reference goes away."""

from __future__ import annotations

import os


class FileRef:
    """Owns one OS file descriptor.

    Threads that read or fsync a file take a reference to its FileRef while holding the log's
    lock and use ``fd`` after releasing it. When a segment is deleted or replaced the log just
    drops its reference: the descriptor stays open until the last user is done, so a reader
    never sees EBADF or, worse, a reused descriptor number. ``close`` is only for shutdown.
    """

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass
