"""ShareFetch (key 78), versions 1-2: a share consumer's fetch (KIP-932): records handed to
the member under an acquisition lock, with the acknowledgements of earlier ones.

How this works
--------------
The request runs in the member's share session (share/share_sessions.py: epoch 0 opens it
with the partitions named, later epochs add and forget partitions, -1 ends it). Its
acknowledgements are applied first (share_acknowledge.acknowledge; their results go in each
partition's ``acknowledge_error_code``). Then, unless the session ends or the request only
renews locks, every partition of the session that this broker leads is read: from the
group's share partition's next offset (its first AVAILABLE record, else its end offset),
below the high watermark (the last stable offset for a group whose ``share.isolation.level``
is read_committed), at most ``partition_max_bytes``... of the response's ``max_bytes``. The
batches read are offered to the share partition, which acquires what is free in them
(share/share_partition.py); the response carries the stored bytes of the batches holding
acquired records, untouched, and the acquired ranges with their delivery counts. Control
batches and, under read_committed, aborted transactions' batches are archived at once: they
are never delivered, so the consumer never has to settle them.

With nothing acquired and fewer than ``min_bytes``, the request waits, until ``max_wait_ms``
at the most, for an append to one of the partitions or for records to come back (released,
or their locks ran out), and tries again. Memory is reserved from the broker's
``queued.max.response.bytes`` as Fetch does, until the response has been sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.log.storage_errors import storage_failed
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.broker.share.share_partition_manager import SharePartitionLimit, ShareStateError
from headrace.broker.share.share_sessions import FINAL_EPOCH, ShareSessionError
from headrace.protocol import ErrorCode, messages
from headrace.protocol.records import CorruptRecordError, iter_batches
from headrace.storage import StorageError

from .leader_hints import LeaderHints
from .share_acknowledge import acknowledge, refusal

R = messages.ShareFetchResponse
NO_LEADER = (-1, -1)


def _answer(error: int, message: str | None = None, **fields) -> messages.ShareFetchResponse:
    return R(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        acquisition_lock_timeout_ms=fields.get("lock_ms", 0),
        responses=fields.get("responses", []),
        node_endpoints=fields.get("node_endpoints", []),
    )


async def handle(broker: Broker, header, request: messages.ShareFetchRequest):
    version = header.api_version
    error, message = refusal(broker, header, request.group_id, request.member_id)
    group_id, member_id = request.group_id or "", request.member_id or ""
    renew = version >= 2 and request.is_renew_ack
    if (
        not error
        and renew
        and any((request.max_bytes, request.min_bytes, request.max_records, request.max_wait_ms))
    ):
        error, message = (
            ErrorCode.INVALID_REQUEST,
            "maxBytes, minBytes, maxRecords and maxWaitMs must be set to 0 if isRenewAck is true.",
        )
    epoch = request.share_session_epoch
    named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if not error and epoch == 0 and acks:
        error, message = ErrorCode.INVALID_REQUEST, "Acknowledgements in a new share session."
    if error:
        return _answer(error, message)
    shares = broker.shares
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    try:
        session = shares.sessions.fetch(
            group_id, member_id, epoch, named, forgotten, header.session
        )
    except ShareSessionError as e:
        if e.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED:  # as Kafka: not at once
            await asyncio.sleep(max(request.max_wait_ms, 0) / 1000)
        return _answer(e.code)
    hints = LeaderHints(broker, header.session, R, 0, 0, version)
    acked = await acknowledge(broker, header, request, R, hints, renew) if acks else {}
    parts: dict = {}  # (topic id, index) -> partition response
    on_sent = None
    if epoch == FINAL_EPOCH:
        shares.sessions.end(session)
    elif not renew:
        on_sent = await _fetch(broker, header, request, list(session.partitions), parts, hints)
    for tid, results in acked.items():
        for index, (code, text, leader) in results.items():
            resp = parts.get((tid, index))
            if resp is None:
                resp = parts[(tid, index)] = _partition(index)
            resp.acknowledge_error_code, resp.acknowledge_error_message = code, text
            if leader is not None:
                resp.current_leader = leader
    by_topic: dict = {}
    for (tid, _), resp in parts.items():
        by_topic.setdefault(tid, []).append(resp)
    response = _answer(
        ErrorCode.NONE,
        lock_ms=shares.lock_ms(group_id),
        responses=[
            R.ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()
        ],
        node_endpoints=hints.endpoints(),
    )
    return (response, on_sent) if on_sent is not None else response


def _partition(index: int, error: int = ErrorCode.NONE):
    return R.PartitionData(
        partition_index=index,
        error_code=error,
        acknowledge_error_code=ErrorCode.NONE,
        current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
        records=b"",
        acquired_records=[],
    )


async def _fetch(broker: Broker, header, request, keys: list, parts: dict, hints: LeaderHints):
    """Fill ``parts`` with what the session's partitions give; the function that releases the
    response's memory once it is sent."""
    shares = broker.shares
    group_id = request.group_id
    authorizer, session = broker.authorizer, header.session
    wanted = []  # (partition response, partition, share partition)
    for tid, index in keys:
        topic = broker.topics.find(None, tid)
        if topic is None:
            parts[(tid, index)] = _partition(index, ErrorCode.UNKNOWN_TOPIC_ID)
            continue
        if not authorizer.allows(session, Operation.READ, TOPIC, topic.name):
            parts[(tid, index)] = _partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        partition = topic.partition(index)
        if partition is None:
            resp = parts[(tid, index)] = _partition(index, topic.partition_error(index))
            hints.add(resp, topic.name, index)
            continue
        try:
            sp = await shares.open(group_id, partition)
        except SharePartitionLimit as e:
            resp = parts[(tid, index)] = _partition(index, ErrorCode.UNKNOWN_SERVER_ERROR)
            resp.error_message = str(e)
            continue
        except ShareStateError as e:  # its state could not be read: the client tries again
            parts[(tid, index)] = _partition(index, e.code)
            continue
        except StorageError as e:
            storage_failed(f"{topic.name}-{index}", "read", e)
            parts[(tid, index)] = _partition(index, ErrorCode.KAFKA_STORAGE_ERROR)
            continue
        wanted.append((_partition(index), partition, sp))
    if not wanted:
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    cap = max(1, min(request.max_bytes, int(broker.config["fetch.max.bytes"])))
    max_records = request.max_records if request.max_records > 0 else 500
    while True:
        reservation = await broker.fetch_budget.reserve(cap, deadline)
        try:
            taken = await _acquire_all(broker, request, wanted, reservation.size, max_records)
        except BaseException:
            reservation.release()
            raise
        remaining = deadline - loop.time()
        errors = any(resp.error_code for resp, _, _ in wanted)
        if taken or errors or remaining <= 0 or request.min_bytes <= 0 or not reservation.size:
            break
        reservation.release()  # nothing is held while waiting
        wakeup = loop.create_future()
        for _, partition, sp in wanted:
            partition.await_data(wakeup)
            sp.waiters.append(wakeup)
        try:
            async with asyncio.timeout(remaining):
                await wakeup
        except TimeoutError:
            pass
        finally:
            for _, partition, sp in wanted:
                partition.stop_awaiting(wakeup)
                if wakeup in sp.waiters:
                    sp.waiters.remove(wakeup)
    for resp, partition, _ in wanted:
        parts[(partition.topic.topic_id, partition.index)] = resp
        if resp.records:
            name = partition.topic.name
            broker.metrics.bytes_out[name] = broker.metrics.bytes_out.get(name, 0) + len(
                resp.records
            )
    return reservation.release


