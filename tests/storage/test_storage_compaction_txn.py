"""Compaction with transactions and producers (Kafka's rules): aborted records never hide
committed ones and are removed; markers stay while they decide records, then get a delete
horizon and go; an active idempotent producer's last batch keeps its header; the key map is
bounded (several passes); max.compaction.lag.ms forces a pass and rolls the active segment."""

import os
import struct

from headrace.storage import AbortedTxn, LogConfig, clean
from headrace.storage._records import walk_records
from headrace.storage.cleaning import key_map
from storage_batches import make_keyed_batch, make_marker, split_batches

DAY = 24 * 3600 * 1000


def cfg(**kw):
    base = dict(segment_bytes=100_000, index_interval_bytes=200, cleanup_policy="compact",
                min_cleanable_dirty_ratio=0.0, delete_retention_ms=DAY)
    base.update(kw)
    return LogConfig(**base)


def put(log, records, ts=10_000, **kw):
    """Append one batch of (key, value) pairs; returns its base offset."""
    base = log.log_end_offset
    b = make_keyed_batch(base, [(k, v, ts) for k, v in records], base_timestamp=ts, **kw)
    log.append(b, base, base + len(records) - 1, ts)
    return base


def marker(log, pid, epoch, commit, aborted_first=None):
    base = log.log_end_offset
    entry = None if commit else AbortedTxn(pid, aborted_first, base, base + 1)
    log.append(make_marker(base, pid, epoch, commit), base, base, 1_000, aborted_txn=entry)
    return base


def batches(log):
    """(base offset, attributes, producer id, base sequence, records count, base timestamp,
    keys) of every stored batch."""
    out = []
    for seg in log._segments:
        with seg.log_file.use() as fd:
            data = os.pread(fd, seg.size, 0)
        for b in split_batches(data):
            attrs = struct.unpack_from(">h", b, 21)[0]
            base_ts, = struct.unpack_from(">q", b, 27)
            pid, = struct.unpack_from(">q", b, 43)
            seq, count = struct.unpack_from(">ii", b, 53)
            keys = [r.key for r in walk_records(memoryview(b)[61:], count)]
            out.append((struct.unpack_from(">q", b)[0], attrs, pid, seq, count, base_ts, keys))
    return out


def live_keys(log):
    """key -> offset of each data record left, as a read_uncommitted reader sees them."""
    out = {}
    for base, attrs, pid, seq, count, _, keys in batches(log):
        if attrs & 0x20:
            continue
        for i, k in enumerate(keys):
            out.setdefault(k, []).append(base + i)
    return out


def test_aborted_records_are_removed_and_never_hide_committed_ones(open_log):
    log = open_log(cfg())
    put(log, [(b"K", b"committed")])                                   # 0
    first = put(log, [(b"K", b"aborted")], producer_id=5, producer_epoch=0,
                base_sequence=0, transactional=True)                  # 1
    abort_at = marker(log, 5, 0, commit=False, aborted_first=first)   # 2
    put(log, [(b"C", b"in a committed txn")], producer_id=6, producer_epoch=0,
        base_sequence=0, transactional=True)                          # 3
    commit_at = marker(log, 6, 0, commit=True)                        # 4
    log.roll()
    put(log, [(b"other", b"x")])                                      # 5, active
    now = 50_000
    assert clean(log, now_ms=now, force=True) is not None
    # the committed record for K survives: the aborted one neither entered the key map nor
    # survived itself
    assert live_keys(log) == {b"K": [0], b"C": [3], b"other": [5]}
    kinds = {base: (attrs, keys) for base, attrs, *_x, keys in batches(log)}
    # both markers stay: each decided records that this pass still found
    assert abort_at in kinds and commit_at in kinds
    assert not kinds[abort_at][0] & 0x40
    assert log.aborted_txns(0, 10) == [AbortedTxn(5, first, abort_at, abort_at + 1)]

    # second pass: the aborted records are gone, so the abort marker gets a delete horizon;
    # its .txnindex entry goes (there is nothing left for readers to skip)
    clean(log, now_ms=now + 1, force=True)
    kinds = {base: (attrs, base_ts) for base, attrs, _p, _s, _c, base_ts, _k in batches(log)}
    attrs, horizon = kinds[abort_at]
    assert attrs & 0x40 and horizon == now + 1 + DAY
    assert log.aborted_txns(0, 10) == []
    assert commit_at in kinds and not kinds[commit_at][0] & 0x40  # still decides C@3
    # before the horizon the marker stays; after it, it goes
    clean(log, now_ms=now + 2, force=True)
    assert abort_at in {b[0] for b in batches(log)}
    clean(log, now_ms=now + 2 + DAY, force=True)
    assert abort_at not in {b[0] for b in batches(log)}
    assert live_keys(log) == {b"K": [0], b"C": [3], b"other": [5]}
    # the records survive a restart with the cleaned files
    log.close()
    log = open_log(cfg(), recover=True)
    assert live_keys(log) == {b"K": [0], b"C": [3], b"other": [5]}


