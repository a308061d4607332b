"""Segment and index files read as they are on disk, without a ``Log``: what the operator's
tools (``headrace dump-log``, ``headrace verify``) see.

How this works
--------------
``segment_batches(path)`` walks a ``.log`` file with the same batch scan the log uses
(``_batch.iter_batches``: sizes and headers, nothing else trusted) and reads each batch whole
to check its CRC-32C (``record_format.crc_matches``), yielding a ``StoredBatch``; a header
that cannot be a batch, or a batch running past the end of the file, ends the walk with
``CorruptSegment`` naming the position. ``index_entries`` reads an ``.index`` or
``.timeindex`` file through its class (``OffsetIndex``, ``TimeIndex``), in absolute offsets.

``check_segment`` compares the three files of a segment: every batch's CRC, base offsets
strictly above the previous batch's last offset (and not below the segment's base, and not
below ``next_offset`` from the segment before), every offset index entry pointing at the
position of a batch with that last offset (Kafka's key; the base offset, which earlier
Headrace versions wrote, is accepted too), every time index entry naming the last offset of
a batch and the largest timestamp up to it. ``check_partition`` does that for each segment of
a partition directory in order. Problems come back as ``Problem``\\ s (file, byte position,
what), in file order, so the first one is where the damage starts. Nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from headrace.record_format import BatchHeader, crc_matches, read_batch_header

from . import _files
from ._batch import BadBatch, iter_batches
from .index import OffsetIndex, TimeIndex
from .open_files import OpenFiles


class CorruptSegment(Exception):
    """A ``.log`` file holds something that is not a record batch at ``position``."""

    def __init__(self, path: str, position: int, message: str) -> None:
        super().__init__(f"{path}: position {position}: {message}")
        self.path, self.position, self.message = path, position, message


@dataclass(frozen=True, slots=True)
class StoredBatch:
    position: int
    header: BatchHeader
    crc_valid: bool
    data: bytes  # the whole batch as stored


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    position: int  # byte position in that file
    message: str

    def __str__(self) -> str:
        return f"{self.path}: position {self.position}: {self.message}"


@dataclass(slots=True)
class SegmentCheck:
    path: str
    base_offset: int
    next_offset: int  # one past the last offset of its last batch (base offset if none)
    batches: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)


def segment_batches(path: str) -> Iterator[StoredBatch]:
    """Every batch of the ``.log`` file ``path``, in file order; ``CorruptSegment`` at the
    first position that does not hold a whole batch."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        scan = iter_batches(fd, 0, size)
        while True:
            try:
                info = next(scan)
            except StopIteration:
                return
            except BadBatch as e:
                what = str(e).split(" at position", 1)[0]
                raise CorruptSegment(path, e.position, what) from e
            data = os.pread(fd, info.size, info.position)
            if len(data) < info.size:
                raise CorruptSegment(path, info.position, "file shrank while being read")
            yield StoredBatch(info.position, read_batch_header(data), crc_matches(data), data)
    finally:
        os.close(fd)


def index_entries(path: str) -> list[tuple[int, int]]:
    """The entries of an ``.index`` file as (offset, position), or of a ``.timeindex`` file
    as (timestamp, offset); offsets absolute. A torn last entry is left out."""
    stem, dot, _ = os.path.basename(path).rpartition(".")
    base = _files.parse_segment_base(stem + _files.LOG_SUFFIX) if dot else None
    if base is None:
        raise ValueError(f"{path} is not named like a segment file (20-digit base offset)")
    if path.endswith(_files.INDEX_SUFFIX):
        offsets = OffsetIndex(path, base, OpenFiles.shared())
        return [(base + rel, pos) for rel, pos in _entries(offsets)]
    if path.endswith(_files.TIME_INDEX_SUFFIX):
        times = TimeIndex(path, base, OpenFiles.shared())
        return [(ts, base + rel) for ts, rel in _entries(times)]
    raise ValueError(f"{path} is not an .index or .timeindex file")


def _entries(index: OffsetIndex | TimeIndex) -> list[tuple[int, int]]:
    try:
        raw = index.raw()
        whole = len(raw) - len(raw) % index.ENTRY_SIZE
        return list(index.ENTRY.iter_unpack(raw[:whole]))
    finally:
        index.close()


