"""Log compaction: keep the latest record per key (``cleanup.policy=compact``).

How this works
--------------
One pass, ``clean(log, ...)``, runs in a background thread and does its heavy work without
the log's lock; appends, flushes and reads go on meanwhile.

1. Plan (under the lock, cheap). The *cleanable* segments are the inactive ones from the
   first, stopping before the first segment holding a record younger than
   ``min_compaction_lag_ms``; the active segment is never cleaned. Offsets below
   ``log.cleaner_offset`` were compacted before (*clean*); the rest of the cleanable range is
   *dirty*. Segments reaching past ``below`` (an undecided transaction) are not cleanable
   either. The pass goes ahead when dirty bytes / cleanable bytes >= ``min_cleanable_dirty_ratio``.
2. Offset map (no lock). Read every dirty batch: key -> the greatest offset holding it.
3. Rewrite (no lock). Consecutive cleanable segments are grouped while their sizes add up to
   at most ``segment_bytes``; each group becomes one new segment in the subdirectory
   ``cleaner.cleaned``, named by the group's first base offset. A record survives when it
   has no key, its key is not in the map, or it is the map's offset for its key; a surviving
   tombstone (null value) is dropped once its timestamp is more than ``delete_retention_ms``
   old. A batch whose records all survive is copied byte for byte; one with some survivors
   is rebuilt (same base offset, lastOffsetDelta, base timestamp, producer fields and
   attributes; the surviving records' bytes copied verbatim, recompressed with the batch's
   own codec, new length, count, max timestamp and CRC); one with none is dropped. Control
   batches are copied. Indexes are built for the new files and everything is fsynced.
4. Swap (under the lock, a few renames). If the log still starts with exactly the planned
   segments (no retention, DeleteRecords or truncation meanwhile), the directory is renamed to
   ``cleaner.swap`` (the commit point), the old segments' files are unlinked, the new ones are
   moved in, and the segment list is updated; otherwise the work is thrown away. Readers that
   hold an old segment's file keep reading it (FileRef), and ``_generation`` is bumped so a
   reader that straddles the swap looks again. ``cleaner_offset`` becomes the end of the
   cleaned range and is checkpointed.

A crash between the commit point and the end of the swap leaves ``cleaner.swap`` behind;
``complete_pending_swap`` finishes it when the log is next opened: it unlinks the segments
listed in ``replaces`` (then renames that file ``replaces.done``, so a second crash does not
unlink the new files that took the same names) and moves the rest in. ``cleaner.cleaned``
(a pass that never committed) is simply removed.

Layering: storage imports nothing from the rest of the project, and batches are opaque bytes
to it. Compaction has to read keys, which may sit in compressed batches (gzip, snappy, lz4,
zstd); rather than carry codecs here, the caller passes ``decompress(codec, data)`` and
``compress(codec, data)`` (the broker hands in the protocol package's). The record walk itself
(boundaries, offset delta, key, null value) is small and lives in _records.py. Without the
codecs, compressed batches are copied unchanged and their keys ignored: data is kept, never
lost.

Not done (as in Kafka but not here): removing aborted transactional records and old control
batches, keeping an emptied batch of an idempotent producer, a bounded offset map (the map is
a dict of every dirty key), ``max.compaction.lag.ms``.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from dataclasses import dataclass
from typing import Callable

import crc32c

from . import _files
from ._batch import HEADER_SIZE, LOG_OVERHEAD, BadBatch, BatchInfo, iter_batches
from ._records import walk_records
from .errors import StorageError
from .segment import INT32_MAX, LogSegment

_log = logging.getLogger(__name__)

Codec = Callable[[int, bytes], bytes]

_ATTR = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
RECORDS_COUNT_OFFSET = 57
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    cleaned_up_to: int  # the new cleaner offset


class _Plan:
    __slots__ = ("segments", "ends", "first_dirty", "end_offset", "generation")


def clean(log, now_ms: int | None = None, *, decompress: Codec | None = None,
          compress: Codec | None = None, force: bool = False,
          below: int | None = None) -> CleanResult | None:
    """One compaction pass over ``log``; None when there was nothing (enough) to do.

    ``force`` ignores min_cleanable_dirty_ratio. ``below`` limits the pass to segments whose
    offsets all lie below it (the broker passes the last stable offset, so records of an
    undecided transaction are never compacted). Call from one thread at a time per log.
    """
    cfg = log.config
    if not cfg.compacts:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    plan = _plan(log, now_ms, force, below)
    if plan is None:
        return None
    try:
        offset_map = _offset_map(plan, decompress)
        groups = _groups(plan, cfg.segment_bytes)
        cleaned_dir = os.path.join(log.directory, _files.CLEANED_DIR)
        shutil.rmtree(cleaned_dir, ignore_errors=True)
        os.mkdir(cleaned_dir)
        horizon = now_ms - cfg.delete_retention_ms
        removed = 0
        for group in groups:
            removed += _rewrite(cleaned_dir, group, offset_map, horizon,
                                cfg.index_interval_bytes, decompress, compress)
        with open(os.path.join(cleaned_dir, _files.SWAP_REPLACES), "w") as f:
            f.write("".join(f"{seg.base_offset}\n" for seg, _, _ in plan.segments))
            f.flush()
            os.fsync(f.fileno())
        _files.fsync_directory(cleaned_dir)
    except (OSError, BadBatch) as e:
        shutil.rmtree(os.path.join(log.directory, _files.CLEANED_DIR), ignore_errors=True)
        raise StorageError(f"compaction of {log.directory} failed: {e}") from e
    result = _swap(log, plan, groups, removed)
    if result is not None:
        log._write_checkpoint(clean=False)
    return result


def _plan(log, now_ms: int, force: bool, below: int | None) -> _Plan | None:
    cfg = log.config
    with log._lock:
        if log._closed:
            return None
        segments = log._segments
        cleanable = []
        for i in range(len(segments) - 1):
            seg = segments[i]
            if below is not None and log._bases[i + 1] > below:
                break
            if cfg.min_compaction_lag_ms > 0:
                if log._segment_max_ts(i)[0] > now_ms - cfg.min_compaction_lag_ms:
                    break
            cleanable.append((seg, seg.size, seg.log_ref))
        if not cleanable:
            return None
        ends = log._bases[1:len(cleanable) + 1]  # each segment's offsets end below this
        end_offset = ends[-1]
        first_dirty = max(log.cleaner_offset, log.log_start_offset)
        if first_dirty >= end_offset:
            return None
        total = sum(size for _, size, _ in cleanable)
        dirty = sum(size for (_, size, _), end in zip(cleanable, ends) if end > first_dirty)
        if total == 0 or (not force and dirty / total < cfg.min_cleanable_dirty_ratio):
            return None
        plan = _Plan()
        plan.segments = cleanable
        plan.ends = ends
        plan.first_dirty = first_dirty
        plan.end_offset = end_offset
        plan.generation = log._generation
        return plan


def _batches(ref, size: int):
    """(BatchInfo, batch bytes) of a segment file, up to ``size``."""
    for info in iter_batches(ref.fd, 0, size):
        data = os.pread(ref.fd, info.size, info.position)
        if len(data) != info.size:
            raise BadBatch(f"short read at {info.position}")
        yield info, data


def _records(data: bytes, decompress: Codec | None):
    """(records section, walked records) of a data batch, or None to treat it as opaque."""
    attributes = _ATTR.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    if attributes & _CONTROL:
        return None
    count = _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
    payload = memoryview(data)[HEADER_SIZE:]
    codec = attributes & _COMPRESSION_MASK
    try:
        if codec:
            if decompress is None:
                return None
            payload = memoryview(decompress(codec, payload))
        return payload, list(walk_records(payload, count))
    except Exception as e:  # codec libraries raise their own types; BadRecords
        _log.warning("compaction keeps an unreadable batch at offset %d as it is: %s",
                     _INT64.unpack_from(data, 0)[0], e)
        return None


def _offset_map(plan: _Plan, decompress: Codec | None) -> dict[bytes, int]:
    offsets: dict[bytes, int] = {}
    first_dirty = plan.first_dirty
    for (seg, size, ref), end in zip(plan.segments, plan.ends):
        if end <= first_dirty:
            continue
        for info, data in _batches(ref, size):
            if info.last_offset < first_dirty:
                continue
            walked = _records(data, decompress)
            if walked is None:
                continue
            for r in walked[1]:
                if r.key is not None:
                    offsets[r.key] = info.base_offset + r.offset_delta
    return offsets


def _groups(plan: _Plan, segment_bytes: int) -> list[list[tuple]]:
    """Consecutive segments merged into one while the sizes fit in ``segment_bytes``."""
    groups: list[list[tuple]] = []
    total = 0
    for entry, end in zip(plan.segments, plan.ends):
        seg, size, _ref = entry
        if (groups and total + size <= segment_bytes
                and end - 1 - groups[-1][0][0].base_offset <= INT32_MAX):
            groups[-1].append(entry)
            total += size
        else:
            groups.append([entry])
            total = size
    return groups


def _rewrite(cleaned_dir: str, group: list[tuple], offsets: dict[bytes, int], horizon: int,
             index_interval: int, decompress: Codec | None, compress: Codec | None) -> int:
    """Write one group's surviving batches as a segment in ``cleaned_dir``; records removed."""
    base = group[0][0].base_offset
    out = LogSegment.create(cleaned_dir, base, index_interval)
    fd = out.log_ref.fd
    position = 0
    written: list[BatchInfo] = []
    removed = 0
    for _seg, size, ref in group:
        for info, data in _batches(ref, size):
            new = _filter_batch(info, data, offsets, horizon, decompress, compress)
            if new is None:
                removed += _INT32.unpack_from(data, RECORDS_COUNT_OFFSET)[0]
                continue
            batch, dropped = new
            removed += dropped
            view = memoryview(batch)
            while view:
                view = view[os.write(fd, view):]
            max_ts = _INT64.unpack_from(batch, 35)[0]
            written.append(BatchInfo(position, len(batch), info.base_offset, info.last_offset,
                                     max_ts))
            position += len(batch)
    out.size = position
    out.deactivate()
    out.write_indexes(written)
    os.fsync(fd)
    for path in (out.offset_index.path, out.time_index.path):
        f = os.open(path, os.O_RDONLY)
        try:
            os.fsync(f)
        finally:
            os.close(f)
    out.close()
    return removed


