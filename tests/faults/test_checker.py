"""The fault suite's checker on histories made by hand: each anomaly it must count, counted once,
and nothing counted in a clean history; the liveness gaps on known acknowledgement times."""

from __future__ import annotations

import pytest

from bench.faults import checker


def history(records: dict[int, list], txns=(), acks=None):
    """``load`` with one idempotent producer (``acks``: n -> [partition, offset, time]) and
    ``txns``; ``read`` with ``records`` (partition -> [[offset, value]])."""
    load = {
        "producers": [{"acked": acks if acks is not None else {}, "failed": {}, "sent": 0}],
        "txns": list(txns),
        "errors": [],
        "probe": {"bad": [], "down": 0, "ok": 0},
    }
    read = {"records": {str(p): r for p, r in records.items()}, "complete": True, "ends": {}}
    return load, read


CLEAN_ACKS = {"0": [0, 0, 1.0], "1": [0, 1, 2.0], "2": [0, 3, 3.0]}
CLEAN_READ = {0: [[0, "p0:0"], [1, "p0:1"], [2, "t0:0:0"], [3, "p0:2"]], 1: [[0, "t0:0:1"]]}
COMMITTED = {"producer": 0, "k": 0, "outcome": "commit", "start": 1.5, "end": 2.5, "commit_s": 0.1}


def test_a_clean_history_has_no_anomaly():
    result = checker.check(*history(CLEAN_READ, [COMMITTED], CLEAN_ACKS))
    assert result["acked"] == 3 and checker.anomalies(result) == 0, result


def test_an_acknowledgement_without_an_offset_is_counted_apart_and_is_no_anomaly():
    acks = {**CLEAN_ACKS, "1": [0, None, 2.0]}
    result = checker.check(*history(CLEAN_READ, [COMMITTED], acks))
    assert result["acked_without_offset"] == 1 and checker.anomalies(result) == 0, result
    without = {**CLEAN_READ, 0: [[0, "p0:0"], [2, "t0:0:0"], [3, "p0:2"]]}
    result = checker.check(*history(without, [COMMITTED], acks))
    assert result["lost"] == 1, "one without an offset must still be read"


@pytest.mark.parametrize(
    "records, txn, count",
    [
        ({0: [[0, "p0:0"], [3, "p0:2"]], 1: [[0, "t0:0:1"]]}, COMMITTED, "lost"),
        ({**CLEAN_READ, 0: CLEAN_READ[0] + [[4, "p0:1"]]}, COMMITTED, "duplicated"),
        (
            {0: [[0, "p0:0"], [2, "p0:1"], [3, "p0:2"], [5, "t0:0:0"]], 1: [[0, "t0:0:1"]]},
            COMMITTED,
            "offset_mismatch",
        ),
        ({0: [[0, "p0:1"], [1, "p0:0"], [3, "p0:2"]], 1: []}, None, "reordered"),
        (CLEAN_READ, {**COMMITTED, "outcome": "abort"}, "aborted_visible"),
        ({**CLEAN_READ, 1: []}, COMMITTED, "committed_missing"),
        ({**CLEAN_READ, 1: []}, {**COMMITTED, "outcome": "unknown"}, "partly_visible"),
        ({**CLEAN_READ, 1: [[0, "t0:0:1"], [1, "t0:0:1"]]}, COMMITTED, "txn_duplicated"),
    ],
)
def test_each_anomaly_is_counted(records, txn, count):
    result = checker.check(*history(records, [txn] if txn else [], CLEAN_ACKS))
    assert result[count] >= 1, result
    assert checker.anomalies(result) >= 1 and result["examples"], result


def test_a_record_read_twice_in_a_row_is_one_duplicate_and_no_reordering():
    twice = {**CLEAN_READ, 0: [[0, "p0:0"], [1, "p0:1"], [2, "p0:1"], [3, "p0:2"]]}
    result = checker.check(*history(twice, [], CLEAN_ACKS))
    assert result["duplicated"] == 1 and result["reordered"] == 0, result


def test_the_longest_gap_counts_from_the_start_and_up_to_the_end():
    times = [1.0, 2.0, 2.5, 6.0, 6.1]
    assert checker.longest_gap(times, 0.0, 10.0) == pytest.approx(3.9)  # 6.1 -> the end
    assert checker.longest_gap(times, 2.2, 5.0) == pytest.approx(2.5)  # 2.5 -> the end (5.0)
    assert checker.longest_gap(times, 2.2, 7.0) == pytest.approx(3.5)  # 2.5 -> 6.0
    assert checker.longest_gap(times, 0.5, 1.2) == pytest.approx(0.5)  # start -> 1.0
    assert checker.longest_gap([], 3.0, 4.0) == pytest.approx(1.0)  # nothing acknowledged


def test_transactions_per_minute_count_the_known_ends_in_the_window():
    txns = [{**COMMITTED, "end": t} for t in (10.0, 20.0, 30.0, 70.0)]
    txns.append({**COMMITTED, "outcome": "unknown", "end": 40.0})
    load, _ = history({}, txns)
    assert checker.txn_rate(load, 0.0, 60.0) == pytest.approx(3.0)