def check_segment(
    path: str, next_offset: int | None = None, progress: Callable[[int], None] | None = None
) -> SegmentCheck:
    """Check the segment whose ``.log`` file is ``path`` and its indexes. ``next_offset``:
    the offset after the previous segment's last batch. ``progress`` gets the bytes of each
    batch as it is checked."""
    name = os.path.basename(path)
    base = _files.parse_segment_base(name)
    if base is None:
        raise ValueError(f"{path} is not named like a segment (20-digit base offset + .log)")
    check = SegmentCheck(path, base, base)
    floor = max(base, next_offset if next_offset is not None else base)
    positions: dict[int, tuple[int, int]] = {}  # batch position -> (base, last offset)
    last_offsets: dict[int, int] = {}  # batch last offset -> largest max timestamp up to it
    biggest = -1
    prev_last: int | None = None
    try:
        for batch in segment_batches(path):
            h = batch.header
            check.batches += 1
            check.bytes += len(batch.data)
            if progress is not None:
                progress(len(batch.data))
            if not batch.crc_valid:
                check.problems.append(Problem(path, batch.position, "CRC-32C does not match"))
            if h.last_offset_delta < 0:
                check.problems.append(
                    Problem(path, batch.position, f"lastOffsetDelta {h.last_offset_delta}")
                )
            if prev_last is not None and h.base_offset <= prev_last:
                check.problems.append(
                    Problem(
                        path,
                        batch.position,
                        f"base offset {h.base_offset} not above the previous batch's last"
                        f" offset {prev_last}",
                    )
                )
            elif prev_last is None and h.base_offset < floor:
                check.problems.append(
                    Problem(
                        path,
                        batch.position,
                        f"base offset {h.base_offset} below {floor} (the segment's base offset"
                        " or the previous segment's end)",
                    )
                )
            positions[batch.position] = (h.base_offset, h.last_offset)
            biggest = max(biggest, h.max_timestamp)
            last_offsets[h.last_offset] = biggest
            prev_last = h.last_offset
            check.next_offset = h.last_offset + 1
    except CorruptSegment as e:
        check.problems.append(Problem(path, e.position, e.message))
        return check  # the indexes cannot be judged against a segment that cannot be read
    stem = path[: -len(_files.LOG_SUFFIX)]
    check.problems += _check_offset_index(stem + _files.INDEX_SUFFIX, base, positions)
    check.problems += _check_time_index(stem + _files.TIME_INDEX_SUFFIX, base, last_offsets)
    return check


def _check_offset_index(
    path: str, base: int, positions: dict[int, tuple[int, int]]
) -> list[Problem]:
    if not os.path.exists(path):
        return []  # indexes are hints: a missing one is rebuilt when the log is opened
    problems = []
    size = os.path.getsize(path)
    if size % OffsetIndex.ENTRY_SIZE:
        problems.append(Problem(path, size - size % OffsetIndex.ENTRY_SIZE, "torn last entry"))
    prev = -1
    for i, (offset, position) in enumerate(index_entries(path)):
        at = i * OffsetIndex.ENTRY_SIZE
        if offset <= prev:
            problems.append(Problem(path, at, f"offset {offset} not above the entry before"))
        elif offset not in positions.get(position, ()):
            if position in positions:
                first, last = positions[position]
                there = f"the batch of offsets {first} to {last}"
            else:
                there = "no batch"
            problems.append(
                Problem(
                    path,
                    at,
                    f"offset {offset} -> position {position}, where the segment has {there}",
                )
            )
        prev = offset
    return problems


def _check_time_index(path: str, base: int, last_offsets: dict[int, int]) -> list[Problem]:
    if not os.path.exists(path):
        return []
    problems = []
    size = os.path.getsize(path)
    if size % TimeIndex.ENTRY_SIZE:
        problems.append(Problem(path, size - size % TimeIndex.ENTRY_SIZE, "torn last entry"))
    prev_ts = None
    for i, (timestamp, offset) in enumerate(index_entries(path)):
        at = i * TimeIndex.ENTRY_SIZE
        if prev_ts is not None and timestamp < prev_ts:
            problems.append(Problem(path, at, f"timestamp {timestamp} below the entry before"))
        elif offset not in last_offsets:
            problems.append(Problem(path, at, f"offset {offset} is no batch's last offset"))
        elif last_offsets[offset] != timestamp:
            problems.append(
                Problem(
                    path,
                    at,
                    f"timestamp {timestamp} at offset {offset}, where the largest is"
                    f" {last_offsets[offset]}",
                )
            )
        prev_ts = timestamp
    return problems


def segment_paths(directory: str) -> list[str]:
    """The ``.log`` files of a partition directory, by base offset."""
    return [_files.log_path(directory, b) for b in _files.list_segment_bases(directory)]


def check_partition(
    directory: str, progress: Callable[[int], None] | None = None
) -> list[SegmentCheck]:
    """``check_segment`` for each segment of ``directory``, each from the end of the one
    before."""
    checks = []
    next_offset = None
    for path in segment_paths(directory):
        check = check_segment(path, next_offset, progress)
        checks.append(check)
        if check.batches:
            next_offset = check.next_offset
    return checks
