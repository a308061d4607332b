"""Recovery after unclean stops: torn tails, garbage, corruption, lost or bad indexes."""

import os
import random
import shutil

import pytest

from headrace.storage import Log, LogConfig, OffsetCheckpoints
from storage_batches import Writer, last_offset, max_ts, split_batches
from test_storage_log import read_all

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


def build(path, n=120, seed=0, config=CFG):
    """A log left as after a crash: written and flushed, never closed."""
    log = Log.open(path, config, recover=False)
    w = Writer(log, seed=seed)
    w.append_many(n)
    log.flush()
    log._write_checkpoint(clean=False)
    return log, w.batches


def forget_recovery_point(path):
    """As if the checkpoint had never held the log: recovery checks every segment."""
    OffsetCheckpoints.of(path.parent).forget(path.name)


def abandon(log):
    """Forget a log without closing it (no flush, no checkpoint; its descriptors close)."""
    for seg in log._segments:
        seg.close()


def segment_files(path):
    return sorted(p for p in os.listdir(path) if p.endswith(".log"))


def snapshot(path):
    return {name: open(os.path.join(path, name), "rb").read() for name in os.listdir(path)}


def restore(path, snap):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for name, data in snap.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)


def offset_of(b):
    return int.from_bytes(b[:8], "big")


def check_log(path, batches, k, config=CFG):
    """Recover and expect exactly batches[:k]."""
    log = Log.open(path, config, recover=True)
    try:
        expected_leo = last_offset(batches[k - 1]) + 1 if k else 0
        assert log.log_end_offset == expected_leo
        assert log.recovery_point == expected_leo
        assert read_all(log) == batches[:k]
        # the recovered log takes appends where it ends
        w = Writer(log, seed=99)
        w.append_many(3)
        assert read_all(log) == batches[:k] + w.batches
    finally:
        log.close()


def test_every_torn_length_of_last_batch(tmp_path):
    path = tmp_path / "t-0"
    log, batches = build(path)
    abandon(log)
    snap = snapshot(path)
    last_file = segment_files(path)[-1]
    seg_data = snap[last_file]
    last = batches[-1]
    start = len(seg_data) - len(last)
    assert seg_data[start:] == last
    for length in range(len(last)):
        restore(path, snap)
        with open(path / last_file, "r+b") as f:
            f.truncate(start + length)
        check_log(path, batches, len(batches) - 1)


