"""No-wait reads (``Log.read_region(nowait=True)``, what the broker's event loop reads with):
the same answer as a read that may wait whenever everything is in memory, and WouldBlock,
holding nothing, wherever the read would wait: data not in the page cache, an old segment's
index mapped but not resident, a descriptor to open, indexes to load, the log's lock held."""

import mmap
import os
import threading

import pytest

from headrace.storage import FileRegion, Log, OpenFiles, WouldBlock, nowait_reads
from headrace.storage.io import pread_nowait
from storage_batches import Writer

from conftest import SMALL
from test_storage_regions import check_random_reads, region_bytes

pages = pytest.importorskip("headrace.storage._pages", reason="the C extension was not built")
pytestmark = pytest.mark.skipif(not nowait_reads(), reason="no RWF_NOWAIT reads here")


def drop_cache(directory) -> None:
    """Evict the directory's files from the page cache (they must be clean: flushed)."""
    for name in os.listdir(directory):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def test_resident_tells_whether_a_mapping_would_read_the_disk(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(256 * 1024))
    drop_cache(tmp_path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert not pages.resident(m)  # mapped, never touched, evicted
        assert m[:] == path.read_bytes()
        assert pages.resident(m)
    assert pages.resident(b"") and pages.resident(bytearray(10))
    with pytest.raises(TypeError):
        pages.resident(3)


def test_pread_nowait_reads_only_the_page_cache(tmp_path):
    path = tmp_path / "f"
    data = os.urandom(64 * 1024)
    path.write_bytes(data)
    drop_cache(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(WouldBlock):
            pread_nowait(fd, len(data), 0)
        assert os.pread(fd, len(data), 0) == data
        assert pread_nowait(fd, len(data), 0) == data
        with pytest.raises(WouldBlock):  # past the end: fewer bytes than asked for
            pread_nowait(fd, 10, len(data) - 5)
    finally:
        os.close(fd)


@pytest.mark.parametrize("seed", range(2))
def test_nowait_reads_answer_as_reads_do_once_everything_is_in_memory(open_log, seed):
    log = open_log()  # 4 KiB segments: most reads are of old segments, their indexes mapped
    w = Writer(log, seed=seed)
    w.append_many(300)
    assert len(log._bases) > 10
    for base in log._bases:  # a read of each segment opens its file and maps its index
        log.read(base, 1)
    assert check_random_reads(log, w.batches, seed, 500, nowait=True) > 100
    assert check_random_reads(log, w.batches, seed, 200, copy_below=10**9, nowait=True) == 0


def test_a_nowait_read_raises_where_it_would_wait_and_holds_nothing(log_dir, tmp_path):
    files = OpenFiles(max_open=64)
    log = Log.open(log_dir, SMALL, recover=False, files=files)
    Writer(log, seed=7).append_many(200)
    expected = log.read(0, 10**9)
    last = log._bases[-1]
    log.close()
    drop_cache(log_dir)
    assert files.open_count == 0

    log = Log.open(log_dir, SMALL, recover=False, files=files)
    try:
        # reopened: no descriptor open, no index loaded, nothing in the page cache
        for offset in (0, last):
            with pytest.raises(WouldBlock):
                log.read_region(offset, 10**9, nowait=True)
        assert files.open_count == 0
        # a read that may wait opens, maps and reads; the next no-wait read needs none of it
        assert log.read(0, 10**9) == expected
        assert region_bytes(log.read_region(0, 10**9, nowait=True)) == expected

        # the segment's data evicted again (its descriptor and index stay): WouldBlock
        drop_cache(log_dir)
        with pytest.raises(WouldBlock):
            log.read_region(0, 10**9, copy_below=10**9, nowait=True)
        assert log.read(0, 10**9) == expected

        # the old segment's index mapped but no longer in memory (its data still is)
        index = log._segments[0].offset_index
        mapping = index._mapped.acquire()
        try:
            mapping.madvise(mmap.MADV_DONTNEED)  # out of this process's page tables...
        finally:
            index._mapped.release()
        fd = os.open(index.path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # ...and out of the page cache
        os.close(fd)
        with pytest.raises(WouldBlock):
            log.read_region(0, 10**9, nowait=True)
        assert region_bytes(log.read_region(0, 10**9)) == expected

        # the log's lock held by another thread: WouldBlock, not a wait
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with log._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        try:
            with pytest.raises(WouldBlock):
                log.read_region(0, 10**9, nowait=True)
        finally:
            release.set()
            holder.join()
        assert region_bytes(log.read_region(0, 10**9)) == expected
    finally:
        log.close()
    assert files.open_count == 0  # no pin was left behind by a read that stopped
