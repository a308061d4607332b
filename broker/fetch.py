"""Fetch (key 1), versions 4-18: the read path, with long polling.

The stored batches are sent as they are on disk: a read returns bytes from the log, and the
response encoder passes them through as their own chunk. Reads run in the broker's read
thread pool, never on the event loop. When fewer than ``min_bytes`` are available the
request waits, until ``max_wait_ms`` at the most, on the partitions' "log end advanced"
signal (every append wakes the fetches waiting on that partition) and reads again.

Limits: ``partition_max_bytes`` per partition and ``max_bytes`` for the response (cut to the
broker's ``fetch.max.bytes``), except that the first partition with data always gets at least
one whole batch, as in Kafka.

Memory: before each read the fetch reserves what it may return from ``broker.fetch_budget``
(the broker-wide ``queued.max.response.bytes``), and the reservation is released once the
response has left through the socket (or the connection closed); between reads of a long
poll it holds nothing. While the budget has no room the fetch waits, within its
``max_wait_ms``; if that passes first, it answers without records.
From v13 topics are identified by topic ID. Fetch sessions are not kept: every response
says session 0, so clients send full fetch requests.

Transactions: every partition reports its last stable offset (LSO: below it every
transaction is decided). A ``read_committed`` fetch reads only below the LSO and gets the
aborted transactions (producer id, first offset) that overlap what it may read, from the
log's aborted-transactions indexes (read in the read thread, beside the records); the
client skips those producers' batches itself, as with Kafka, so the broker still sends the
stored bytes untouched. The LSO is taken on the event loop (where transactions change)
before each read.
"""

from __future__ import annotations

import asyncio

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.storage import OffsetOutOfRange, StorageError

API_KEY = ApiKey.FETCH
MIN_VERSION, MAX_VERSION = 4, 18

R = messages.FetchResponse


def response_bytes(broker, request) -> int:
    """The most a response holds in memory: ``max_bytes``, at most ``fetch.max.bytes``."""
    return max(1, min(request.max_bytes, int(broker.config["fetch.max.bytes"])))


async def handle(broker, header, request):
    version = header.api_version
    by_id = version >= 13
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    wanted = []  # (topic response, partition response, partition or None, fetch offset, max bytes)
    responses = []
    for t in request.topics:
        topic = broker.topics.find(None if by_id else t.topic, t.topic_id)
        out = R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[])
        responses.append(out)
        for p in t.partitions:
            resp = R.PartitionData(partition_index=p.partition, records=None)
            out.partitions.append(resp)
            partition = topic.partition(p.partition) if topic is not None else None
            if partition is None:
                if topic is not None:
                    resp.error_code = topic.partition_error(p.partition)
                elif by_id:
                    resp.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                resp.high_watermark = -1
                continue
            wanted.append((resp, partition, p.fetch_offset, p.partition_max_bytes))
    read_committed = request.isolation_level == 1
    cap = response_bytes(broker, request) if wanted else 0
    budget = broker.fetch_budget
    while True:
        reservation = await budget.reserve(cap, deadline)
        try:
            stable = [part.last_stable_offset for _, part, _, _ in wanted]
            total = await loop.run_in_executor(
                broker.read_pool, _read_all, wanted, reservation.size, stable, read_committed
            )
        except BaseException:
            reservation.release()
            raise
        reservation.grow(total - reservation.size)  # one batch over the limit at the most
        errors = any(resp.error_code for resp, *_ in wanted)
        remaining = deadline - loop.time()
        if total >= request.min_bytes or errors or remaining <= 0 or not wanted:
            break
        reservation.release()
        wakeup = loop.create_future()
        parts = [part for _, part, _, _ in wanted]
        for part in parts:
            part.waiters.append(wakeup)
        try:
            await asyncio.wait_for(wakeup, remaining)
        except TimeoutError:
            pass
        finally:
            for part in parts:
                try:
                    part.waiters.remove(wakeup)
                except ValueError:
                    pass
    for resp, _, _, _ in wanted:
        if not read_committed:
            resp.aborted_transactions = None
        elif not resp.records:
            resp.aborted_transactions = []
    response = R(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=responses)
    return response, reservation.release


def _read_all(wanted, max_bytes: int, stable: list[int], read_committed: bool) -> int:
    """Fill in each partition's records and offsets (runs in a read thread)."""
    total = 0
    for (resp, part, offset, partition_max), lso in zip(wanted, stable):
        log = part.log
        resp.error_code = ErrorCode.NONE
        resp.records = None
        high_watermark = log.log_end_offset
        resp.high_watermark = high_watermark
        resp.last_stable_offset = min(lso, high_watermark)
        resp.log_start_offset = log.log_start_offset
        budget = min(partition_max, max_bytes - total)
        if budget <= 0 and (total or max_bytes <= 0):
            continue  # no room (max_bytes 0: no share of the response budget, no records)
        try:
            data = log.read(
                offset,
                max(budget, 1),
                max_offset=resp.last_stable_offset if read_committed else high_watermark,
            )
        except OffsetOutOfRange:
            resp.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            continue
        except StorageError:
            resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        if total and len(data) > budget:
            continue  # only the first partition with data may go over the limits
        if read_committed and data:
            try:
                aborted = log.aborted_txns(offset, resp.last_stable_offset)
            except StorageError:
                resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            resp.aborted_transactions = [
                R.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                for a in aborted
            ]
        resp.records = data
        total += len(data)
    return total
