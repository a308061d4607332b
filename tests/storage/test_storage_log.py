"""Append/read round trips, read limits, restart, truncation, deletion, timestamps."""

import bisect
import os
import random

import pytest

from headrace.storage import Log, LogConfig, OffsetOutOfRange
from storage_batches import Writer, last_offset, make_batch, max_ts, split_batches


def base_of(b: bytes) -> int:
    return int.from_bytes(b[:8], "big")


def expected_read(log, batches, offset, max_bytes, max_offset=None):
    """The reference answer: read stops at the end of the segment holding the first batch."""
    leo = log.log_end_offset
    if offset == leo:
        return b""
    hw = leo if max_offset is None else min(leo, max_offset)
    bases = [base_of(b) for b in batches]
    k = next(i for i, b in enumerate(batches) if last_offset(b) >= offset)
    if bases[k] >= hw:
        return b""
    seg_bases = log._bases
    seg = bisect.bisect_right(seg_bases, bases[k]) - 1
    seg_end = seg_bases[seg + 1] if seg + 1 < len(seg_bases) else None
    out = [batches[k]]
    total = len(batches[k])
    for b in batches[k + 1:]:
        if seg_end is not None and base_of(b) >= seg_end:
            break
        if base_of(b) >= hw or total + len(b) > max_bytes:
            break
        out.append(b)
        total += len(b)
    return b"".join(out)


def read_all(log, start=0, max_bytes=1000):
    out = []
    off = start
    while off < log.log_end_offset:
        data = log.read(off, max_bytes)
        assert data, f"empty read at {off}"
        bs = split_batches(data)
        out += bs
        off = last_offset(bs[-1]) + 1
    return out


def test_round_trip_across_segments(open_log):
    log = open_log()
    w = Writer(log, seed=1)
    w.append_many(400)
    assert log.segment_count > 5
    assert read_all(log) == w.batches
    assert log.log_end_offset == last_offset(w.batches[-1]) + 1
    assert log.size_in_bytes == sum(map(len, w.batches))
    names = sorted(os.listdir(log.directory))
    assert "00000000000000000000.log" in names
    assert "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    for name in names:
        if name.endswith(".log"):
            assert len(name) == 24


def test_segments_respect_segment_bytes(open_log, small_config):
    log = open_log()
    w = Writer(log, seed=2)
    w.append_many(300)
    for name in os.listdir(log.directory):
        if name.endswith(".log"):
            assert os.path.getsize(os.path.join(log.directory, name)) <= small_config.segment_bytes


@pytest.mark.parametrize("seed", range(3))
def test_reads_against_model(open_log, seed):
    log = open_log()
    w = Writer(log, seed=seed)
    w.append_many(300)
    rng = random.Random(seed)
    leo = log.log_end_offset
    for _ in range(2000):
        offset = rng.randrange(0, leo + 1)
        max_bytes = rng.choice([1, 50, 300, 1000, 5000, 10**9])
        max_offset = rng.choice([None, rng.randrange(0, leo + 2)])
        got = log.read(offset, max_bytes, max_offset)
        assert bytes(got) == expected_read(log, w.batches, offset, max_bytes, max_offset), \
            (offset, max_bytes, max_offset)


def test_read_mid_batch_returns_containing_batch(open_log):
    log = open_log()
    b0 = make_batch(0, 10)
    log.append(b0, 0, 9, max_ts(b0))
    b1 = make_batch(10, 10)
    log.append(b1, 10, 19, max_ts(b1))
    assert log.read(5, 10**6) == b0 + b1
    assert log.read(15, 10**6) == b1
    assert log.read(19, 10**6) == b1
    assert log.read(20, 10**6) == b""


def test_at_least_one_batch_and_max_bytes(open_log):
    log = open_log(LogConfig(segment_bytes=1 << 20))
    big = make_batch(0, 3, value_size=1000)
    log.append(big, 0, 2, max_ts(big))
    small = make_batch(3, 1, value_size=1)
    log.append(small, 3, 3, max_ts(small))
    assert log.read(0, 1) == big  # first batch whole even though larger than max_bytes
    assert log.read(0, len(big) + len(small) - 1) == big
    assert log.read(0, len(big) + len(small)) == big + small
    assert log.read(3, 1) == small


def test_max_offset(open_log):
    log = open_log()
    w = Writer(log, seed=3)
    for _ in range(5):
        w.append(count=2)
    assert log.read(0, 10**6, max_offset=0) == b""
    assert log.read(0, 10**6, max_offset=1) == w.batches[0]  # batch 0..1 starts below it
    assert log.read(0, 10**6, max_offset=2) == w.batches[0]
    assert log.read(0, 10**6, max_offset=3) == b"".join(w.batches[:2])
    assert log.read(4, 10**6, max_offset=4) == b""
    assert log.read(0, 10**6, max_offset=10**9) == b"".join(w.batches)


