"""Per-segment aborted-transactions indexes (.txnindex): written with the abort marker, read by
read_committed lookups, deleted with their segment, cut by recovery and truncation."""

import os

from headrace.storage import AbortedTxn, LogConfig, OffsetCheckpoints
from storage_batches import make_batch, max_ts, split_batches

CFG = LogConfig(segment_bytes=600, index_interval_bytes=256)


def append(log, count=1, aborted=None):
    base = log.log_end_offset
    b = make_batch(base, count, value_size=40)
    log.append(b, base, base + count - 1, max_ts(b), aborted_txn=aborted)
    return base


def batches_at(data):
    pos = 0
    for b in split_batches(data):
        yield pos, b
        pos += len(b)


def txn_files(log_dir):
    return sorted(n for n in os.listdir(log_dir) if n.endswith(".txnindex"))


def build(log):
    """Producer 7 aborts [0, m1], producer 8 aborts [first8, m2] later; data around them."""
    entries = []
    append(log, 2)                                      # 0-1: producer 7's records
    m = log.log_end_offset
    append(log, 1, aborted := AbortedTxn(7, 0, m, m + 1))
    entries.append(aborted)
    for _ in range(10):
        append(log, 3)
    first8 = append(log, 2)
    for _ in range(5):
        append(log, 3)
    m = log.log_end_offset
    append(log, 1, aborted := AbortedTxn(8, first8, m, m + 1))
    entries.append(aborted)
    append(log, 2)
    return entries


def test_entries_live_beside_the_marker_segment(open_log, log_dir):
    log = open_log(CFG)
    e7, e8 = build(log)
    assert log.segment_count > 3
    assert len(txn_files(log_dir)) == 2  # only segments holding a marker have a file
    assert log.aborted_txns(0, log.log_end_offset) == [e7, e8]
    assert log.aborted_txns(e7.last_offset + 1, e8.first_offset) == []
    assert log.aborted_txns(e8.first_offset, e8.first_offset + 1) == [e8]
    assert log.aborted_txns(0, 1) == [e7]   # stops at e7: its LSO is past the range
    log.close()
    log = open_log(CFG)
    assert log.aborted_txns(0, log.log_end_offset) == [e7, e8]
    log.close()
    log = open_log(CFG, recover=True)
    assert log.aborted_txns(0, log.log_end_offset) == [e7, e8]


def test_entries_go_with_their_segments(open_log, log_dir):
    log = open_log(CFG)
    e7, e8 = build(log)
    log.delete_records_before(e8.first_offset)  # e7's segment is gone, and its file
    assert len(txn_files(log_dir)) == 1
    assert log.aborted_txns(log.log_start_offset, log.log_end_offset) == [e8]
    log.truncate_to(e8.last_offset)  # the marker is cut off: so is its entry
    assert log.aborted_txns(log.log_start_offset, log.log_end_offset + 10) == []
    assert txn_files(log_dir) == [] or all(
        os.path.getsize(log_dir / n) == 0 for n in txn_files(log_dir))
    e9 = AbortedTxn(9, log.log_end_offset, log.log_end_offset, log.log_end_offset + 1)
    append(log, 1, e9)
    assert log.aborted_txns(log.log_start_offset, log.log_end_offset) == [e9]


def test_replay_adds_each_entry_once(open_log, log_dir):
    log = open_log(CFG)
    e7, e8 = build(log)
    for name in txn_files(log_dir):
        os.unlink(log_dir / name)   # lost: the broker rebuilds from the markers
    log.close()
    log = open_log(CFG)
    assert log.aborted_txns(0, log.log_end_offset) == []
    assert log.add_aborted_txn(e7) and log.add_aborted_txn(e8)
    assert not log.add_aborted_txn(e7) and not log.add_aborted_txn(e8)
    assert log.aborted_txns(0, log.log_end_offset) == [e7, e8]
    assert not log.add_aborted_txn(AbortedTxn(1, 0, log.log_end_offset, 0))  # beyond the log


def test_recovery_drops_entries_of_lost_markers(open_log, log_dir):
    log = open_log(CFG)
    e7, e8 = build(log)
    log.close()
    seg = max(int(n[:20]) for n in txn_files(log_dir))
    OffsetCheckpoints.of(log_dir.parent).forget(log_dir.name)  # an unclean stop: no checkpoint,
    for name in os.listdir(log_dir):  # later segments lost
        if name[:20].isdigit() and int(name[:20]) > seg:
            os.unlink(log_dir / name)
    path = log_dir / f"{seg:020d}.log"
    data = path.read_bytes()
    cut = next(pos for pos, b in batches_at(data) if int.from_bytes(b[:8], "big") == e8.last_offset)
    with open(path, "r+b") as f:       # torn inside the marker of e8
        f.truncate(cut + 20)
    log = open_log(CFG, recover=True)
    assert log.log_end_offset <= e8.last_offset
    assert log.aborted_txns(0, 10**6) == [e7]
    # a torn entry at the end of an index file is ignored and overwritten
    name = txn_files(log_dir)[0]
    with open(log_dir / name, "ab") as f:
        f.write(b"\x00\x00\x01")
    log.close()
    log = open_log(CFG)
    assert log.aborted_txns(0, 10**6) == [e7]
