"""The translator's reader of committed records (broker/iceberg/committed.py) against the
generic record decoder, on a real log: every kind of record (no key, no value, headers, long
values whose lengths take several varint bytes, compressed batches), a start in the middle of
a batch, an end below the log end, a byte budget, and an aborted transaction between
committed ones."""

from __future__ import annotations

import pytest

from headrace.broker.iceberg import committed
from headrace.broker.iceberg.committed import read_committed
from headrace.broker.log.txn_markers import control_batch
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches
from headrace.storage import AbortedTxn, Log


def records(seed: int) -> list[Record]:
    return [
        Record(key=None, value=b"v%d" % seed, timestamp=1000 + seed),
        Record(key=b"k%d" % seed, value=None, timestamp=1001 + seed),
        Record(key=b"k", value=b"x" * (300 + seed), timestamp=1002 + seed),
        Record(key=b"h", value=b"y", headers=[("a", b"1"), ("b", None)], timestamp=5),
        Record(key=b"", value=b"", timestamp=7),
    ]


def append(plog: Log, batch: bytes, aborted: AbortedTxn | None = None) -> None:
    data = bytearray(batch)
    ((_, _, h),) = iter_batches(data)
    base = plog.log_end_offset
    data[0:8] = base.to_bytes(8, "big")
    plog.append(data, base, base + h.last_offset_delta, h.max_timestamp, aborted_txn=aborted)


@pytest.fixture(params=["c", "python"])
def decoder(request, monkeypatch):
    """Both decoders: the C one (headrace._record_columns, when built) and the Python twin."""
    if request.param == "python":
        monkeypatch.setattr(committed, "_columns", None)
    elif committed._columns is None:
        pytest.skip("headrace._record_columns is not built")
    return request.param


def rows_of(cols) -> list[tuple]:
    found = cols.arrays()
    return list(
        zip(
            found["offset"].to_pylist(),
            found["timestamp"].to_pylist(),
            found["key"].to_pylist(),
            found["value"].to_pylist(),
            found["headers"],
        )
    )


@pytest.fixture
def plog(tmp_path):
    plog = Log.open(str(tmp_path / "t-0"), recover=False)
    yield plog
    plog.close()


def test_the_columns_are_what_the_generic_decoder_reads(plog, decoder):
    for i in range(6):
        append(plog, build_batch(records(i), compression=1 if i % 2 else 0))
    expected = []
    data = plog.read(0, 1 << 20)
    for pos, size, _ in iter_batches(data):
        expected += decode_records(memoryview(data)[pos : pos + size])
    end = plog.log_end_offset
    for start, stop in ((0, end), (3, end), (7, 22), (0, 1)):
        cols = read_committed(plog, 0, start, stop, 1 << 20)
        got = rows_of(cols)
        want = [(o, t, k, v, h) for o, t, k, v, h in expected if start <= o < stop]
        assert got == want, (start, stop)
        assert cols.next_offset >= stop and not cols.more
    small = read_committed(plog, 0, 0, end, 1)  # the first batch is larger: nothing read
    assert rows_of(small) == [] and small.more and small.next_offset == 0
    first = small.blocked_by
    assert first > 1
    small = read_committed(plog, 0, 0, end, first)  # that batch, whole, and no more
    assert [r[0] for r in rows_of(small)] == [0, 1, 2, 3, 4]
    assert small.more and small.next_offset == 5 and small.bytes_read == first
    two = read_committed(plog, 0, 0, end, first + 1)  # (a batch is never split)
    assert two.next_offset == 5 and two.bytes_read == first


def test_an_aborted_transaction_and_control_batches_are_left_out(plog, decoder):
    append(plog, build_batch([Record(value=b"plain")]))
    txn = dict(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    first = plog.log_end_offset
    append(plog, build_batch([Record(value=b"aborted-1"), Record(value=b"aborted-2")], **txn))
    append(plog, build_batch([Record(value=b"between")]))
    marker = plog.log_end_offset
    append(plog, control_batch(7, 0, False, 0), AbortedTxn(7, first, marker, marker + 1))
    append(plog, build_batch([Record(value=b"committed")], **{**txn, "base_sequence": 2}))
    append(plog, control_batch(7, 0, True, 0))
    cols = read_committed(plog, 0, 0, plog.log_end_offset, 1 << 20)
    assert cols.value_list() == [b"plain", b"between", b"committed"]
    assert cols.next_offset == plog.log_end_offset


def test_a_files_view_reads_what_the_log_reads(tmp_path, decoder):
    """The translator's workers read a log through ``Log.files_view()`` (its files, from another
    process): over several segments with sparse indexes, an aborted transaction in one segment
    and its marker in the next, every start, end and budget reads the same columns."""
    from headrace.storage import LogConfig

    config = LogConfig(segment_bytes=700, index_interval_bytes=150)
    plog = Log.open(str(tmp_path / "t-0"), config, recover=False)
    try:
        txn = dict(producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
        first = None
        for i in range(12):
            if i == 5:
                first = plog.log_end_offset
                append(plog, build_batch([Record(value=b"gone-%d" % i)], **txn))
            elif i == 8:
                marker = plog.log_end_offset
                append(
                    plog, control_batch(9, 0, False, 0), AbortedTxn(9, first, marker, marker + 1)
                )
            else:
                append(plog, build_batch(records(i)))
        assert plog.segment_count > 2
        view = plog.files_view()
        end = plog.log_end_offset
        for start in range(end):
            for stop in (start + 1, end // 2 + 1, end):
                for budget in (200, 1000, 1 << 20):
                    if stop <= start:
                        continue
                    a = read_committed(plog, 0, start, stop, budget)
                    b = read_committed(view, 0, start, stop, budget)
                    assert (rows_of(b), b.next_offset, b.blocked_by, b.more) == (
                        rows_of(a),
                        a.next_offset,
                        a.blocked_by,
                        a.more,
                    ), (start, stop, budget)
        assert not any(
            v.startswith(b"gone")
            for v in read_committed(view, 0, 0, end, 1 << 20).value_list()
            if v
        )
    finally:
        plog.close()
