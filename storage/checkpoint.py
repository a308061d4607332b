"""The partition's offsets checkpoint: ``log-offsets-checkpoint`` in the partition directory.

Text, one ``key value`` pair per line, written to a temporary file, fsynced and renamed over
the old one (then the directory is fsynced), so a reader sees either the old or the new file:

    version 0
    recovery_point <int>        everything below it was fsynced
    log_start_offset <int>
    cleaner_offset <int>        optional: offsets below it were compacted (first dirty offset)
    end_offset <int>            only after a clean close: the log end offset, and the base
    end_segment <int>           offset and byte size of the active segment at that moment, so
    end_size <int>              a clean open needs no scan (ignored when the files differ)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _files

VERSION = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    recovery_point: int
    log_start_offset: int
    end_offset: int | None = None
    end_segment: int | None = None
    end_size: int | None = None
    cleaner_offset: int | None = None


def read_checkpoint(directory: str) -> Checkpoint | None:
    """The checkpoint, or None when it is missing or unreadable."""
    try:
        with open(_files.checkpoint_path(directory), encoding="ascii") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return None
    values: dict[str, int] = {}
    try:
        for line in text.splitlines():
            if not line.strip():
                continue
            key, value = line.split()
            values[key] = int(value)
        if values.get("version") != VERSION:
            return None
        return Checkpoint(
            recovery_point=values["recovery_point"],
            log_start_offset=values["log_start_offset"],
            end_offset=values.get("end_offset"),
            end_segment=values.get("end_segment"),
            end_size=values.get("end_size"),
            cleaner_offset=values.get("cleaner_offset"),
        )
    except (KeyError, ValueError):
        return None


def still_true(on_disk: Checkpoint | None, now: Checkpoint) -> bool:
    """Whether the file's checkpoint ``on_disk`` says what is true of the log now (``now``,
    with the clean-close fields): then a log recovered without finding anything new keeps
    it rather than rewriting it. Clean-close fields may stay only if they describe the files.
    """
    if on_disk is None:
        return False
    same = (on_disk.recovery_point, on_disk.log_start_offset, on_disk.cleaner_offset) == (
        now.recovery_point,
        now.log_start_offset,
        now.cleaner_offset,
    )
    return same and (on_disk.end_offset is None or on_disk == now)


def write_checkpoint(directory: str, cp: Checkpoint) -> None:
    lines = [
        f"version {VERSION}",
        f"recovery_point {cp.recovery_point}",
        f"log_start_offset {cp.log_start_offset}",
    ]
    if cp.cleaner_offset is not None:
        lines.append(f"cleaner_offset {cp.cleaner_offset}")
    if cp.end_offset is not None:
        lines += [
            f"end_offset {cp.end_offset}",
            f"end_segment {cp.end_segment}",
            f"end_size {cp.end_size}",
        ]
    data = ("\n".join(lines) + "\n").encode("ascii")
    path = _files.checkpoint_path(directory)
    tmp = _files.temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _files.fsync_directory(directory)