def test_offset_out_of_range(open_log):
    log = open_log()
    w = Writer(log, seed=4)
    w.append_many(10)
    leo = log.log_end_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(leo + 1, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.read(leo, 100) == b""
    log.delete_records_before(5)
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100)
    assert log.read(5, 10**6)


def test_append_checks_base_offset(open_log):
    log = open_log()
    b = make_batch(1)
    with pytest.raises(ValueError):
        log.append(b, 1, 1, max_ts(b))
    b = make_batch(0)
    log.append(b, 0, 0, max_ts(b))
    with pytest.raises(ValueError):
        log.append(b, 0, 0, max_ts(b))


def test_multi_batch_append(open_log):
    log = open_log()
    parts = [make_batch(0, 2), make_batch(2, 3), make_batch(5, 1)]
    data = b"".join(parts)
    log.append(memoryview(data), 0, 5, max(max_ts(p) for p in parts))
    assert log.log_end_offset == 6
    assert log.read(3, 10**6) == parts[1] + parts[2]
    assert log.read(0, len(parts[0])) == parts[0]


def test_restart_same_offsets_same_bytes(open_log, log_dir, small_config):
    log = open_log()
    w = Writer(log, seed=5)
    w.append_many(250)
    leo, size = log.log_end_offset, log.size_in_bytes
    mt = log.max_timestamp()
    log.close()
    log = open_log()
    assert (log.log_end_offset, log.size_in_bytes) == (leo, size)
    assert log.recovery_point == leo
    assert log.max_timestamp() == mt
    assert read_all(log) == w.batches
    w.log = log
    w.append_many(100)
    log.close()
    log = open_log(recover=True)
    assert read_all(log) == w.batches


def test_empty_log(open_log):
    log = open_log()
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    assert log.read(0, 100) == b""
    assert log.max_timestamp() == (-1, -1)
    assert log.offset_for_timestamp(0) is None
    assert list(log.batch_headers(0)) == []
    log.close()
    log = open_log()
    assert log.log_end_offset == 0


def test_batch_headers(open_log):
    log = open_log()
    w = Writer(log, seed=6)
    w.append_many(200)
    assert list(log.batch_headers(0)) == [b[:61] for b in w.batches]
    k = 77
    start = last_offset(w.batches[k]) - 0
    assert list(log.batch_headers(start)) == [b[:61] for b in w.batches[k:]]


def test_timestamps(open_log):
    log = open_log()
    rng = random.Random(7)
    w = Writer(log, seed=7)
    stamps = []
    for i in range(300):
        ts = 10_000 + i * 10 + rng.randint(-15, 15)  # mostly increasing, sometimes not
        w.append(timestamp=ts)
        stamps.append(max_ts(w.batches[-1]))
    best = max(range(len(stamps)), key=lambda i: (stamps[i], -i))
    assert log.max_timestamp() == (stamps[best], last_offset(w.batches[best]))
    for target in list(range(9_900, 13_200, 7)) + [min(stamps), max(stamps), max(stamps) + 1]:
        first = next((i for i, s in enumerate(stamps) if s >= target), None)
        got = log.offset_for_timestamp(target)
        if first is None:
            assert got is None
        else:
            assert got == (base_of(w.batches[first]), w.batches[first]), target
    log.close()
    log = Log.open(log.directory, log.config, recover=False)
    try:
        assert log.max_timestamp() == (stamps[best], last_offset(w.batches[best]))
        assert log.offset_for_timestamp(12_000)[0] == base_of(
            w.batches[next(i for i, s in enumerate(stamps) if s >= 12_000)])
    finally:
        log.close()


def test_truncate_to(open_log):
    log = open_log()
    w = Writer(log, seed=8)
    w.append_many(300)
    segments = log.segment_count
    k = 40
    cut = base_of(w.batches[k])
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert log.segment_count < segments
    assert read_all(log) == w.batches[:k]
    del w.batches[k:]
    w.append_many(50)
    assert read_all(log) == w.batches
    log.close()
    log = open_log(recover=True)
    assert read_all(log) == w.batches
    # into the middle of a batch: that batch goes too
    b = w.batches[10]
    if last_offset(b) > base_of(b):
        log.truncate_to(base_of(b) + 1)
        assert log.log_end_offset == base_of(b)


def test_truncate_below_start_empties_log(open_log):
    log = open_log()
    w = Writer(log, seed=9)
    w.append_many(100)
    log.delete_records_before(50)
    log.truncate_to(20)
    assert (log.log_start_offset, log.log_end_offset) == (20, 20)
    assert log.read(20, 100) == b""
    b = make_batch(20)
    log.append(b, 20, 20, max_ts(b))
    assert log.read(20, 100) == b


