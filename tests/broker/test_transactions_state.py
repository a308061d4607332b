"""Producer state rebuilt from a log with transactions (no broker process): open transactions,
the aborted index, snapshots, truncation; and the state machine tables."""

from __future__ import annotations

import pytest

from headrace.broker import transaction_state as ts
from headrace.broker.producer_state import ProducerStateManager
from headrace.broker.txn_markers import ABORT, COMMIT, AbortedIndex, control_batch, control_type
from headrace.protocol.records import Record, build_batch, iter_batches, set_base_offset
from headrace.storage import Log


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
    append(log, control_batch(2, 0, False, 0))  # 7
    state = ProducerStateManager.load(tmp_path / "p", log)
    assert state.ongoing == {3: 6}
    assert state.last_stable_offset(log.log_end_offset) == 6
    assert state.aborted.overlapping(0, 6) == [(2, 3)]
    assert state.aborted.overlapping(8, 10) == []
    # the index file is kept and not duplicated by a second replay without a snapshot
    state.aborted.close()
    again = ProducerStateManager.load(tmp_path / "p", log)
    assert again.aborted.entries == state.aborted.entries
    # a snapshot carries open transactions; the index below it is kept from the file
    again.write_snapshot(tmp_path / "p", log.log_end_offset)
    again.aborted.close()
    third = ProducerStateManager.load(tmp_path / "p", log)
    assert third.ongoing == {3: 6} and third.aborted.overlapping(0, 8) == [(2, 3)]
    assert third.check(1, 0, 3, 3) == (0, -1)  # sequences continue after a marker
    third.truncate(7)
    assert third.aborted.entries == [] and AbortedIndex.load(tmp_path / "p", 100).entries == []
    third.truncate(6)
    assert third.ongoing == {}
    log.close()


def test_marker_with_a_bumped_epoch_fences_the_old_epoch():
    state = ProducerStateManager()
    state.record(5, 0, 0, 0, 10, transactional=True)
    state.complete(5, 1, ABORT, 11, 12)  # the coordinator aborted with epoch + 1
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
