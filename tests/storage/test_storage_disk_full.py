"""Disk full (ENOSPC) on a small tmpfs mounted by the test (needs root; skipped otherwise).

An append that does not fit fails with StorageError and leaves nothing behind: the log end
offset, the files and everything appended before are unchanged, reads keep working, and
appends succeed again once space is freed. A recovery afterwards finds exactly the
acknowledged batches.
"""

import os

import pytest

from headrace.storage import Log, LogConfig, StorageError
from storage_batches import Writer, split_batches


def read_everything(log):
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        bs = split_batches(log.read(off, 1 << 20))
        out += bs
        off = int.from_bytes(bs[-1][:8], "big") + int.from_bytes(bs[-1][23:27], "big") + 1
    return out


def fill(mnt, leave: int) -> str:
    """A file that takes all free space but ``leave`` bytes."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    path = os.path.join(mnt, "filler")
    with open(path, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return path


@pytest.mark.parametrize("small_disk", ["1m"], indirect=True)
def test_append_on_a_full_disk_fails_cleanly_and_resumes(small_disk, backend):
    cfg = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512, io_backend=backend)
    log = Log.open(small_disk / "t-0", cfg, recover=False)
    w = Writer(log, seed=1)
    w.append_many(20, value_size=300)
    filler = fill(small_disk, 48 * 1024)
    failures = 0
    for _ in range(400):
        leo = log.log_end_offset
        sizes = [s.size for s in log._segments]
        try:
            w.append(value_size=900)
        except StorageError as e:
            assert "No space left" in str(e)
            failures += 1
            assert log.log_end_offset == leo
            assert [s.size for s in log._segments][:len(sizes)] == sizes
            for s in log._segments:
                assert os.path.getsize(small_disk / "t-0" / f"{s.base_offset:020d}.log") == s.size
            if failures >= 5:
                break
    assert failures >= 5, "the disk never filled"
    assert read_everything(log) == w.batches  # reads keep working, nothing damaged
    try:
        log.flush()  # the checkpoint rewrite may fail for want of space; the data is fine
    except StorageError as e:
        assert "No space left" in str(e)
    assert read_everything(log) == w.batches
    os.unlink(filler)  # space returns
    w.append_many(30, value_size=900)
    log.flush()
    assert read_everything(log) == w.batches
    for s in log._segments:
        s.close()  # a crash: no clean-close checkpoint
    log2 = Log.open(small_disk / "t-0", cfg, recover=True)
    assert read_everything(log2) == w.batches
    log2.close()


@pytest.mark.parametrize("small_disk", ["1m"], indirect=True)
def test_roll_on_a_full_disk(small_disk, backend):
    cfg = LogConfig(segment_bytes=8 * 1024, index_interval_bytes=64, io_backend=backend)
    log = Log.open(small_disk / "t-0", cfg, recover=False)
    w = Writer(log, seed=2)
    filler = fill(small_disk, 0)
    errors = 0
    for _ in range(200):
        try:
            w.append(value_size=50)
        except StorageError:
            errors += 1
    assert errors
    assert read_everything(log) == w.batches
    os.unlink(filler)
    w.append_many(200, value_size=50)
    assert log.segment_count > 1
    assert read_everything(log) == w.batches
    log.close()
    log2 = Log.open(small_disk / "t-0", cfg, recover=True)  # indexes checked as well
    assert read_everything(log2) == w.batches
    for s in log2._segments:
        s.ensure_indexes(None)
    log2.close()
