"""Replacing a log's leading segments on disk, crash-safely (the compaction swap).

How this works
--------------
The cleaner writes the replacement segments into the subdirectory ``cleaner.cleaned``
(``stage``). ``Log.replace_segments`` then:

1. ``seal``: writes ``replaces`` into it (the base offsets of the segments being replaced,
   one a line) and fsyncs the file and the directory;
2. ``commit``: renames the directory to ``cleaner.swap`` and fsyncs the log directory. This
   rename is the commit point: from here on the swap is finished even after a crash;
3. ``complete_pending_swap``: unlinks the files of the segments listed in ``replaces``, then
   renames that file ``replaces.done`` (so a second crash does not unlink the new files that
   took the same names), moves the new files into the log directory and removes
   ``cleaner.swap``.

``Log.open`` calls ``complete_pending_swap`` before it reads anything: a ``cleaner.swap``
left by a crash is finished; a ``cleaner.cleaned`` (a swap that never committed) is removed.
"""

from __future__ import annotations

import os
import shutil

from . import _files


def staged_path(directory: str) -> str:
    """Where replacement segments are built (``cleaner.cleaned``)."""
    return os.path.join(directory, _files.CLEANED_DIR)


def stage(directory: str) -> str:
    """A fresh, empty staging directory for replacement segments."""
    staged = staged_path(directory)
    shutil.rmtree(staged, ignore_errors=True)
    os.mkdir(staged)
    return staged


def discard(directory: str) -> None:
    """Drop a staging directory that will not be committed."""
    shutil.rmtree(staged_path(directory), ignore_errors=True)


def seal(staged: str, replaced_bases: list[int]) -> None:
    """Record which segments the staged ones replace; the staged files become durable."""
    with open(os.path.join(staged, _files.SWAP_REPLACES), "w") as f:
        f.write("".join(f"{base}\n" for base in replaced_bases))
        f.flush()
        os.fsync(f.fileno())
    _files.fsync_directory(staged)


def commit(staged: str, directory: str) -> None:
    """The commit point: the sealed staging directory becomes ``cleaner.swap``."""
    os.rename(staged, os.path.join(directory, _files.SWAP_DIR))
    _files.fsync_directory(directory)


def complete_pending_swap(directory: str) -> None:
    """Finish a committed swap (one left by a crash too); drop an uncommitted one."""
    discard(directory)
    swap = os.path.join(directory, _files.SWAP_DIR)
    if not os.path.isdir(swap):
        return
    replaces = os.path.join(swap, _files.SWAP_REPLACES)
    done = os.path.join(swap, _files.SWAP_UNLINKED)
    if os.path.exists(replaces):
        with open(replaces) as f:
            bases = [int(line) for line in f.read().split()]
        for base in bases:
            for name in _files.segment_file_names(base):
                try:
                    os.unlink(os.path.join(directory, name))
                except FileNotFoundError:
                    pass
        _files.fsync_directory(directory)
        os.rename(replaces, done)
        _files.fsync_directory(swap)
    for name in sorted(os.listdir(swap)):
        if name != _files.SWAP_UNLINKED:
            os.rename(os.path.join(swap, name), os.path.join(directory, name))
    _files.fsync_directory(directory)
    try:
        os.unlink(done)
    except FileNotFoundError:
        pass
    os.rmdir(swap)
    _files.fsync_directory(directory)