@pytest.mark.parametrize("seed", range(10))
def test_random_garbage_appended(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    log, batches = build(path, seed=seed)
    abandon(log)
    with open(path / segment_files(path)[-1], "ab") as f:
        f.write(rng.randbytes(rng.randint(1, 1024)))
    check_log(path, batches, len(batches))


@pytest.mark.parametrize("seed", range(10))
def test_overwrite_from_random_position(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    log, batches = build(path, seed=seed)
    abandon(log)
    forget_recovery_point(path)  # no recovery point: check everything
    files = segment_files(path)
    victim = rng.randrange(len(files))
    seg_path = path / files[victim]
    size = os.path.getsize(seg_path)
    pos = rng.randrange(size)
    with open(seg_path, "r+b") as f:
        f.seek(pos)
        f.write(rng.randbytes(size - pos))
    # k = the batches that end at or before the overwritten position
    seg_base = int(files[victim][:20])
    k = 0
    offset_in_seg = 0
    for i, b in enumerate(batches):
        if offset_of(b) < seg_base:
            k = i + 1
            continue
        if offset_in_seg + len(b) <= pos:
            offset_in_seg += len(b)
            k = i + 1
        else:
            break
    check_log(path, batches, k)
    assert len(segment_files(path)) <= victim + 1 + 1  # later segments deleted (+1: new roll)


def test_corrupt_crc_in_the_middle(tmp_path):
    path = tmp_path / "t-0"
    log, batches = build(path, n=200)
    abandon(log)
    forget_recovery_point(path)
    files = segment_files(path)
    assert len(files) >= 4
    middle = files[len(files) // 2]
    seg_base = int(middle[:20])
    in_seg = [b for b in batches if seg_base <= offset_of(b)]
    # corrupt the payload of the 3rd batch of that segment
    target = in_seg[2]
    pos = len(in_seg[0]) + len(in_seg[1]) + 61 + (len(target) - 61) // 2
    if len(target) == 61:
        pos = len(in_seg[0]) + len(in_seg[1]) + 30
    with open(path / middle, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0xFF]))
    k = batches.index(target)
    log = Log.open(path, CFG, recover=True)
    try:
        assert log.log_end_offset == offset_of(target)
        assert segment_files(path)[-1] == middle  # later segments deleted
        assert os.path.getsize(path / middle) == len(in_seg[0]) + len(in_seg[1])
        assert read_all(log) == batches[:k]
    finally:
        log.close()


def test_recovery_starts_at_recovery_point(tmp_path):
    """A corrupt batch below the recovery point is not looked at (only the tail is checked)."""
    path = tmp_path / "t-0"
    log, batches = build(path, n=200)
    abandon(log)
    files = segment_files(path)
    with open(path / files[0], "r+b") as f:  # corrupt a payload byte in the first segment
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    log = Log.open(path, CFG, recover=True)
    try:
        assert log.log_end_offset == last_offset(batches[-1]) + 1
    finally:
        log.close()


def test_torn_tail_across_segments(tmp_path):
    """The active segment is empty garbage: earlier segments keep their data."""
    path = tmp_path / "t-0"
    log, batches = build(path, n=200)
    abandon(log)
    forget_recovery_point(path)
    files = segment_files(path)
    last_base = int(files[-1][:20])
    with open(path / files[-1], "wb") as f:
        f.write(b"\x00" * 10)
    k = sum(1 for b in batches if offset_of(b) < last_base)
    check_log(path, batches, k)


@pytest.mark.parametrize("damage", ["delete", "garbage", "zeros", "truncate"])
def test_bad_index_files_are_rebuilt(tmp_path, damage):
    path = tmp_path / "t-0"
    log = Log.open(path, CFG, recover=False)
    w = Writer(log, seed=5)
    w.append_many(200)
    log.close()
    rng = random.Random(1)
    for name in sorted(os.listdir(path)):
        if not name.endswith((".index", ".timeindex")):
            continue
        p = path / name
        size = os.path.getsize(p)
        if damage == "delete":
            os.unlink(p)
        elif damage == "garbage":
            p.write_bytes(rng.randbytes(max(size, 24)))
        elif damage == "zeros":
            p.write_bytes(b"\x00" * max(size, 24))
        else:
            with open(p, "r+b") as f:
                f.truncate(max(size - 5, 0))  # a torn last entry
    log = Log.open(path, CFG, recover=False)
    try:
        assert read_all(log) == w.batches
        rng2 = random.Random(2)
        for _ in range(300):
            off = rng2.randrange(log.log_end_offset)
            first = split_batches(log.read(off, 1))[0]
            assert offset_of(first) <= off <= last_offset(first)
        stamps = [max_ts(b) for b in w.batches]
        for target in range(min(stamps) - 5, max(stamps) + 5, 37):
            first = next(i for i, s in enumerate(stamps) if s >= target) \
                if max(stamps) >= target else None
            got = log.offset_for_timestamp(target)
            assert got == (None if first is None else (offset_of(w.batches[first]),
                                                       w.batches[first]))
        # the rebuilt files are valid again
        for seg in log._segments:
            assert seg.offset_index.check(seg.size, None) if seg is log._segments[-1] else True
    finally:
        log.close()
    if damage != "truncate":
        for name in os.listdir(path):
            if name.endswith(".index"):
                assert os.path.getsize(path / name) % 8 == 0


def test_index_entries_not_yet_written_when_the_broker_died_are_rebuilt(tmp_path):
    """The active index's entries reach its file in groups (index.WRITE_BYTES): after a crash
    the file lacks the last ones and recovery puts them back; a clean close writes them all."""
    config = LogConfig(segment_bytes=1 << 30, index_interval_bytes=64, segment_index_bytes=1 << 20)
    path = tmp_path / "t-0"
    log = Log.open(path, config, recover=False)
    w = Writer(log, seed=8)
    w.append_many(700)  # an entry per batch: more than one group
    log.flush()
    log._write_checkpoint(clean=False)
    entries = log._active.offset_index.raw()
    abandon(log)
    index_file = path / f"{0:020d}.index"
    on_disk = index_file.read_bytes()
    assert 0 < len(on_disk) < len(entries) and entries.startswith(on_disk)
    log = Log.open(path, config, recover=True)
    try:
        assert log._active.offset_index.raw() == entries
        w.log = log
        w.append_many(50)
        rng = random.Random(3)
        for _ in range(300):
            off = rng.randrange(log.log_end_offset)
            first = split_batches(log.read(off, 1))[0]
            assert offset_of(first) <= off <= last_offset(first)
        entries = log._active.offset_index.raw()
    finally:
        log.close()
    assert index_file.read_bytes() == entries


def test_clean_open_reads_no_segment_data(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    log = Log.open(path, CFG, recover=False)
    w = Writer(log, seed=6)
    w.append_many(200)
    log.close()

    real_pread, real_read = os.pread, os.read

    def is_log(fd):
        return os.readlink(f"/proc/self/fd/{fd}").endswith(".log")

    def pread(fd, n, pos):
        assert not is_log(fd), "segment data read during a clean open"
        return real_pread(fd, n, pos)

    def read(fd, n):
        assert not is_log(fd), "segment data read during a clean open"
        return real_read(fd, n)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "read", read)
    log = Log.open(path, CFG, recover=False)
    monkeypatch.undo()
    try:
        assert log.log_end_offset == last_offset(w.batches[-1]) + 1
        assert read_all(log) == w.batches
        w.log = log
        w.append_many(20)
        assert read_all(log) == w.batches
    finally:
        log.close()


def test_unclean_stop_with_recover_false_still_recovers(tmp_path):
    """The clean-close checkpoint no longer matches the files: open falls back to recovery."""
    path = tmp_path / "t-0"
    log = Log.open(path, CFG, recover=False)
    w = Writer(log, seed=7)
    w.append_many(50)
    log.close()
    log = Log.open(path, CFG, recover=False)
    w.log = log
    w.append_many(50)
    abandon(log)
    with open(path / segment_files(path)[-1], "ab") as f:
        f.write(b"\x00\x00\x00")
    log = Log.open(path, CFG, recover=False)
    try:
        assert read_all(log) == w.batches
    finally:
        log.close()


def test_temp_files_removed_and_unknown_files_kept(tmp_path):
    path = tmp_path / "t-0"
    log = Log.open(path, CFG, recover=False)
    Writer(log).append_many(10)
    log.close()
    (path / "00000000000000000000.index.tmp").write_bytes(b"junk")
    (path / "leader-epoch-checkpoint").write_bytes(b"0\n0\n")
    log = Log.open(path, CFG, recover=True)
    log.close()
    names = os.listdir(path)
    assert "00000000000000000000.index.tmp" not in names
    assert "leader-epoch-checkpoint" in names
