"""Log.read_region: the bytes ``read`` returns, left in their pinned file; readable after the
segment is deleted or the log compacted; copied out when small or when regions would pin too
many of the descriptors."""

import os
import random

import pytest

from headrace.storage import FileRegion, Log, LogConfig, OpenFiles, clean
from storage_batches import Writer, last_offset, make_keyed_batch

from test_storage_log import expected_read


def region_bytes(got) -> bytes:
    """What a reader of the result gets: the bytes, or the region's bytes read through its
    descriptor (as sendfile reads them), then released."""
    if isinstance(got, FileRegion):
        data = os.pread(got.fd, got.length, got.position)
        got.release()
        return data
    return bytes(got)


def check_random_reads(log, batches, seed: int, reads: int, **options) -> int:
    """``reads`` read_region calls at random offsets and bounds, each checked against the
    reference answer; returns how many gave a region."""
    rng = random.Random(seed)
    leo = log.log_end_offset
    regions = 0
    for _ in range(reads):
        offset = rng.randrange(0, leo + 1)
        max_bytes = rng.choice([1, 50, 300, 1000, 5000, 10**9])
        max_offset = rng.choice([None, rng.randrange(0, leo + 2)])
        got = log.read_region(offset, max_bytes, max_offset, **options)
        regions += isinstance(got, FileRegion)
        assert region_bytes(got) == expected_read(log, batches, offset, max_bytes, max_offset)
    return regions


@pytest.mark.parametrize("seed", range(2))
def test_regions_hold_what_read_returns(open_log, seed):
    log = open_log()
    w = Writer(log, seed=seed)
    w.append_many(300)
    assert check_random_reads(log, w.batches, seed, 1000) > 500


def test_small_reads_are_copied(open_log):
    log = open_log()
    Writer(log, seed=3).append_many(50)
    got = log.read_region(0, 10**9, copy_below=10**9)
    assert isinstance(got, bytes) and got == log.read(0, 10**9)
    assert log.read_region(log.log_end_offset, 1000) == b""


def test_a_region_stays_readable_after_its_segment_is_deleted(open_log):
    log = open_log()
    w = Writer(log, seed=4)
    w.append_many(300)
    region = log.read_region(0, 10**9)
    assert isinstance(region, FileRegion)
    expected = log.read(0, 10**9)
    first = os.path.join(log.directory, "0" * 20 + ".log")
    log.delete_records_before(last_offset(w.batches[200]))
    assert not os.path.exists(first)
    assert region_bytes(region) == expected


def test_a_region_stays_readable_after_compaction_replaces_its_segment(log_dir):
    config = LogConfig(segment_bytes=3000, index_interval_bytes=200, cleanup_policy="compact",
                       min_cleanable_dirty_ratio=0.0, delete_retention_ms=1 << 40)
    log = Log.open(log_dir, config, recover=False)
    try:
        rng = random.Random(6)
        for i in range(300):  # ten keys, each overwritten many times
            base = log.log_end_offset
            batch = make_keyed_batch(base, [(b"k%d" % (i % 10), rng.randbytes(40), 10_000 + i)],
                                     base_timestamp=10_000 + i)
            log.append(batch, base, base, 10_000 + i)
        region = log.read_region(0, 10**9)
        assert isinstance(region, FileRegion)
        expected = log.read(0, 10**9)
        first = os.path.join(log.directory, "0" * 20 + ".log")
        inode = os.stat(first).st_ino
        assert clean(log, now_ms=20_000) is not None
        assert not os.path.exists(first) or os.stat(first).st_ino != inode
        assert region_bytes(region) == expected
    finally:
        log.close()


def test_regions_pin_at_most_half_of_the_descriptors(log_dir):
    files = OpenFiles(max_open=8)
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256)
    log = Log.open(log_dir, config, recover=False, files=files)
    try:
        w = Writer(log, seed=5)
        w.append_many(300)
        assert log.segment_count > 8
        held = []
        for seg_base in log._bases[:8]:  # one region in each of eight segments
            held.append(log.read_region(seg_base, 10**9))
        kinds = [isinstance(r, FileRegion) for r in held]
        assert kinds == [True] * 4 + [False] * 4
        assert all(region_bytes(r) == log.read(b, 10**9) for r, b in zip(held, log._bases))
        assert isinstance(log.read_region(0, 10**9), FileRegion)  # released: room again
    finally:
        log.close()
