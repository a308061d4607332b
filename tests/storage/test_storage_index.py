"""The sparse indexes against reference models (sorted lists), in memory and mapped."""

import bisect
import os
import random

import pytest

from headrace.storage.index import OffsetIndex, TimeIndex
from storage_batches import Writer


def build_offset_index(path, base, n, rng):
    index = OffsetIndex.create(str(path), base)
    rels, positions = [], []
    rel = pos = 0
    for _ in range(n):
        rel += rng.randint(1, 50)
        pos += rng.randint(1, 5000)
        data = index.pack(rel, pos)
        index.write_entry(data)
        index.add_entry(data)
        rels.append(rel)
        positions.append(pos)
    return index, rels, positions


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, 5000])
def test_offset_index_random_lookups(tmp_path, mapped, n):
    rng = random.Random(n)
    base = 1_000_000
    index, rels, positions = build_offset_index(tmp_path / "x.index", base, n, rng)
    if mapped:
        index.deactivate()  # next search maps the file
    assert os.path.getsize(tmp_path / "x.index") == 8 * n
    top = (rels[-1] if rels else 0) + 100
    for _ in range(3000):
        target = base + rng.randint(-10, top)
        i = bisect.bisect_right(rels, target - base) - 1
        expected = (base, 0) if i < 0 else (base + rels[i], positions[i])
        assert index.lookup(target) == expected, target
    for _ in range(1000):
        position = rng.randint(0, (positions[-1] if positions else 0) + 100)
        max_offset = base + rng.randint(0, top)
        i = min(bisect.bisect_right(positions, position),
                bisect.bisect_right(rels, max_offset - base)) - 1
        assert index.boundary_at_or_before(position, max_offset) == (positions[i] if i >= 0 else 0)
    assert index.check(segment_size=(positions[-1] + 1 if positions else 0), next_base=None)


def test_offset_index_check_rejects_garbage(tmp_path):
    rng = random.Random(1)
    index, rels, positions = build_offset_index(tmp_path / "x.index", 0, 50, rng)
    assert index.check(positions[-1] + 1, None)
    assert not index.check(positions[-1], None)  # points past the segment's end
    assert not index.check(positions[-1] + 1, rels[-1])  # offsets reach the next segment
    with open(tmp_path / "x.index", "r+b") as f:
        f.seek(8 * 20)
        f.write(b"\x7f" * 8)
    fresh = OffsetIndex(str(tmp_path / "x.index"), 0)
    assert not fresh.check(positions[-1] + 1, None)


def test_offset_index_truncate_and_torn_entry(tmp_path):
    rng = random.Random(2)
    path = tmp_path / "x.index"
    index, rels, positions = build_offset_index(path, 0, 30, rng)
    index.truncate_entries(10)
    assert len(index) == 10 and os.path.getsize(path) == 80
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn entry
    again = OffsetIndex(str(path), 0)
    assert len(again) == 10
    again.activate()
    assert os.path.getsize(path) == 80
    assert again.lookup(10**9) == (rels[9], positions[9])


@pytest.mark.parametrize("mapped", [False, True])
def test_time_index_random_lookups(tmp_path, mapped):
    rng = random.Random(3)
    base = 500
    index = TimeIndex.create(str(tmp_path / "x.timeindex"), base)
    stamps, rels = [], []
    ts, rel = 1_000, 0
    for _ in range(3000):
        ts += rng.randint(1, 30)
        rel += rng.randint(0, 10)
        data = index.pack(ts, rel)
        index.write_entry(data)
        index.add_entry(data)
        stamps.append(ts)
        rels.append(rel)
    if mapped:
        index.deactivate()
    for _ in range(5000):
        target = rng.randint(900, stamps[-1] + 100)
        i = bisect.bisect_left(stamps, target) - 1  # greatest entry strictly below target
        expected = None if i < 0 else base + rels[i]
        assert index.offset_before(target) == expected
    assert index.last_entry() == (stamps[-1], rels[-1])
    assert index.check(None)


def test_index_entries_are_sparse(open_log):
    """About one offset index entry per index_interval_bytes of appended data."""
    log = open_log()
    w = Writer(log, seed=3)
    w.append_many(300)
    interval = log.config.index_interval_bytes
    biggest = max(map(len, w.batches))
    for seg in log._segments:
        n = os.path.getsize(seg.offset_index.path) // 8
        assert n == len(seg.offset_index)
        assert n <= seg.size // interval + 1
        assert n >= seg.size // (interval + biggest) - 1


def test_every_indexed_position_is_a_batch_start(open_log):
    log = open_log()
    w = Writer(log, seed=4)
    w.append_many(300)
    starts = {}
    for b in w.batches:
        starts[int.from_bytes(b[:8], "big")] = b
    for seg in log._segments:
        index = seg.offset_index
        for i in range(len(index)):
            rel, pos = index.entry(i)
            with seg.log_file.use() as fd:
                data = os.pread(fd, 8, pos)
            assert int.from_bytes(data, "big") == seg.base_offset + rel
            assert seg.base_offset + rel in starts
