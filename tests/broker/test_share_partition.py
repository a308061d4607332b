"""A share partition's bookkeeping (broker/share/share_partition.py) driven directly: what a
share consumer sees through ShareFetch and ShareAcknowledge is tested on the wire in
test_share_fetch.py; here every state change is checked against the runs it leaves."""

import asyncio

from headrace.broker.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    SharePartition,
)
from headrace.protocol import ErrorCode

FAR = 1e12  # a lock deadline that never comes


def tiles(sp: SharePartition) -> None:
    """The runs cover [start, end) exactly, in order, and neighbours differ."""
    at = sp.start
    for a, b in zip(sp.runs, sp.runs[1:]):
        assert not a.same(b) or a.last + 1 != b.first, sp.runs
    for run in sp.runs:
        assert run.first == at and run.last >= run.first, sp.runs
        at = run.last + 1
    assert at == sp.end, (sp.runs, sp.end)
    assert not sp.runs or sp.runs[0].state not in (ACKNOWLEDGED, ARCHIVED)


def new(start=0, limit=3) -> SharePartition:
    return SharePartition("g", start, delivery_limit=lambda: limit)


async def test_acquire_whole_batches_then_available_ones_again():
    sp = new()
    got = sp.acquire("a", [(0, 9, False), (10, 19, False)], 5, 100, FAR)
    assert got == [(0, 9, 1)]  # a whole batch, though 5 were asked for
    assert sp.end == 10 and sp.next_offset() == 10
    got = sp.acquire("b", [(10, 19, False)], 500, 100, FAR)
    assert got == [(10, 19, 1)]
    assert sp.acknowledge("a", [(0, 9, [RELEASE])], FAR) == (ErrorCode.NONE, None)
    assert sp.next_offset() == 0
    got = sp.acquire("b", [(0, 9, False), (10, 19, False)], 500, 100, FAR)
    assert got == [(0, 9, 2)]  # delivered a second time; 10-19 are b's already
    tiles(sp)


async def test_per_offset_acknowledgements_split_and_the_start_moves():
    sp = new()
    sp.acquire("a", [(0, 9, False)], 500, 100, FAR)
    types = [ACCEPT, ACCEPT, REJECT, RELEASE, ACCEPT, GAP, ACCEPT, ACCEPT, RELEASE, ACCEPT]
    assert sp.acknowledge("a", [(0, 9, types)], FAR)[0] == ErrorCode.NONE
    tiles(sp)
    assert sp.start == 3  # 0-2 are done
    assert [(r.first, r.last, r.state) for r in sp.runs] == [
        (3, 3, AVAILABLE),
        (4, 4, ACKNOWLEDGED),
        (5, 5, ARCHIVED),
        (6, 7, ACKNOWLEDGED),
        (8, 8, AVAILABLE),
        (9, 9, ACKNOWLEDGED),
    ]
    assert sp.counts()[AVAILABLE] == 2
    got = sp.acquire("b", [(0, 9, False)], 500, 100, FAR)
    assert got == [(3, 3, 2), (8, 8, 2)]
    sp.acknowledge("b", [(3, 3, [ACCEPT]), (8, 8, [ACCEPT])], FAR)
    assert (sp.start, sp.end, sp.runs) == (10, 10, [])


async def test_only_the_holder_settles_and_all_or_none():
    sp = new()
    sp.acquire("a", [(0, 4, False)], 500, 100, FAR)
    sp.acquire("b", [(5, 9, False)], 500, 100, FAR)
    code, _ = sp.acknowledge("a", [(0, 4, [ACCEPT]), (5, 5, [ACCEPT])], FAR)
    assert code == ErrorCode.INVALID_RECORD_STATE
    assert sp.counts()[ACQUIRED] == 10 and sp.start == 0  # nothing was applied
    tiles(sp)
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], FAR)[0] == ErrorCode.NONE
    assert sp.acknowledge("a", [(0, 4, [ACCEPT])], FAR)[0] == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("b", [(9, 12, [ACCEPT])], FAR)[0] == ErrorCode.INVALID_RECORD_STATE


async def test_the_delivery_limit_archives_a_record_released_too_often():
    sp = new(limit=2)
    for n in (1, 2):
        assert sp.acquire("a", [(0, 0, False)], 500, 100, FAR) == [(0, 0, n)]
        sp.acknowledge("a", [(0, 0, [RELEASE])], FAR)
    assert sp.acquire("a", [(0, 0, False)], 500, 100, FAR) == []
    assert (sp.start, sp.runs) == (1, [])


async def test_locks_run_out_and_wake_waiting_fetches():
    sp = new()
    loop = asyncio.get_running_loop()
    sp.acquire("a", [(0, 9, False)], 500, 100, loop.time() + 0.05)
    sp.acquire("a", [(10, 19, False)], 500, 100, loop.time() + 30)
    waiter = loop.create_future()
    sp.waiters.append(waiter)
    await asyncio.wait_for(waiter, 2)
    assert sp.counts() == {AVAILABLE: 10, ACQUIRED: 10, ACKNOWLEDGED: 0, ARCHIVED: 0}
    # renewing keeps a lock
    sp.acknowledge("a", [(10, 19, [RENEW])], loop.time() + 0.05)
    await asyncio.sleep(0.2)
    assert sp.counts()[AVAILABLE] == 20
    sp.close()


async def test_in_flight_bound_control_batches_and_gaps():
    sp = new()
    got = sp.acquire("a", [(0, 9, False), (10, 10, True), (14, 20, False)], 500, 15, FAR)
    # 0-9, the control record 10 archived, 11-13 missing (compacted) archived, then 14-20:
    # a batch starts while fewer than 15 records are in flight
    assert got == [(0, 9, 1), (14, 20, 1)]
    assert sp.end == 21 and sp.counts()[ARCHIVED] == 4
    assert sp.acquire("a", [(21, 30, False)], 500, 15, FAR) == []  # 21 in flight
    sp.acknowledge("a", [(0, 9, [ACCEPT])], FAR)
    assert sp.start == 14
    assert sp.acquire("a", [(21, 30, False)], 500, 15, FAR) == [(21, 30, 1)]
    tiles(sp)


async def test_release_by_member_and_log_start_moves():
    sp = new()
    sp.acquire("a", [(0, 9, False)], 500, 100, FAR)
    sp.acquire("b", [(10, 19, False)], 500, 100, FAR)
    assert sp.release("a") == 10
    assert sp.counts()[AVAILABLE] == 10
    sp.skip_to(15)
    tiles(sp)
    assert (sp.start, sp.counts()[ACQUIRED]) == (15, 5)
    sp.skip_to(40)
    assert (sp.start, sp.end, sp.runs) == (40, 40, [])