async def _acquire_all(broker, request, wanted, max_bytes: int, max_records: int) -> int:
    """One pass over the partitions, acquiring what is free within the limits: how many
    records were acquired."""
    shares = broker.shares
    group_id, member_id = request.group_id, request.member_id
    lock_until = asyncio.get_running_loop().time() + shares.lock_ms(group_id) / 1000
    max_locks = shares.max_locks(group_id)
    committed = shares.isolation(group_id) == "read_committed"
    total = taken = 0
    for resp, partition, sp in wanted:
        if partition.gone or not partition.leader:
            resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        if total >= max_bytes or taken >= max_records:
            break
        taken += await _acquire(
            broker,
            partition,
            sp,
            member_id,
            committed,
            max_bytes - total,
            max_records - taken,
            max_locks,
            lock_until,
            resp,
        )
        total += len(resp.records)
    return taken


async def _acquire(
    broker, partition, sp, member_id, committed, max_bytes, max_records, max_locks, lock_until, resp
) -> int:
    """Read from the share partition's next offset and acquire what is free: the number of
    records acquired; the partition response gets the bytes and the ranges."""
    log = partition.log
    if log.log_start_offset > sp.start:
        sp.skip_to(log.log_start_offset)
    limit = partition.last_stable_offset if committed else partition.high_watermark
    start = sp.next_offset()
    if start >= limit or (start == sp.end and sp.in_flight() >= max_locks):
        return 0

    def read():
        data = log.read(start, max(max_bytes, 1), max_offset=limit)
        aborted = log.aborted_txns(start, limit) if committed and data else []
        return data, aborted

    try:
        data, aborted = await asyncio.wrap_future(broker.read_pool.submit(read))
    except StorageError as e:
        storage_failed(f"{partition.topic.name}-{partition.index}", "read", e)
        resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return 0
    batches = []  # (base, last, not to deliver, position, size)
    try:
        for pos, size, h in iter_batches(data):
            last = h.base_offset + h.last_offset_delta
            skip = h.is_control or (
                h.is_transactional
                and any(
                    a.producer_id == h.producer_id
                    and a.first_offset <= h.base_offset <= a.last_offset
                    for a in aborted
                )
            )
            batches.append((h.base_offset, last, skip, pos, size))
    except CorruptRecordError:
        pass  # the batches before it are whole
    got = sp.acquire(member_id, [b[:3] for b in batches], max_records, max_locks, lock_until)
    if not got:
        return 0
    lo, hi = got[0][0], got[-1][1]
    used = [b for b in batches if b[1] >= lo and b[0] <= hi]
    begin, end = used[0][3], used[-1][3] + used[-1][4]
    resp.records = data[begin:end] if (begin, end) != (0, len(data)) else data
    resp.acquired_records = [
        R.AcquiredRecords(first_offset=f, last_offset=t, delivery_count=n) for f, t, n in got
    ]
    return sum(t - f + 1 for f, t, _ in got)
