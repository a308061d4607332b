"""File descriptors as a budget: many logs share a small OpenFiles, files are opened on demand
and closed least recently used first; appends, flushes, reads and reopening stay correct and
the process never holds more descriptors than the budget. Runs against both I/O backends."""

import dataclasses
import os
import random
import resource
import threading

import pytest

from headrace.storage import Log, LogConfig, OpenFiles, OpenFilesExhausted, StorageError
from storage_batches import Writer, last_offset, split_batches
from test_storage_log import read_all

CFG = LogConfig(segment_bytes=2048, index_interval_bytes=128, segment_index_bytes=4096)
BUDGET = 16


def fd_count(under=None) -> int:
    """The process's open descriptors; with ``under``, only those of files below that
    directory (other tests' clients in this process may hold a socket for a moment)."""
    fds = os.listdir("/proc/self/fd")
    if under is None:
        return len(fds)
    prefix = str(under) + os.sep
    count = 0
    for fd in fds:
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
        except OSError:
            pass  # closed meanwhile
    return count


@pytest.fixture
def cfg(backend):
    return dataclasses.replace(CFG, io_backend=backend)


def test_many_logs_within_a_small_budget(tmp_path, cfg):
    files = OpenFiles(BUDGET)
    before = fd_count(tmp_path)
    n = 200
    logs, writers = [], []
    for i in range(n):
        log = Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files)
        logs.append(log)
        writers.append(Writer(log, seed=i))
        assert fd_count(tmp_path) - before <= BUDGET
    rng = random.Random(1)
    for rounds in range(3):
        for i in rng.sample(range(n), n):
            writers[i].append_many(rng.randint(1, 6))
            if i % 3 == rounds:
                logs[i].flush()
            assert fd_count(tmp_path) - before <= BUDGET
        for i in range(0, n, 7):
            assert read_all(logs[i]) == writers[i].batches
            assert fd_count(tmp_path) - before <= BUDGET
    for log in logs:
        log.flush()
        assert log.recovery_point == log.log_end_offset
    assert files.peak <= BUDGET
    assert files.evictions > 0  # the budget was what kept descriptors closed
    for log in logs:
        log.close()
    assert fd_count(tmp_path) == before  # closed logs hold nothing

    again = [Log.open(tmp_path / f"t-{i}", cfg, recover=i % 2 == 0, files=files) for i in range(n)]
    assert fd_count(tmp_path) - before <= BUDGET
    for log, w in zip(again, writers):
        assert read_all(log) == w.batches
        assert fd_count(tmp_path) - before <= BUDGET
        w.log = log
        w.append_many(2)
    for log in again:
        log.close()
    assert fd_count(tmp_path) == before
    assert files.peak <= BUDGET
    for i, w in enumerate(writers):
        log = Log.open(tmp_path / f"t-{i}", cfg, recover=True, files=files)
        assert read_all(log) == w.batches
        log.close()
    assert fd_count(tmp_path) == before


def test_idle_logs_hold_no_descriptors(tmp_path, cfg):
    files = OpenFiles(BUDGET)
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(20)]
    for i, log in enumerate(logs):
        Writer(log, seed=i).append_many(30)  # several segments each
        log.close()
    before = fd_count(tmp_path)
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(20)]
    assert fd_count(tmp_path) == before  # a clean open opens nothing to keep
    assert files.open_count == 0
    assert all(log.segment_count > 1 for log in logs)
    for log in logs:
        log.close()
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=True, files=files) for i in range(20)]
    assert fd_count(tmp_path) == before  # recovery closes what it opened to check
    assert files.open_count == 0
    for log in logs:
        log.close()


def test_evicted_dirty_file_is_fsynced_before_close_and_flush_covers_it(tmp_path, cfg):
    files = OpenFiles(8)
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(30)]
    writers = [Writer(log, seed=i) for i, log in enumerate(logs)]
    writers[0].append_many(3)
    first = logs[0]._active.log_file
    assert first.dirty
    for w in writers[1:]:
        w.append_many(3)  # pushes the first log's descriptor out
    assert first.res is None and not first.dirty  # fsynced, then closed
    first_rp = logs[0].recovery_point
    logs[0].flush()  # nothing left to fsync, but the recovery point advances
    assert logs[0].recovery_point == logs[0].log_end_offset > first_rp
    for log in logs:
        log.close()


def test_budget_exhausted_is_a_storage_error_naming_the_limit(tmp_path, cfg):
    files = OpenFiles(8)
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(9)]
    held = [log._active.log_file for log in logs[:8]]
    for f in held:
        f.acquire()  # every descriptor of the budget in use
    try:
        with pytest.raises(StorageError) as caught:
            Writer(logs[8], seed=1).append_many(1)
        assert "log.max.open.files=8" in str(caught.value)
        assert "RLIMIT_NOFILE" in str(caught.value)
    finally:
        for f in held:
            f.release()
    Writer(logs[8], seed=2).append_many(1)  # fine again once descriptors are free
    for log in logs:
        log.close()


def test_emfile_from_the_os_is_a_storage_error(tmp_path, cfg):
    files = OpenFiles(1000)  # a budget the process limit cannot honour
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(40)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    errors = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (fd_count() + 10, hard))
    try:
        for i, log in enumerate(logs):
            try:
                Writer(log, seed=i).append_many(1)
            except StorageError as e:
                errors.append(e)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert errors, "the process limit was reached"
    assert all("RLIMIT_NOFILE" in str(e) and "log.max.open.files" in str(e) for e in errors)
    for log in logs:
        log.close()


def test_exhausted_is_both_a_storage_error_and_an_os_error():
    files = OpenFiles(8)
    err = files._exhausted("test")
    assert isinstance(err, OpenFilesExhausted)
    assert isinstance(err, StorageError) and isinstance(err, OSError)


def test_readers_flusher_and_appender_share_a_tiny_budget(tmp_path, cfg):
    files = OpenFiles(12)
    n = 24
    logs = [Log.open(tmp_path / f"t-{i}", cfg, recover=False, files=files) for i in range(n)]
    writers = [Writer(log, seed=i) for i, log in enumerate(logs)]
    stop = threading.Event()
    failures = []

    def reader(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            log = logs[rng.randrange(n)]
            try:
                end = log.log_end_offset
                offset = log.log_start_offset
                while offset < end:
                    data = log.read(offset, 4096, max_offset=end)
                    if not data:
                        break
                    offset = last_offset(split_batches(data)[-1]) + 1
            except OpenFilesExhausted:
                pass  # every descriptor pinned at that moment: a storage error, not a crash
            except Exception as e:  # noqa: BLE001
                failures.append(e)

    def flusher():
        while not stop.is_set():
            for log in logs:
                try:
                    log.flush()
                except OpenFilesExhausted:
                    pass
                except Exception as e:  # noqa: BLE001
                    failures.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    threads.append(threading.Thread(target=flusher))
    for t in threads:
        t.start()
    try:
        rng = random.Random(5)
        for _ in range(600):
            writers[rng.randrange(n)].append_many(1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    assert files.peak <= 12
    for log, w in zip(logs, writers):
        log.flush()
        assert read_all(log) == w.batches
        log.close()
