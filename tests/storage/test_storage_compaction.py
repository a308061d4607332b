"""Compaction against a dict: the latest value per key survives, nothing else in the cleaned
range; tombstones go after delete.retention.ms; dirty ratio and compaction lag are respected;
compressed batches are rebuilt; a crash in the middle of a swap is finished at open."""

import gzip
import os
import random

import pytest

from headrace.protocol.records import decode_records
from headrace.storage import Log, LogConfig, clean
from headrace.storage.recovery import iter_valid_batches
from storage_batches import make_keyed_batch, split_batches

GZIP = 1


def codecs():
    return dict(decompress=lambda c, d: gzip.decompress(bytes(d)),
                compress=lambda c, d: gzip.compress(bytes(d)))


def cfg(**kw):
    base = dict(segment_bytes=3000, index_interval_bytes=200, cleanup_policy="compact",
                min_cleanable_dirty_ratio=0.0, delete_retention_ms=1 << 40)
    base.update(kw)
    return LogConfig(**base)


class Producer:
    def __init__(self, log, seed, keys=30, compressed=False):
        self.log = log
        self.rng = random.Random(seed)
        self.keys = [f"k{i}".encode() for i in range(keys)]
        self.model: dict[bytes, bytes | None] = {}
        self.compressed = compressed
        self.ts = 10_000

    def append(self, n=1):
        for _ in range(n):
            base = self.log.log_end_offset
            recs = []
            for _ in range(self.rng.randint(1, 6)):
                key = self.rng.choice(self.keys)
                value = None if self.rng.random() < 0.15 else self.rng.randbytes(
                    self.rng.randint(0, 60))
                self.ts += 1
                recs.append((key, value, self.ts))
                self.model[key] = value
            kw = dict(compression=GZIP, compress=gzip.compress) if self.compressed else {}
            b = make_keyed_batch(base, recs, base_timestamp=recs[0][2], **kw)
            self.log.append(b, base, base + len(recs) - 1, recs[-1][2])


