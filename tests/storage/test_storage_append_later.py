"""Appends reserved on the owner thread and written by a writer thread (``Log.append_later``).

The reserved offsets are the next append's; readers see a reservation only once a writer has
written it; the writes of one log run in reservation order; a roll due at a reservation waits
for the writes ahead of it; a failed write fails the ones behind it and leaves the log as it
was; every other owner operation waits for the writes first.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from headrace.storage import Log, LogConfig, StorageError
from headrace.storage.append import DIRECT_GROUP
from conftest import SMALL
from storage_batches import last_offset, make_batch, max_ts, split_batches


def read_all(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        got = split_batches(log.read(offset, 1 << 20))
        out += got
        offset = last_offset(got[-1]) + 1
    return out


def reserve(log: Log, count: int = 3, value_size: int = 100):
    """Reserve one batch of ``count`` records at the next offset: (batch, write)."""
    batch = make_batch(log.next_offset, count, value_size=value_size)
    return batch, log.append_later(batch, log.next_offset, last_offset(batch), max_ts(batch))


def test_a_reservation_is_readable_only_once_written(open_log):
    log = open_log()
    first, write = reserve(log)
    assert (log.next_offset, log.log_end_offset, log.writing) == (3, 0, True)
    second, write2 = reserve(log)
    assert log.next_offset == 6 and int.from_bytes(second[:8], "big") == 3
    assert read_all(log) == []
    write()
    assert log.log_end_offset == 3 and read_all(log) == [first]
    write2()
    assert (log.next_offset, log.log_end_offset, log.writing) == (6, 6, False)
    assert read_all(log) == [first, second]


def test_writes_in_a_thread_roll_segments_and_survive_a_reopen(open_log, log_dir, backend):
    """Small segments: many reservations need a roll, which waits for the writes ahead."""
    log = open_log()
    writer = ThreadPoolExecutor(1)
    batches, futures = [], []
    for i in range(300):
        batch, write = reserve(log, count=1 + i % 4, value_size=50 + i % 200)
        batches.append(batch)
        futures.append(writer.submit(write))
        assert log.log_end_offset <= log.next_offset
    for f in futures:
        f.result(10)
    writer.shutdown()
    assert log.segment_count > 10
    assert read_all(log) == batches
    for b in batches[::37]:  # index lookups find every batch
        assert split_batches(log.read(int.from_bytes(b[:8], "big"), 1 << 16))[0] == b
    log.close()
    reopened = open_log(recover=True)
    assert read_all(reopened) == batches


class FailingWrites:
    """An I/O backend whose writes fail (ENOSPC) while ``failing`` is set."""

    def __init__(self, backend) -> None:
        self.backend, self.failing = backend, False

    def write_all(self, fd, data, n, position):
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.backend.write_all(fd, data, n, position)

    def __getattr__(self, name):
        return getattr(self.backend, name)


def test_a_failed_write_fails_the_ones_behind_it_and_leaves_the_log_as_it_was(open_log):
    log = open_log(LogConfig(segment_bytes=1 << 20))
    kept, write = reserve(log)
    write()
    log._io = FailingWrites(log._io)
    log._io.failing = True
    writes = [reserve(log)[1] for _ in range(3)]
    assert log.next_offset == 12
    for w in writes:
        with pytest.raises(StorageError):
            w()
    assert read_all(log) == [kept]
    log._io.failing = False
    # until the owner says it knows, the failed offsets stay taken and every append fails
    assert (log.next_offset, log.log_end_offset, log.writing) == (12, 3, True)
    late, write = reserve(log)
    with pytest.raises(StorageError, match="earlier one failed"):
        write()
    with pytest.raises(StorageError, match="earlier one failed"):
        log.append(late, 3, last_offset(late), max_ts(late))
    log.failure_seen()
    assert (log.next_offset, log.log_end_offset, log.writing) == (3, 3, False)
    after, write = reserve(log)
    assert int.from_bytes(after[:8], "big") == 3  # the failed offsets are given again
    write()
    assert read_all(log) == [kept, after]


def test_owner_operations_wait_for_the_writes(open_log):
    log = open_log(LogConfig(segment_bytes=1 << 20))
    first, write = reserve(log)
    timer = threading.Timer(0.2, write)
    timer.start()
    started = time.monotonic()
    second = make_batch(3, 2)
    log.append(second, 3, 4, max_ts(second))  # waits for the reservation ahead of it
    assert time.monotonic() - started >= 0.15
    assert read_all(log) == [first, second]
    _, write = reserve(log)
    threading.Timer(0.2, write).start()
    log.truncate_to(3)  # waits, then cuts what it wrote
    assert read_all(log) == [first] and log.next_offset == 3
    third, write = reserve(log)
    threading.Timer(0.2, write).start()
    log.close()  # waits for the write, which the close then covers
    reopened = open_log(recover=True)
    assert read_all(reopened) == [first, third]


def test_a_reservation_must_take_the_next_offset(open_log):
    log = open_log()
    _, write = reserve(log)
    batch = make_batch(0)
    with pytest.raises(ValueError):
        log.append_later(batch, 0, 0, max_ts(batch))
    write()


def test_direct_writes_keep_every_byte_and_the_file_ends_where_the_log_does(open_log, log_dir):
    """``direct=True`` writes around the page cache in whole 4 KiB blocks, 1 MiB at a time.
    Between appends made in the page cache, at positions no block boundary aligns, across rolls
    and in several writes: every byte reads back, the segment files end where the log does
    after each write, and both a copy taken with the log still open (as after a crash) and a
    reopen find the same batches."""
    log = open_log(dataclasses.replace(SMALL, segment_bytes=64 * 1024))
    batches = []
    for i in range(40):
        size = 700 + 1031 * (i % 9) if i % 10 else (5 << 19) + 123  # 2.5 MiB: three writes
        batch = make_batch(log.next_offset, 1 + i % 3, value_size=size)
        if i % 4 == 0:
            log.append(batch, log.next_offset, last_offset(batch), max_ts(batch))
        else:
            log.append_later(
                batch, log.next_offset, last_offset(batch), max_ts(batch), direct=True
            )()
        batches.append(batch)
        on_disk = sum(p.stat().st_size for p in log_dir.glob("*.log"))
        assert on_disk == log.size_in_bytes
    assert log.segment_count > 3
    assert read_all(log) == batches
    log.flush()
    shutil.copytree(log_dir, log_dir.with_name("copy-0"))
    assert read_all(open_log(recover=True, path=log_dir.with_name("copy-0"))) == batches
    log.close()
    assert read_all(open_log()) == batches


def reserve_direct(log: Log, value_sizes: list[int]) -> list[tuple[bytes, object]]:
    """Direct reservations of two-record batches of these value sizes: (batch, write)."""
    out = []
    for size in value_sizes:
        batch = make_batch(log.next_offset, 2, value_size=size)
        write = log.append_later(
            batch, log.next_offset, last_offset(batch), max_ts(batch), direct=True
        )
        out.append((batch, write))
    return out


def test_direct_writes_queued_together_are_written_by_the_first_ones_call(open_log, log_dir):
    """The first call writes the direct reservations queued behind it on its segment, up to
    ``DIRECT_GROUP`` bytes, in one write; readers see them at once, the calls of the ones it
    took find them written, and every byte reads back, also after a reopen."""
    log = open_log(dataclasses.replace(SMALL, segment_bytes=64 << 20))
    reserved = reserve_direct(log, [700, 5000, 1 << 19, 333, 3 << 19, 1000])
    batches = [b for b, _ in reserved]
    assert sum(map(len, batches[:5])) > DIRECT_GROUP >= sum(map(len, batches[:4]))
    reserved[0][1]()
    end, seen = log.log_end_offset, read_all(log)
    for _, write in reserved[1:]:
        write()
    assert (end, seen) == (last_offset(batches[3]) + 1, batches[:4])  # four, in one write
    assert (log.log_end_offset, log.writing) == (last_offset(batches[-1]) + 1, False)
    assert sum(p.stat().st_size for p in log_dir.glob("*.log")) == log.size_in_bytes
    assert read_all(log) == batches
    log.close()
    assert read_all(open_log()) == batches


@pytest.mark.parametrize("small_disk", ["4m"], indirect=True)
def test_direct_writes_taken_together_store_what_fits_on_a_full_disk(open_log, small_disk):
    """A write of several reservations that does not fit: the ones that fit are stored (each
    then written on its own), the others fail and leave the log and its file as they were;
    once there is room, their offsets are given again."""
    log = open_log(LogConfig(segment_bytes=64 << 20), path=small_disk / "t-0")
    kept = [b for b, write in reserve_direct(log, [3000]) if write() is None]
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (os.statvfs(small_disk).f_bavail * 4096 - (160 << 10)))
    reserved = reserve_direct(log, [30_000] * 4)  # room for two of the four
    errors = []
    for batch, write in reserved:
        try:
            write()
            kept.append(batch)
        except StorageError as e:
            errors.append(str(e))
    assert len(kept) == 3 and "No space left" in errors[0] and "earlier one" in errors[1], errors
    log.failure_seen()
    end = last_offset(kept[-1]) + 1
    assert (log.next_offset, log.log_end_offset, log.writing) == (end, end, False)
    assert (small_disk / "t-0" / f"{0:020d}.log").stat().st_size == log.size_in_bytes
    assert read_all(log) == kept
    filler.unlink()
    again = reserve_direct(log, [30_000, 30_000])
    assert int.from_bytes(again[0][0][:8], "big") == end
    for _, write in again:
        write()
    assert read_all(log) == kept + [b for b, _ in again]
    log.close()
    reopened = open_log(LogConfig(segment_bytes=64 << 20), path=small_disk / "t-0")
    assert read_all(reopened) == kept + [b for b, _ in again]


@pytest.fixture
def ramfs(tmp_path):
    """A ramfs mounted for the test: a file system that refuses ``O_DIRECT``. Needs root."""
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mnt)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a ramfs (needs root): {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_direct_writes_go_through_the_page_cache_where_the_file_system_refuses_them(
    open_log, ramfs
):
    log = open_log(path=ramfs / "topic-0")
    batches = []
    for i in range(6):
        batch = make_batch(log.next_offset, 2, value_size=5000 + 777 * i)
        log.append_later(batch, log.next_offset, last_offset(batch), max_ts(batch), direct=True)()
        batches.append(batch)
    assert read_all(log) == batches
    log.close()
    assert read_all(open_log(path=ramfs / "topic-0")) == batches
