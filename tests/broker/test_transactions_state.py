"""Producer state rebuilt from a log with transactions (no broker process): open transactions,
the aborted index, snapshots, truncation; and the state machine tables."""

from __future__ import annotations

import struct

import pytest

from headrace.broker.coordinator.txn import transaction_state as ts
from headrace.broker.log.producer_state import ProducerStateManager
from headrace.broker.log.txn_markers import (
    ABORT,
    COMMIT,
    LEGACY_INDEX_FILE,
    control_batch,
    control_type,
)
from headrace.protocol.records import Record, build_batch, iter_batches, set_base_offset
from headrace.storage import AbortedTxn, Log


def append(log, batch) -> int:
    batch = bytearray(batch)
    base = log.log_end_offset
    set_base_offset(batch, 0, base)
    [(_, _, h)] = list(iter_batches(batch))
    log.append(batch, base, base + h.last_offset_delta, h.max_timestamp)
    return base


def data(pid, epoch, seq, n=1):
    return build_batch([Record(value=b"v%d" % i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def test_control_batch_layout():
    batch = control_batch(7, 3, commit=True, coordinator_epoch=5)
    [(_, _, h)] = list(iter_batches(batch))
    assert (h.is_control, h.is_transactional, h.producer_id, h.producer_epoch, h.base_sequence) == (True, True, 7, 3, -1)
    assert control_type(batch) == COMMIT
    assert control_type(control_batch(7, 3, commit=False, coordinator_epoch=5)) == ABORT


def test_replay_rebuilds_open_transactions_and_the_aborted_index(tmp_path):
    log = Log.open(tmp_path / "p", recover=False)
    append(log, data(1, 0, 0, 3))           # 0-2: producer 1, committed below
    append(log, data(2, 0, 0, 2))           # 3-4: producer 2, aborted below
    append(log, control_batch(1, 0, True, 0))   # 5
    append(log, data(3, 0, 0))              # 6: producer 3, left open
    append(log, control_batch(2, 0, False, 0))  # 7 (appended without its index entry)
    state = ProducerStateManager.load(tmp_path / "p", log, max_joining=1000)
    assert state.ongoing == {3: 6}
    assert state.last_stable_offset(log.log_end_offset) == 6
    assert log.aborted_txns(0, 6) == [AbortedTxn(2, 3, 7, 6)]  # rebuilt from the marker
    assert log.aborted_txns(8, 10) == []
    # not duplicated by a second replay without a snapshot
    ProducerStateManager.load(tmp_path / "p", log, max_joining=1000)
    assert log.aborted_txns(0, 10) == [AbortedTxn(2, 3, 7, 6)]
    # a snapshot carries open transactions
    state.write_snapshot(tmp_path / "p", log.log_end_offset)
    third = ProducerStateManager.load(tmp_path / "p", log, max_joining=1000)
    assert third.ongoing == {3: 6} and log.aborted_txns(0, 8) == [AbortedTxn(2, 3, 7, 6)]
    assert third.check(1, 0, 3, 3) == (0, -1)  # sequences continue after a marker
    third.truncate(6)
    assert third.ongoing == {}
    log.truncate_to(7)  # the marker goes, and its entry with it
    assert log.aborted_txns(0, 10) == []
    log.close()


def test_legacy_index_file_is_moved_into_the_segments(tmp_path):
    log = Log.open(tmp_path / "p", recover=False)
    append(log, data(2, 0, 0, 2))           # 0-1
    append(log, control_batch(2, 0, False, 0))  # 2
    entry = struct.pack(">hqqqq", 0, 2, 0, 2, 3)
    (tmp_path / "p" / LEGACY_INDEX_FILE).write_bytes(entry)
    ProducerStateManager.load(tmp_path / "p", log, max_joining=1000)
    assert not (tmp_path / "p" / LEGACY_INDEX_FILE).exists()
    assert log.aborted_txns(0, 3) == [AbortedTxn(2, 0, 2, 3)]
    log.close()


def test_marker_entry_only_for_an_abort_with_records_here():
    state = ProducerStateManager(max_joining=1000)
    state.record(5, 0, 0, 0, 10, transactional=True)
    state.record(6, 0, 0, 0, 11, transactional=True)
    assert state.marker_entry(5, COMMIT, 12) is None
    assert state.marker_entry(7, ABORT, 12) is None
    assert state.marker_entry(5, ABORT, 12) == AbortedTxn(5, 10, 12, 11)  # 6 still open
    state.complete(6, 0, COMMIT, 12)
    assert state.marker_entry(5, ABORT, 13) == AbortedTxn(5, 10, 13, 14)


def test_marker_with_a_bumped_epoch_fences_the_old_epoch():
    state = ProducerStateManager(max_joining=1000)
    state.record(5, 0, 0, 0, 10, transactional=True)
    state.complete(5, 1, ABORT, 11)  # the coordinator aborted with epoch + 1
    assert state.check(5, 0, 1, 1)[0] == 47  # INVALID_PRODUCER_EPOCH
    assert state.check(5, 1, 0, 0) == (0, -1)


def test_state_machine_tables():
    codes = [s.code for s in ts.ALL]
    assert len(set(codes)) == len(codes) == 8
    assert all(ts.BY_CODE[s.code] is s and ts.BY_NAME[s.name] is s for s in ts.ALL)
    # the paths the coordinator takes
    for path in ([ts.EMPTY, ts.ONGOING, ts.PREPARE_COMMIT, ts.COMPLETE_COMMIT, ts.EMPTY],
                 [ts.ONGOING, ts.PREPARE_EPOCH_FENCE, ts.PREPARE_ABORT, ts.COMPLETE_ABORT, ts.ONGOING],
                 [ts.COMPLETE_ABORT, ts.DEAD]):
        for a, b in zip(path, path[1:]):
            ts.check_transition(a, b)
    with pytest.raises(ts.IllegalTransition):
        ts.check_transition(ts.EMPTY, ts.PREPARE_COMMIT)
    assert ts.END_TXN[(ts.EMPTY, True)] == 48  # INVALID_TXN_STATE
    assert ts.END_TXN[(ts.PREPARE_COMMIT, True)] == 51  # CONCURRENT_TRANSACTIONS