def all_records(log):
    """(offset, key, value) of every stored record, checking each batch's CRC and framing."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 1 << 20)
        if not data:
            break
        for b in split_batches(data):
            for o, _ts, k, v, _h in decode_records(memoryview(b)):
                if o >= off:
                    out.append((o, k, v))
            off = int.from_bytes(b[:8], "big") + int.from_bytes(b[23:27], "big") + 1
    for seg in list(log._segments):
        size = seg.size  # (the active segment grows meanwhile in the threaded test)
        with seg.log_file.use() as fd:
            valid = list(iter_valid_batches(fd, size, seg.base_offset, 0))
        assert sum(v.size for v in valid) == size
    return out


def check(log, model, tombstones_gone):
    recs = all_records(log)
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(set(offsets))
    latest = {}
    for _, k, v in recs:
        latest[k] = v
    if tombstones_gone:  # a deleted key may be gone altogether
        assert {k: v for k, v in latest.items() if v is not None} == {
            k: v for k, v in model.items() if v is not None}
        assert all(model[k] is None for k, v in latest.items() if v is None)
    else:
        assert latest == model
    cleaned = [(o, k, v) for o, k, v in recs if o < log.cleaner_offset]
    keys = [k for _, k, _ in cleaned]
    assert len(keys) == len(set(keys)), "a key appears twice in the cleaned range"
    for o, k, v in cleaned:
        later = [x for x in recs if x[1] == k and x[0] > o]
        if not later:
            assert model[k] == v
        if tombstones_gone:
            assert v is not None
    return recs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("compressed", [False, True])
def test_latest_value_per_key(tmp_path, seed, compressed):
    log = Log.open(tmp_path / "t-0", cfg(), recover=False)
    p = Producer(log, seed, compressed=compressed)
    for round_ in range(4):
        p.append(p.rng.randint(20, 80))
        result = clean(log, now_ms=20_000, **codecs())
        assert result is not None and result.records_removed > 0
        check(log, p.model, tombstones_gone=False)
        assert log.cleaner_offset == log._bases[-1]
    # tombstones older than delete.retention.ms go
    log.update_config(cfg(delete_retention_ms=0))
    log.roll()
    clean(log, now_ms=10**9, force=True, **codecs())
    recs = check(log, p.model, tombstones_gone=True)
    assert all(v is not None for o, _, v in recs if o < log.cleaner_offset)
    # the same answers after a clean and an unclean reopen
    log.close()
    log = Log.open(tmp_path / "t-0", log.config, recover=True)
    assert log.cleaner_offset == log._bases[-1]
    check(log, p.model, tombstones_gone=True)
    log.close()


def test_dirty_ratio_and_lag(tmp_path):
    log = Log.open(tmp_path / "t-0", cfg(min_cleanable_dirty_ratio=0.9), recover=False)
    p = Producer(log, 1)
    p.append(100)
    assert clean(log, now_ms=20_000) is not None  # all dirty: ratio 1.0
    p.append(5)
    log.roll()
    assert clean(log, now_ms=20_000) is None  # a little dirty: below 0.9
    assert clean(log, now_ms=20_000, force=True) is not None
    log.update_config(cfg(min_compaction_lag_ms=10**6))
    p.append(50)
    log.roll()
    assert clean(log, now_ms=20_000, force=True) is None  # every record is too young
    before = log.cleaner_offset
    log.update_config(cfg(min_compaction_lag_ms=1))
    assert clean(log, now_ms=10**7, force=True) is not None
    assert log.cleaner_offset > before
    log.close()


def test_policy_delete_does_not_compact(tmp_path):
    log = Log.open(tmp_path / "t-0", cfg(cleanup_policy="delete"), recover=False)
    Producer(log, 2).append(50)
    assert clean(log, now_ms=20_000) is None
    log.close()


def test_clean_runs_beside_appends_and_reads(tmp_path):
    import threading

    log = Log.open(tmp_path / "t-0", cfg(), recover=False)
    p = Producer(log, 3)
    p.append(100)
    errors = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                all_records(log)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for _ in range(10):
        done = threading.Thread(target=clean, args=(log,), kwargs=dict(now_ms=20_000))
        done.start()
        p.append(30)
        done.join()
    stop.set()
    t.join()
    assert not errors, errors
    check(log, p.model, tombstones_gone=False)
    log.close()


@pytest.mark.parametrize("crash_at", ["committed", "unlinked", "half_moved"])
def test_crash_during_swap_is_finished_at_open(tmp_path, monkeypatch, crash_at):
    path = tmp_path / "t-0"
    log = Log.open(path, cfg(), recover=False)
    p = Producer(log, 4)
    p.append(150)
    log.flush()
    real = Log.__dict__["complete_pending_swap"]

    def crash(directory):
        from headrace.storage import _files
        swap = os.path.join(directory, _files.SWAP_DIR)
        if crash_at in ("unlinked", "half_moved"):
            with open(os.path.join(swap, _files.SWAP_REPLACES)) as f:
                for base in f.read().split():
                    for name in _files.segment_file_names(int(base)):
                        try:
                            os.unlink(os.path.join(directory, name))
                        except FileNotFoundError:
                            pass
            os.rename(os.path.join(swap, _files.SWAP_REPLACES),
                      os.path.join(swap, _files.SWAP_UNLINKED))
        if crash_at == "half_moved":
            names = sorted(n for n in os.listdir(swap) if n != _files.SWAP_UNLINKED)
            for n in names[: len(names) // 2]:
                os.rename(os.path.join(swap, n), os.path.join(directory, n))
        raise OSError("simulated crash")

    monkeypatch.setattr(Log, "complete_pending_swap", staticmethod(crash))
    with pytest.raises(Exception):
        clean(log, now_ms=20_000)
    for s in log._segments:
        s.close()  # the process dies
    monkeypatch.setattr(Log, "complete_pending_swap", real)
    log2 = Log.open(path, log.config, recover=True)
    assert not (path / "cleaner.swap").exists()
    recs = all_records(log2)
    latest = {}
    for _, k, v in recs:
        latest[k] = v
    assert latest == p.model
    log2.close()