def test_commit_marker_goes_once_its_records_are_compacted_away(open_log):
    log = open_log(cfg())
    put(log, [(b"C", b"old")], producer_id=6, producer_epoch=0, base_sequence=0,
        transactional=True)                                            # 0
    commit_at = marker(log, 6, 0, commit=True)                         # 1
    put(log, [(b"C", b"new")])                                         # 2: replaces C@0
    log.roll()
    put(log, [(b"x", b"x")])
    clean(log, now_ms=1, force=True)
    assert live_keys(log)[b"C"] == [2]
    assert commit_at in {b[0] for b in batches(log)}   # it saw C@0 in this pass
    clean(log, now_ms=2, force=True)                    # nothing left: horizon set
    clean(log, now_ms=3 + DAY, force=True)
    assert commit_at not in {b[0] for b in batches(log)}


def test_active_producers_last_batch_keeps_its_header(open_log):
    log = open_log(cfg())
    put(log, [(b"K", b"a")], producer_id=9, producer_epoch=2, base_sequence=0)   # 0
    last = put(log, [(b"K", b"b"), (b"J", b"c")], producer_id=9, producer_epoch=2,
               base_sequence=1)                                                 # 1-2
    put(log, [(b"K", b"z"), (b"J", b"z")])                                       # 3-4
    log.roll()
    put(log, [(b"x", b"x")])
    clean(log, now_ms=1, force=True, producers={9: (last, 2)})
    found = {b[0]: b for b in batches(log)}
    assert 0 not in found                           # an older batch of the producer goes
    base, attrs, pid, seq, count, _, keys = found[last]
    assert (pid, seq, count, keys) == (9, 1, 0, [])  # emptied, header kept: sequence 1-2
    # the kept header is a valid batch that covers offsets 1-2
    log.close()
    log = open_log(cfg(), recover=True)
    assert log.log_end_offset == 6 and last in {b[0] for b in batches(log)}
    # not an active producer: the emptied batch is simply dropped
    clean(log, now_ms=2, force=True, producers={})
    assert last not in {b[0] for b in batches(log)}


def test_marker_of_a_producer_whose_last_entry_it_is_stays(open_log):
    log = open_log(cfg())
    first = put(log, [(b"K", b"a")], producer_id=5, producer_epoch=0, base_sequence=0,
                transactional=True)
    abort_at = marker(log, 5, 1, commit=False, aborted_first=first)   # fenced: epoch 1
    log.roll()
    put(log, [(b"x", b"x")])
    for now in (1, 2, 3 + DAY):
        clean(log, now_ms=now, force=True, producers={5: (-1, 1)})
    assert abort_at in {b[0] for b in batches(log)}
    assert b"K" not in live_keys(log)


def test_key_map_is_bounded_and_compaction_takes_several_passes(open_log, monkeypatch):
    log = open_log(cfg(segment_bytes=1200))
    model = {}
    ts = 10_000
    for round_ in range(6):
        for i in range(40):
            key = f"key{i:03d}".encode()
            value = f"{round_}-{i}".encode()
            put(log, [(key, value)], ts=ts)
            model[key] = value
            ts += 1
    log.roll()
    put(log, [(b"tail", b"t")], ts=ts)
    sizes = []
    real = key_map.offset_map

    def spy(plan, decompress, max_entries):
        offsets, end = real(plan, decompress, max_entries)
        sizes.append((len(offsets), max_entries))
        return offsets, end

    monkeypatch.setattr(key_map, "offset_map", spy)
    limit = 25
    result = clean(log, now_ms=1, force=True, map_bytes=limit * key_map.MAP_ENTRY_BYTES)
    assert result.passes > 1 and len(sizes) == result.passes
    assert all(n <= limit for n, _ in sizes)
    # every key's latest value, and only that, is left
    values = {}
    for base, attrs, pid, seq, count, _, keys in batches(log):
        for k in keys:
            assert k not in values, f"{k} kept twice"
            values[k] = base
    assert set(values) == set(model) | {b"tail"}
    assert result.cleaned_up_to == log._bases[-1]


def test_max_compaction_lag_forces_a_pass_and_rolls(open_log):
    log = open_log(cfg(min_cleanable_dirty_ratio=0.9, segment_ms=10 * DAY,
                       max_compaction_lag_ms=1000))
    for i in range(20):
        put(log, [(f"x{i}".encode(), b"v" * 50)], ts=10_000)
    put(log, [(b"K", b"1")], ts=11_000)        # exactly max.compaction.lag.ms: no roll
    assert log.segment_count == 1
    put(log, [(b"K", b"2")], ts=11_001)        # past it: the active segment rolls
    assert log.segment_count == 2
    assert clean(log, now_ms=20_000) is not None   # all dirty
    put(log, [(b"K", b"3")], ts=11_500)
    put(log, [(b"K", b"4")], ts=12_002)        # rolls: K@21-22 form a small dirty segment
    assert log.segment_count == 3
    assert clean(log, now_ms=11_900) is None   # dirty ratio too low, lag not reached yet
    assert log.cleaner_offset == 21
    result = clean(log, now_ms=20_000)         # the dirty segment is overdue
    assert result is not None and result.cleaned_up_to == 23
