"""Retention by time and size, the log start offset and DeleteRecords, against a reference model.

Kafka's rules: walk the segments oldest first and stop at the first one that is kept. By
time a segment goes when its largest timestamp is more than retention.ms old; by size the
oldest segments go while the log minus that segment is still at least retention.bytes. The
active segment is never deleted by retention; when it is itself expired the broker rolls it
first (``active_segment_expired`` + ``roll``), then the next pass deletes it.
"""

import random

import pytest

from headrace.storage import Log, LogConfig, OffsetOutOfRange
from storage_batches import Writer, split_batches

RET = dict(segment_bytes=1 << 20, index_interval_bytes=256)


def build(path, seed, segments, cfg):
    """A log whose segments have random sizes and increasing random timestamps.

    Returns (log, writer, [(base offset, size, max timestamp) per segment]).
    """
    rng = random.Random(seed)
    log = Log.open(path, cfg, recover=False)
    w = Writer(log, seed=seed)
    ts = 1_000_000
    for s in range(segments):
        for _ in range(rng.randint(1, 8)):
            ts += rng.randint(1, 1000)
            w.append(count=1, timestamp=ts)
        if s != segments - 1:
            log.roll()
    model = [(seg.base_offset, seg.size, seg.known_max_ts()[0]) for seg in log._segments]
    return log, w, model


def expected_by_time(model, now, retention_ms):
    n = 0
    for _base, _size, max_ts in model[:-1]:
        if now - max_ts > retention_ms:
            n += 1
        else:
            break
    return n


def expected_by_size(model, retention_bytes):
    excess = sum(size for _, size, _ in model) - retention_bytes
    n = 0
    for _base, size, _ in model[:-1]:
        if excess - size >= 0 and excess > 0:
            excess -= size
            n += 1
        else:
            break
    return n


@pytest.mark.parametrize("seed", range(10))
def test_time_retention_deletes_exactly_the_expired_segments(tmp_path, seed):
    rng = random.Random(seed)
    cfg = LogConfig(retention_ms=rng.randint(1, 20_000), **RET)
    log, w, model = build(tmp_path / "t-0", seed, rng.randint(2, 12), cfg)
    now = rng.randint(model[0][2], model[-1][2] + 30_000)
    want = expected_by_time(model, now, cfg.retention_ms)
    assert log.apply_retention(now_ms=now) == want
    assert log._bases == [b for b, _, _ in model[want:]]
    assert log.log_start_offset == model[want][0]
    for base, _, _ in model[:want]:
        assert not (tmp_path / "t-0" / f"{base:020d}.log").exists()
    assert log.apply_retention(now_ms=now) == 0  # idempotent
    log.close()


@pytest.mark.parametrize("seed", range(10))
def test_size_retention_deletes_exactly_the_oldest_excess(tmp_path, seed):
    rng = random.Random(100 + seed)
    log, w, model = build(tmp_path / "t-0", seed, rng.randint(2, 12), LogConfig(**RET))
    total = sum(size for _, size, _ in model)
    limit = rng.randint(0, total)
    log.update_config(LogConfig(retention_bytes=limit, **RET))
    want = expected_by_size(model, limit)
    assert log.apply_retention(now_ms=0) == want
    assert log._bases == [b for b, _, _ in model[want:]]
    assert log.size_in_bytes == sum(size for _, size, _ in model[want:])
    log.close()


def test_active_segment_is_rolled_then_deleted(tmp_path):
    cfg = LogConfig(retention_ms=1000, **RET)
    log = Log.open(tmp_path / "t-0", cfg, recover=False)
    w = Writer(log, seed=1)
    w.append_many(5, timestamp=5_000)
    assert log.apply_retention(now_ms=10_000) == 0  # only the active segment
    assert not log.active_segment_expired(now_ms=5_500)
    assert log.active_segment_expired(now_ms=10_000)
    log.roll()
    assert log.apply_retention(now_ms=10_000) == 1
    assert log.log_start_offset == log.log_end_offset == log._bases[0]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 1000)
    w.append()
    assert split_batches(log.read(log.log_start_offset, 10**6)) == w.batches[-1:]
    log.close()


def test_policy_compact_has_no_retention(tmp_path):
    cfg = LogConfig(retention_ms=1, cleanup_policy="compact", **RET)
    log, _, model = build(tmp_path / "t-0", 3, 5, cfg)
    assert log.apply_retention(now_ms=10**13) == 0
    assert not log.active_segment_expired(now_ms=10**13)
    log.update_config(LogConfig(retention_ms=1, cleanup_policy="compact,delete", **RET))
    assert log.apply_retention(now_ms=10**13) == len(model) - 1
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_log_start_offset_survives_restart(tmp_path, clean):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2048, **{
        k: v for k, v in RET.items() if k != "segment_bytes"}), recover=False)
    w = Writer(log, seed=4)
    w.append_many(100)
    target = log.log_end_offset - 7
    log.delete_records_before(target)
    if clean:
        log.close()
    else:
        log.flush()
        for s in log._segments:  # drop descriptors without the clean-close checkpoint
            s.close()
    log2 = Log.open(tmp_path / "t-0", log.config, recover=not clean)
    assert log2.log_start_offset == target
    assert log2.log_end_offset == log.log_end_offset
    with pytest.raises(OffsetOutOfRange):
        log2.read(target - 1, 100)
    assert log2.read(target, 10**6)
    log2.close()


def test_delete_records_bounds(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(**RET), recover=False)
    Writer(log, seed=5).append_many(10)
    leo = log.log_end_offset
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(leo + 1)
    log.delete_records_before(3)
    log.delete_records_before(2)  # below the start: nothing happens
    assert log.log_start_offset == 3
    log.delete_records_before(leo)  # everything
    assert log.log_start_offset == leo and log.read(leo, 100) == b""
    log.close()
