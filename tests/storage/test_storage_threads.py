"""Concurrency: a flush thread and reader threads against an appending owner thread."""

import random
import struct
import threading

import crc32c

from headrace.storage import Log, LogConfig, OffsetOutOfRange
from storage_batches import Writer, last_offset, split_batches
from test_storage_log import read_all

CFG = LogConfig(segment_bytes=8192, index_interval_bytes=512)


def valid_batches(data):
    for b in split_batches(data):
        assert b[16] == 2
        assert struct.unpack_from(">I", b, 17)[0] == crc32c.crc32c(b[21:])


def run_threads(targets):
    errors = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    return threads, errors


def test_flush_thread_while_appending_and_rolling(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=1)
    stop = threading.Event()
    observed = []

    def flusher():
        while not stop.is_set():
            leo_before = log.log_end_offset
            log.flush()
            rp = log.recovery_point
            assert rp >= leo_before, (rp, leo_before)
            assert rp <= log.log_end_offset
            observed.append(rp)

    threads, errors = run_threads([flusher])
    for _ in range(3000):
        w.append()
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert observed == sorted(observed)
    assert len(observed) > 10
    assert log.segment_count > 20
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert read_all(log) == w.batches
    log.close()
    log = Log.open(tmp_path / "t-0", CFG, recover=True)
    assert read_all(log) == w.batches
    log.close()


def test_readers_while_appending(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=2)
    w.append_many(20)
    by_base = {}
    for b in w.batches:
        by_base[int.from_bytes(b[:8], "big")] = b
    stop = threading.Event()
    counts = []

    def reader(seed):
        def run():
            rng = random.Random(seed)
            n = 0
            while not stop.is_set():
                leo = log.log_end_offset
                offset = rng.randrange(leo)
                data = log.read(offset, rng.choice([1, 500, 5000]), rng.choice([None, leo]))
                batches = split_batches(data)
                assert int.from_bytes(batches[0][:8], "big") <= offset <= last_offset(batches[0])
                for b in batches:
                    assert by_base[int.from_bytes(b[:8], "big")] == b
                n += 1
            counts.append(n)
        return run

    threads, errors = run_threads([reader(i) for i in range(3)])
    for _ in range(3000):
        b = w.append()
        by_base[int.from_bytes(b[:8], "big")] = b
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert min(counts) > 10
    assert read_all(log) == w.batches
    log.close()


def test_readers_while_segments_are_deleted_and_truncated(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=3)
    w.append_many(200)
    stop = threading.Event()
    reads = []

    def reader(seed):
        def run():
            rng = random.Random(seed)
            n = 0
            while not stop.is_set():
                start, leo = log.log_start_offset, log.log_end_offset
                if leo <= start:
                    continue
                try:
                    data = log.read(rng.randrange(start, leo), rng.choice([1, 3000, 100000]))
                except OffsetOutOfRange:
                    continue
                if data:
                    valid_batches(data)
                n += 1
            reads.append(n)
        return run

    def time_reader():
        while not stop.is_set():
            got = log.offset_for_timestamp(random.randrange(0, 5000))
            if got is not None:
                valid_batches(got[1])
            try:
                for header in log.batch_headers(log.log_start_offset):
                    assert len(header) == 61 and header[16] == 2
            except OffsetOutOfRange:
                pass
            log.max_timestamp()

    threads, errors = run_threads([reader(i) for i in range(2)] + [time_reader])
    rng = random.Random(4)
    for i in range(1500):
        w.append()
        if i % 50 == 0:
            log.delete_records_before(max(log.log_start_offset,
                                          log.log_end_offset - rng.randint(50, 300)))
        if i % 170 == 0:
            log.truncate_to(log.log_end_offset - rng.randint(1, 40))
            del w.batches[:]  # the model is no longer tracked; the readers check structure
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert min(reads) > 10
    valid_batches(b"".join(read_all(log, start=log.log_start_offset)))
    log.close()


def test_close_while_a_flush_thread_runs(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=5)
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            log.flush()

    threads, errors = run_threads([flusher, flusher])
    w.append_many(500)
    log.close()
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    assert read_all(log) == w.batches
    log.close()