def _filter_batch(info: BatchInfo, data: bytes, offsets: dict[bytes, int], horizon: int,
                  decompress: Codec | None, compress: Codec | None):
    """(batch bytes, records dropped), or None when no record survives."""
    walked = _records(data, decompress)
    if walked is None:
        return data, 0
    payload, records = walked
    attributes = _ATTR.unpack_from(data, ATTRIBUTES_OFFSET)[0]
    base_ts = _INT64.unpack_from(data, BASE_TIMESTAMP_OFFSET)[0]
    log_append = attributes & _LOG_APPEND_TIME
    batch_max_ts = _INT64.unpack_from(data, 35)[0]
    kept = []
    for r in records:
        if r.key is not None:
            latest = offsets.get(r.key)
            if latest is not None and info.base_offset + r.offset_delta < latest:
                continue
            if r.tombstone:
                ts = batch_max_ts if log_append else base_ts + r.timestamp_delta
                if ts < horizon:
                    continue
        kept.append(r)
    if len(kept) == len(records):
        return data, 0
    if not kept:
        return None
    codec = attributes & _COMPRESSION_MASK
    body = b"".join(bytes(payload[r.start:r.end]) for r in kept)
    if codec:
        if compress is None:
            return data, 0
        body = compress(codec, body)
    batch = bytearray(data[:HEADER_SIZE])
    batch += body
    _INT32.pack_into(batch, 8, len(batch) - LOG_OVERHEAD)
    _INT32.pack_into(batch, RECORDS_COUNT_OFFSET, len(kept))
    if not log_append:
        _INT64.pack_into(batch, 35, base_ts + max(r.timestamp_delta for r in kept))
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch), len(records) - len(kept)


