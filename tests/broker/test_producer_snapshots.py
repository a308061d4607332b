"""A follower's cut (``Partition.truncate_to``) rebuilds the producer state from the newest
snapshot below the cut, and a long log that never rolls a segment has a recent one: the
rebuild replays a bounded tail, not the whole log (which took seconds on a long log while the
follower fetched nothing, stalling acks=all on its leader). The state it rebuilds is exactly
the one a replay of the whole log gives."""

from __future__ import annotations

import time

from headrace.broker.log import partition as partition_module
from headrace.broker.log.partition import Partition
from headrace.broker.log.producer_state import ProducerStateManager
from headrace.protocol.records import Record, build_batch
from headrace.storage import Log, LogConfig

BATCHES = 50_000


def _copied(plog_end: int, count: int, producers: tuple[int, ...]) -> tuple[bytes, int]:
    """``count`` one-record batches from ``producers`` in turn (pid -1: no producer id),
    starting at offset ``plog_end``, as a leader's fetch answer carries them."""
    chunks = []
    for i in range(count):
        offset = plog_end + i
        pid = producers[offset % len(producers)]
        seq = offset // len(producers)
        chunks.append(
            build_batch(
                [Record(value=b"v%d" % offset)],
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=seq if pid >= 0 else -1,
            )
        )
    return b"".join(chunks), plog_end + count


def _follower(tmp_path, producers: tuple[int, ...]) -> Partition:
    plog = Log.open(str(tmp_path / "p-0"), LogConfig(), recover=False)  # 1 GiB: never rolls
    p = Partition(None, 0, plog, ProducerStateManager(max_joining=1000))  # type: ignore[arg-type]
    end = 0
    while end < BATCHES:
        data, end = _copied(end, 2_000, producers)
        p.append_copied(memoryview(data))
    return p


def _replayed(p: Partition) -> list[int]:
    """Counts the batch headers the log hands out (what a rebuild replays)."""
    seen = [0]
    headers = p.log.batch_headers

    def counting(start):
        for h in headers(start):
            seen[0] += 1
            yield h

    p.log.batch_headers = counting  # type: ignore[method-assign]
    return seen


async def test_a_cut_replays_from_a_recent_snapshot_and_rebuilds_the_exact_state(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_S", 0.0, raising=False)
    p = _follower(tmp_path, (11, 12, 13))
    await p._snapshots_written()
    assert p.log.segment_count == 1
    cut = p.log.log_end_offset - 5
    replayed = _replayed(p)
    t0 = time.monotonic()
    await p.truncate_to(cut)
    took = time.monotonic() - t0
    assert p.log.log_end_offset == cut
    headers = replayed[0]
    assert headers <= 2 * 20_000, headers  # partition.SNAPSHOT_RECORDS
    # the whole log replayed from its start gives the same state
    full = ProducerStateManager(max_joining=1000)
    for h in p.log.batch_headers(0):
        full.replay(h)
    assert p.producers.snapshot(cut) == full.snapshot(cut)
    print(f"cut at {cut}: {headers} batch headers replayed in {took * 1000:.0f} ms")


async def test_a_cut_of_a_log_without_producers_replays_nothing(tmp_path):
    p = _follower(tmp_path, (-1,))
    assert p.producers.empty
    replayed = _replayed(p)
    await p.truncate_to(p.log.log_end_offset - 5)
    assert replayed[0] == 0 and p.producers.empty
    assert not list((tmp_path / "p-0").glob("producer-state-*.json"))
