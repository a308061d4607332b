"""The sparse indexes against reference models (sorted lists), in memory and mapped."""

import bisect
import os
import random

import pytest

from headrace.storage.index import WRITE_BYTES, OffsetIndex, TimeIndex
from storage_batches import Writer, last_offset


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
        index.write_out()  # as a roll does
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


def test_active_entries_reach_the_file_in_groups_and_all_at_write_out(tmp_path):
    """One write per WRITE_BYTES of entries, the file always a prefix of what was added; a
    failed append's entry written with a group is cut off again (resync_file)."""
    path = tmp_path / "x.index"
    index = OffsetIndex.create(str(path), 0)
    sizes = set()
    n = 3 * WRITE_BYTES // 8 + 10
    for i in range(n):
        data = index.pack(i, 100 * i)
        index.write_entry(data)
        index.add_entry(data)
        on_disk = path.read_bytes()
        assert index.raw().startswith(on_disk) and 8 * (i + 1) - len(on_disk) < WRITE_BYTES
        sizes.add(len(on_disk))
    assert sizes == {0, WRITE_BYTES, 2 * WRITE_BYTES, 3 * WRITE_BYTES}
    for _ in range(WRITE_BYTES // 8 - 11):  # up to one entry short of a group
        index.add_entry(index.pack(n, 100 * n))
        n += 1
    index.write_entry(index.pack(n, 100 * n))  # fills the group: written, then undone
    assert os.path.getsize(path) == 8 * (n + 1)
    index.resync_file()
    assert os.path.getsize(path) == 8 * n and index.raw().startswith(path.read_bytes())
    index.write_out()
    assert path.read_bytes() == index.raw() and len(index) == n
    index.truncate_entries(5)
    assert path.read_bytes() == index.raw() and len(index) == 5


def test_offset_index_check_rejects_garbage(tmp_path):
    rng = random.Random(1)
    index, rels, positions = build_offset_index(tmp_path / "x.index", 0, 50, rng)
    index.write_out()
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
    index.write_out()
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
        index.write_out()
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
        n = len(seg.offset_index)
        on_disk = os.path.getsize(seg.offset_index.path) // 8
        # a rolled segment's file holds every entry; the active one's a prefix (in groups)
        assert on_disk == n if seg is not log._active else on_disk <= n
        assert n <= seg.size // interval + 1
        assert n >= seg.size // (interval + biggest) - 1


def test_every_indexed_position_is_a_batch_start(open_log):
    """Each entry maps a batch's last offset to its position, as Kafka's LogSegment does."""
    log = open_log()
    w = Writer(log, seed=4)
    w.append_many(300)
    last_of = {int.from_bytes(b[:8], "big"): last_offset(b) for b in w.batches}
    entries = 0
    for seg in log._segments:
        index = seg.offset_index
        for i in range(len(index)):
            rel, pos = index.entry(i)
            with seg.log_file.use() as fd:
                data = os.pread(fd, 8, pos)
            base = int.from_bytes(data, "big")
            assert base in last_of
            assert seg.base_offset + rel == last_of[base]
            entries += 1
    assert entries > 10
    assert any(last != base for base, last in last_of.items())  # the two keys differ


def _rekey_by_base_offset(seg) -> int:
    """Rewrite a closed segment's offset index as earlier Headrace versions did (each entry
    keyed by its batch's base offset); returns the number of entries."""
    raw = open(seg.offset_index.path, "rb").read()
    out = bytearray()
    with open(seg.log_file.path, "rb") as f:
        for rel, pos in OffsetIndex.ENTRY.iter_unpack(raw):
            f.seek(pos)
            base = int.from_bytes(f.read(8), "big")
            out += OffsetIndex.ENTRY.pack(base - seg.base_offset, pos)
    with open(seg.offset_index.path, "wb") as f:
        f.write(out)
    return len(raw) // 8


@pytest.mark.parametrize("recover", [False, True])
def test_indexes_keyed_by_base_offset_still_read(open_log, log_dir, recover):
    """Offset indexes written before entries were keyed by the last offset: reads, appends,
    truncation and recovery work on them, and ``headrace verify`` accepts them."""
    from headrace.storage.examine import check_partition

    log = open_log()
    w = Writer(log, seed=5)
    w.append_many(300)
    segments = list(log._segments)
    log.close()
    rekeyed = sum(_rekey_by_base_offset(seg) for seg in segments)
    assert rekeyed > 10
    assert all(not c.problems for c in check_partition(str(log_dir)))
    log = open_log(recover=recover)
    starts = [int.from_bytes(b[:8], "big") for b in w.batches]
    for b in w.batches:  # every offset finds its batch first
        base = int.from_bytes(b[:8], "big")
        for offset in range(base, last_offset(b) + 1):
            assert log.read(offset, 1)[: len(b)] == b, offset
    w.log = log
    w.append_many(50)  # appends after old entries; then truncate into the old part
    cut = starts[len(starts) // 2]
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    kept = [b for b in w.batches if int.from_bytes(b[:8], "big") < cut]
    for b in kept[-20:]:
        assert log.read(int.from_bytes(b[:8], "big"), 1)[: len(b)] == b
    log.close()
    assert all(not c.problems for c in check_partition(str(log_dir)))