def test_delete_records_before(open_log):
    log = open_log()
    w = Writer(log, seed=10)
    w.append_many(300)
    before = log.segment_count
    target = base_of(w.batches[200]) + 1
    log.delete_records_before(target)
    assert log.log_start_offset == target
    assert log.segment_count < before
    data = log.read(target, 10**6)
    assert split_batches(data)[0] == w.batches[200]
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(log.log_end_offset + 1)
    log.close()
    log = open_log()
    assert log.log_start_offset == target


def test_retention(open_log):
    cfg = LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_bytes=10_000)
    log = open_log(cfg)
    w = Writer(log, seed=11)
    w.append_many(300)
    total = log.size_in_bytes
    deleted = log.apply_retention()
    assert deleted > 0
    assert log.size_in_bytes >= 10_000 - 4096 and log.size_in_bytes < total
    assert log.size_in_bytes <= 10_000 + 4096
    first = log.log_start_offset
    assert split_batches(log.read(first, 10**6))[0] in w.batches
    cfg2 = LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_ms=1000)
    log.close()
    log = open_log(cfg2)
    assert log.apply_retention(now_ms=0) == 0
    n = log.apply_retention(now_ms=10**12)
    assert n > 0 and log.segment_count == 1


def test_segment_ms_roll_by_batch_timestamps(open_log):
    """Kafka's rule: a segment rolls when the appended batch's maxTimestamp is more than
    segment.ms past the maxTimestamp of the segment's first batch, whatever the clock says."""
    log = open_log(LogConfig(segment_ms=1000))
    w = Writer(log, seed=12)
    w.append(count=1, timestamp=50_000)
    w.append(count=1, timestamp=50_900)   # 900 ms later: same segment
    w.append(count=1, timestamp=51_000)   # exactly segment.ms: not yet (must exceed)
    assert log.segment_count == 1
    w.append(count=1, timestamp=51_001)   # past segment.ms: rolls at once, no waiting
    assert log.segment_count == 2
    w.append(count=1, timestamp=40_000)   # an older batch never rolls
    w.append(count=1, timestamp=52_001)
    assert log.segment_count == 2
    w.append(count=1, timestamp=52_002)
    assert log.segment_count == 3
    assert read_all(log) == w.batches


def test_segment_ms_clock_survives_reopen(open_log):
    """The first batch's timestamp is read back from disk after a restart, so reopening
    does not restart the segment's age."""
    log = open_log(LogConfig(segment_ms=1000))
    w = Writer(log, seed=13)
    w.append(count=1, timestamp=10_000)
    log.close()
    for recover in (False, True):
        log = open_log(LogConfig(segment_ms=1000), recover=recover)
        w.log = log
        assert log.segment_count == 1
        w.append(count=1, timestamp=10_500)
        assert log.segment_count == 1
        log.close()
    log = open_log(LogConfig(segment_ms=1000))
    w.log = log
    w.append(count=1, timestamp=11_001)
    assert log.segment_count == 2
    assert read_all(log) == w.batches


def test_segment_ms_roll_without_timestamps(open_log):
    """Batches without timestamps (-1) fall back to the time since the segment was made."""
    import time
    log = open_log(LogConfig(segment_ms=1))
    w = Writer(log, seed=14)
    w.append(count=1, timestamp=-1)
    time.sleep(0.01)
    w.append(count=1, timestamp=-1)
    assert log.segment_count == 2
    assert read_all(log) == w.batches


def test_delete_removes_directory(open_log, log_dir):
    log = open_log()
    Writer(log).append_many(5)
    log.delete()
    assert not log_dir.exists()


def test_flush_writes_checkpoint(open_log, log_dir):
    from headrace.storage import OffsetCheckpoints
    from headrace.storage.checkpoint import parse

    def on_disk():
        path = log_dir.parent / "partition-offsets-checkpoint"
        return parse(path.read_text()).get(log_dir.name) if path.exists() else None

    table = OffsetCheckpoints.of(log_dir.parent)
    log = open_log()
    w = Writer(log, seed=13)
    w.append_many(30)
    table.interval_s = 3600.0
    log.flush()
    assert log.recovery_point == log.log_end_offset
    cp = on_disk()
    assert cp is None or cp.recovery_point < log.recovery_point  # not due yet
    table.interval_s = 0.0
    w.append()
    log.flush()
    cp = on_disk()
    assert cp.recovery_point == log.log_end_offset and cp.end_offset is None
    log.close()
    cp = on_disk()
    assert (cp.recovery_point, cp.end_offset) == (log.log_end_offset, log.log_end_offset)
    assert not (log_dir / "log-offsets-checkpoint").exists()  # no file per partition