def _swap(log, plan: _Plan, groups: list[list[tuple]], removed: int) -> CleanResult | None:
    directory = log.directory
    cleaned_dir = os.path.join(directory, _files.CLEANED_DIR)
    old = [seg for seg, _, _ in plan.segments]
    with log._lock:
        current = log._segments[:len(old)]
        if (log._closed or log._generation != plan.generation
                or len(current) != len(old)
                or any(a is not b or a.deleted for a, b in zip(current, old))):
            shutil.rmtree(cleaned_dir, ignore_errors=True)
            return None
        try:
            os.rename(cleaned_dir, os.path.join(directory, _files.SWAP_DIR))
            _files.fsync_directory(directory)  # committed
            complete_pending_swap(directory)
            interval = log.config.index_interval_bytes
            new = [LogSegment.open_existing(directory, g[0][0].base_offset, interval)
                   for g in groups]
        except OSError as e:
            # the swap directory is complete on disk and is finished at the next open; until
            # then keep serving the old segments through their open descriptors
            raise StorageError(f"compaction swap in {directory} failed: {e}") from e
        for seg in old:
            seg.deleted = True
        n = len(old)
        log._segments[:n] = new
        log._bases[:n] = [s.base_offset for s in new]
        log._inactive_bytes = sum(s.size for s in log._segments[:-1])
        log._generation += 1
        log._max_ts = None
        log.cleaner_offset = plan.end_offset
        before = sum(size for _, size, _ in plan.segments)
        after = sum(s.size for s in new)
    return CleanResult(len(old), len(new), before, after, removed, plan.end_offset)


def complete_pending_swap(directory: str) -> None:
    """Finish a committed swap left by a crash; drop an uncommitted one (see module doc)."""
    shutil.rmtree(os.path.join(directory, _files.CLEANED_DIR), ignore_errors=True)
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
