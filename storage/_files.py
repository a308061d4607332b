"""Every file name the storage package uses, in one place.

A partition directory holds, per segment, three files named by the segment's base offset in
20 zero-padded digits (Kafka's convention):

    00000000000000000000.log        record batches, stored exactly as appended
    00000000000000000000.index      sparse offset index (see index.OffsetIndex)
    00000000000000000000.timeindex  sparse time index (see index.TimeIndex)
    00000000000000000000.txnindex   aborted transactions (see txn_index.py); only once the
                                    segment holds an abort marker

and, from earlier versions, ``log-offsets-checkpoint`` (the offsets now kept in the data
directory's ``partition-offsets-checkpoint``, see checkpoint.py). Files ending in
``.tmp`` are half-written replacements; they are removed when a log is opened. Other files in
the directory (producer snapshots, leader-epoch checkpoints written by the broker) are left
alone.

The log cleaner (cleaning/) builds compacted segments in the subdirectory ``cleaner.cleaned``
(discarded when a log is opened); ``Log.replace_segments`` commits them by renaming it to
``cleaner.swap`` (swap.py); a swap directory found at open is completed before anything else
is read.

``fsync_directory`` (exported by the package) and ``fsync_path`` are the one way to fsync by
name, and ``replace_file`` the one way to replace a small file whole, here and in the broker.
"""

from __future__ import annotations

import os

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
TEMP_SUFFIX = ".tmp"
CHECKPOINT_NAME = "log-offsets-checkpoint"  # per partition, earlier versions
OFFSETS_CHECKPOINT_NAME = "partition-offsets-checkpoint"  # per data directory
CLEANED_DIR = "cleaner.cleaned"
SWAP_DIR = "cleaner.swap"
SWAP_REPLACES = "replaces"  # in the swap directory: base offsets of the old segments
SWAP_UNLINKED = "replaces.done"  # ... renamed so once the old segments' files are gone

_DIGITS = 20
_SWAP_NAMES = (CLEANED_DIR, SWAP_DIR)


def segment_stem(base_offset: int) -> str:
    return f"{base_offset:0{_DIGITS}d}"


def log_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_stem(base_offset) + LOG_SUFFIX)


def index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_stem(base_offset) + INDEX_SUFFIX)


def time_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_stem(base_offset) + TIME_INDEX_SUFFIX)


def txn_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_stem(base_offset) + TXN_INDEX_SUFFIX)


def checkpoint_path(directory: str) -> str:
    return os.path.join(directory, CHECKPOINT_NAME)


def temp_path(path: str) -> str:
    return path + TEMP_SUFFIX


def parse_segment_base(name: str) -> int | None:
    """The base offset of a ``.log`` file name, or None for any other name."""
    if not name.endswith(LOG_SUFFIX):
        return None
    stem = name[: -len(LOG_SUFFIX)]
    if len(stem) != _DIGITS or not stem.isdigit():
        return None
    return int(stem)


def list_segment_bases(directory: str) -> list[int]:
    """Base offsets of the segments in a directory, ascending."""
    bases = []
    for name in os.listdir(directory):
        base = parse_segment_base(name)
        if base is not None:
            bases.append(base)
    bases.sort()
    return bases


_SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _is_segment_file(name: str) -> bool:
    stem, dot, suffix = name.partition(".")
    return (
        bool(dot) and len(stem) == _DIGITS and stem.isdigit() and "." + suffix in _SEGMENT_SUFFIXES
    )


def remove_temp_files_and_list(directory: str) -> tuple[list[int], list[str], bool]:
    """Remove half-written ``.tmp`` files; the base offsets of the segments, ascending, the
    names of the files that are not the log's (the broker's own), sorted, and whether a
    compaction swap is pending (``cleaner.cleaned`` or ``cleaner.swap`` is there): one
    directory listing for all, so opening many partitions lists each directory once."""
    bases = []
    others = []
    swap = False
    for name in os.listdir(directory):
        if name.endswith(TEMP_SUFFIX):
            os.unlink(os.path.join(directory, name))
            continue
        base = parse_segment_base(name)
        if base is not None:
            bases.append(base)
        elif name in _SWAP_NAMES:
            swap = True
        elif name != CHECKPOINT_NAME and not _is_segment_file(name):
            others.append(name)
    bases.sort()
    others.sort()
    return bases, others, swap


def segment_file_names(base_offset: int) -> list[str]:
    stem = segment_stem(base_offset)
    return [
        stem + INDEX_SUFFIX,
        stem + TIME_INDEX_SUFFIX,
        stem + TXN_INDEX_SUFFIX,
        stem + LOG_SUFFIX,
    ]


def fsync_path(path, missing_ok: bool = False) -> None:
    """Fsync a file or directory by name. ``missing_ok``: a file deleted meanwhile needs none."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory) -> None:
    """Make a directory's entries (files created, renamed or unlinked in it) durable."""
    fsync_path(directory)


def replace_file(path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace the file ``path`` with ``data``, all at once: ``data`` is written to
    ``path.tmp`` beside it, which is then renamed over it, so a reader (or a restart after a
    crash) finds the old contents or the new, never a mix. ``durable``: the new file is
    fsynced before the rename and its directory after it, so the new contents survive a crash
    once this returns. On a failure the ``.tmp`` file is removed and the error raised."""
    path = os.fspath(path)
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_directory(os.path.dirname(path) or ".")
