"""Fetch (key 1), versions 4-18: the read path, with long polling.

The stored batches are sent as they are on disk, without copying: a read finds them in the
log and returns a region of the segment file (``Log.read_region``: descriptor, position,
length; the file stays pinned), the response encoder passes it through as its own chunk,
and the connection sends it with ``os.sendfile`` from the page cache to the socket
(pipeline/writer.py). Records under ``REGION_MIN`` bytes are copied out by the read instead
(a pread is cheaper than a sendfile step for little data), and so are all records while
regions pin half of ``log.max.open.files`` (the other half stays for everything else).

Where a read finds everything it needs in memory (the usual case: consumers read what was
just written, or read before) it runs on the event loop, saving the trips to a read thread
and back: it first runs as a no-wait read (``Log.read_region(nowait=True)``: the page cache
only, locks only if free), and whenever any part of that would wait for the disk or another
thread it gives back what it took and the whole read runs in the broker's read thread pool
instead, so the event loop never waits for the disk. When fewer than
``min_bytes`` are available the request waits, until ``max_wait_ms`` at the most, on the
partitions' "log end advanced" signal (every append wakes the fetches waiting on that
partition) and reads again.

Limits: ``partition_max_bytes`` per partition and ``max_bytes`` for the response (cut to the
broker's ``fetch.max.bytes``), except that the first partition with data always gets at least
one whole batch, as in Kafka.

Memory: before each read the fetch reserves what it may return from ``broker.fetch_budget``
(the broker-wide ``queued.max.response.bytes``), and the reservation is released once the
response has left through the socket (or the connection closed), together with the pins of
its regions; between reads of a long poll it holds nothing. While the budget has no room the
fetch waits, within its ``max_wait_ms``; if that passes first, it answers without records.
From v13 topics are identified by topic ID. Fetch sessions are not kept: every response
says session 0, so clients send full fetch requests.

Replica fetches (``replica_id`` >= 0, in cluster mode: a follower, replica_fetcher.py) read up
to the log end under the same bounds; every other fetch reads only below the high watermark
(what the ISR has). A follower's fetch offset, its log end, goes to the partition's
``LeaderState`` (leader_state.py: its progress, the ISR, the high watermark), before any
wait. ``current_leader_epoch``, when given, is checked for every fetch
(an older one: FENCED_LEADER_EPOCH, a newer one: UNKNOWN_LEADER_EPOCH; also at a broker that
does not lead the partition, when the epoch is newer than any it has seen: it is behind an
election, ``not_served_error``).

Transactions: every partition reports its last stable offset (LSO: below it every
transaction is decided). A ``read_committed`` fetch reads only below the LSO and gets the
aborted transactions (producer id, first offset) that overlap what it may read, from the
log's aborted-transactions indexes (read in the read thread, beside the records); the
client skips those producers' batches itself, as with Kafka, so the broker still sends the
stored bytes untouched. The LSO is taken on the event loop (where transactions change)
before each read.

Authorization (Kafka's): a replica fetch needs CLUSTER_ACTION on the cluster, a consumer's
READ on each topic; a partition not allowed gets TOPIC_AUTHORIZATION_FAILED.

Quotas: a consumer's response bytes count against its ``consumer_byte_rate`` (quotas.py);
over it, as in Kafka, the response is sent without records (no partitions; the reads are
released and the bytes not counted) with the throttle time, and the connection is muted for
that long; the client fetches the same offsets again afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio
import functools
import time

from headrace.broker.log.storage_errors import storage_failed
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.broker.security.quotas import FETCH as FETCH_QUOTA
from headrace.protocol import ErrorCode, messages
from headrace.storage import FileRegion, OffsetOutOfRange, StorageError, WouldBlock, nowait_reads

from .leader_hints import LeaderHints

R = messages.FetchResponse

REGION_MIN = 64 * 1024  # smaller records are copied out in the read thread, not sent by file


def response_bytes(broker: Broker, request: messages.FetchRequest) -> int:
    """The most a response holds in memory: ``max_bytes``, at most ``fetch.max.bytes``."""
    return max(1, min(request.max_bytes, int(broker.config["fetch.max.bytes"])))


async def handle(broker: Broker, header, request: messages.FetchRequest):
    version = header.api_version
    by_id = version >= 13
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    replica = request.replica_id if version < 15 else request.replica_state.replica_id
    wanted = []  # (topic response, partition response, partition or None, fetch offset, max bytes)
    responses = []
    hints = LeaderHints(broker, header.session, R, 12, 16, version)
    authorizer, session = broker.authorizer, header.session
    replica_allowed = replica < 0 or authorizer.allows_cluster(session, Operation.CLUSTER_ACTION)
    for t in request.topics:
        topic = broker.topics.find(None if by_id else t.topic, t.topic_id)
        out = R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[])
        responses.append(out)
        name = topic.name if topic is not None else t.topic
        allowed = replica_allowed and (
            replica >= 0 or not name or authorizer.allows(session, Operation.READ, TOPIC, name)
        )
        for p in t.partitions:
            # records are empty, never null, even with an error (librdkafka refuses null)
            resp = R.PartitionData(partition_index=p.partition, records=b"")
            out.partitions.append(resp)
            if not allowed:
                resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                resp.high_watermark = -1
                continue
            partition = topic.partition(p.partition) if topic is not None else None
            if topic is None or partition is None:
                if topic is not None:
                    resp.error_code = not_served_error(
                        broker, topic, p.partition, p.current_leader_epoch
                    )
                    hints.add(resp, topic.name, p.partition)
                elif by_id:
                    resp.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                resp.high_watermark = -1
                continue
            ls = partition.leader_state
            if replica >= 0 and ls is not None and replica in ls.followers:
                error = ls.follower_fetched(replica, p.current_leader_epoch, p.fetch_offset)
            else:
                error = epoch_error(partition, p.current_leader_epoch)
            if error:
                resp.error_code, resp.high_watermark = error, -1
                continue
            wanted.append((resp, partition, p.fetch_offset, p.partition_max_bytes))
    read_committed = request.isolation_level == 1
    cap = response_bytes(broker, request) if wanted else 0
    budget = broker.fetch_budget
    while True:
        reservation = await budget.reserve(cap, deadline)
        regions: list = []  # the file regions in the response, pinned until it is sent
        read = None
        try:
            stable = [part.last_stable_offset for _, part, _, _ in wanted]
            marks = [part.high_watermark for _, part, _, _ in wanted]
            args = (wanted, reservation.size, stable, marks, replica >= 0, read_committed, regions)
            total = None
            if nowait_reads():
                try:
                    total = _read_all(*args, nowait=True)
                except WouldBlock:
                    _release(regions)  # and the read thread starts again
            if total is None:
                read = broker.read_pool.submit(_read_all, *args)
                total = await asyncio.wrap_future(read)
                broker.metrics.fetch_reads[1] += 1
            else:
                broker.metrics.fetch_reads[0] += 1
        except BaseException:
            if read is not None:  # once the read thread is done with them (maybe now)
                read.add_done_callback(functools.partial(_release_after, regions))
            else:
                _release(regions)
            reservation.release()
            raise
        reservation.grow(total - reservation.size)  # one batch over the limit at the most
        errors = any(resp.error_code for resp, *_ in wanted)
        remaining = deadline - loop.time()
        if total >= request.min_bytes or errors or remaining <= 0 or not wanted:
            break
        _release(regions)
        reservation.release()
        wakeup = loop.create_future()
        parts = [part for _, part, _, _ in wanted]
        for part in parts:
            part.await_data(wakeup)
        try:
            async with asyncio.timeout(remaining):
                await wakeup
        except TimeoutError:
            pass
        finally:
            for part in parts:
                part.stop_awaiting(wakeup)
    throttle_ms = 0
    if replica < 0 and FETCH_QUOTA in broker.quotas.active:
        throttle_ms, sent = broker.quotas.fetch_throttle_ms(
            session, header.client_id, total if wanted else 0, time.monotonic()
        )
        if not sent:  # Kafka's throttled fetch: no records, nothing held for it
            _release(regions)
            reservation.release()
            session.throttle(throttle_ms)
            return R(
                throttle_time_ms=throttle_ms,
                error_code=ErrorCode.NONE,
                session_id=0,
                responses=[],
                node_endpoints=[],
            )
    bytes_out = broker.metrics.bytes_out
    for resp, part, _, _ in wanted:
        if resp.records:
            name = part.topic.name
            bytes_out[name] = bytes_out.get(name, 0) + len(resp.records)
        if not read_committed:
            resp.aborted_transactions = None
        elif not resp.records:
            resp.aborted_transactions = []
    response = R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        session_id=0,
        responses=responses,
        node_endpoints=hints.endpoints(),
    )
    if throttle_ms:
        response.throttle_time_ms = throttle_ms
        session.throttle(throttle_ms)

    def on_sent() -> None:
        _release(regions)
        reservation.release()

    return response, on_sent


def _release_after(regions: list, _read) -> None:
    _release(regions)


def _release(regions: list) -> None:
    for region in regions:
        region.release()
    regions.clear()


def epoch_error(partition, current_leader_epoch: int) -> int:
    """A client's ``current_leader_epoch`` against the leader's: FENCED_LEADER_EPOCH when
    older, UNKNOWN_LEADER_EPOCH when newer, NONE when equal or not given (-1)."""
    current = partition.leader_epoch
    if current < 0 or current_leader_epoch < 0:
        return ErrorCode.NONE
    if current_leader_epoch < current:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > current:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def not_served_error(broker: Broker, topic, index: int, current_leader_epoch: int) -> int:
    """Why partition ``index`` of ``topic`` is not served here (``Topic.partition_error``),
    but UNKNOWN_LEADER_EPOCH when the asker knows a newer leader epoch than this broker has
    seen, as Kafka answers: the broker is behind an election (a follower often asks its new
    leader before that leader has heard it won), and the asker tries again at once, where
    NOT_LEADER_OR_FOLLOWER would send it away for a backoff."""
    code = topic.partition_error(index)
    cluster = broker.cluster
    if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and current_leader_epoch > cluster.leader_epoch(
        topic.name, index
    ):
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return code


def _read_all(
    wanted,
    max_bytes: int,
    stable: list[int],
    marks: list[int],
    replica: bool,
    read_committed: bool,
    regions: list,
    nowait: bool = False,
) -> int:
    """Fill in each partition's records and offsets (in a read thread, or with ``nowait`` on
    the event loop: then WouldBlock, leaving the regions it took in ``regions``, whenever
    anything would wait, a storage error included, which the read thread meets again and
    reports); the file regions among the records are added to ``regions``. A replica reads to
    the log end, others below the high watermark (``marks``)."""
    total = 0
    for (resp, part, offset, partition_max), lso, high_watermark in zip(wanted, stable, marks):
        log = part.log
        if part.gone or not part.leader:  # moved away, deleted, or no longer led here
            resp.error_code, resp.high_watermark, resp.records = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                -1,
                b"",
            )
            continue
        resp.error_code = ErrorCode.NONE
        resp.records = b""  # never null: librdkafka drops a response with a null record set
        resp.high_watermark = high_watermark
        resp.last_stable_offset = min(lso, high_watermark)
        resp.log_start_offset = log.log_start_offset
        limit = log.log_end_offset if replica else high_watermark
        budget = min(partition_max, max_bytes - total)
        if budget <= 0 and (total or max_bytes <= 0):
            continue  # no room (max_bytes 0: no share of the response budget, no records)
        try:
            data = log.read_region(
                offset,
                max(budget, 1),
                max_offset=resp.last_stable_offset if read_committed else limit,
                copy_below=REGION_MIN,
                nowait=nowait,
            )
        except OffsetOutOfRange:
            resp.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            continue
        except StorageError as e:
            if nowait:
                raise WouldBlock from e
            storage_failed(f"{part.topic.name}-{part.index}", "read", e)
            resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        size = len(data)
        region = data if isinstance(data, FileRegion) else None
        if total and size > budget:
            if region is not None:
                region.release()
            continue  # only the first partition with data may go over the limits
        if read_committed and size:
            try:
                aborted = log.aborted_txns(offset, resp.last_stable_offset, nowait)
            except (StorageError, WouldBlock) as e:
                if region is not None:
                    region.release()
                if nowait:
                    raise WouldBlock from e
                storage_failed(f"{part.topic.name}-{part.index}", "read", e)
                resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            resp.aborted_transactions = [
                R.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                for a in aborted
            ]
        if region is not None:
            regions.append(region)
        resp.records = data
        total += size
    return total
