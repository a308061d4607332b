"""Produce (key 0), versions 3-13 (listed from 0; v0-2 are refused): the write path.

Each partition's payload is validated and appended on the spot (``log_validator.validate``:
the records inside each batch, as Kafka's LogValidator checks them; ``Partition.append``: batch
framing, size, CRC-32C, idempotent-producer sequence, offsets written in place) and the
handler returns at once, unless a partition's copy into the page cache went to the append
stage (``Partition.produce``: large payloads; pipeline/append.py): then the response waits
for those writes. When a partition's unflushed messages reach ``flush.messages`` the response
waits for the flush stage, whose group commit covers every append made before it; otherwise
the response is complete as soon as the data is in the page cache. acks=0 gets no response.

Replication (cluster mode, leader_state.py): with acks=all a partition whose ISR is smaller
than ``min.insync.replicas`` answers NOT_ENOUGH_REPLICAS before appending; otherwise the
response waits until the high watermark has passed the batch (every ISR member has it), at
most the request's ``timeout_ms`` (then REQUEST_TIMED_OUT), with
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile and
NOT_LEADER_OR_FOLLOWER if this broker stopped leading. acks=1 answers after the local append
as before. When this broker coordinates the transactional id, transactional batches are
accepted only for partitions of the producer's open transaction (the coordinator's
``verify``; INVALID_PRODUCER_EPOCH for a fenced producer); otherwise the partition's producer
state is what checks (an older epoch is fenced), as in Kafka before KIP-890. From v12
(transactions v2, KIP-890) a transactional batch for a partition where its producer has no
open transaction first adds the partition to the transaction at the coordinator
(``AddPartitionsToTxnManager.join``); the connection's later requests wait for that, so its
batches are still appended in order.

Authorization (Kafka's): WRITE on the transactional id when there is one (else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (else its
partitions get TOPIC_AUTHORIZATION_FAILED).

Schema ids (topics with ``confluent.value.schema.validation``, log_validator.py): a partition
refused for a schema id this broker's view of the registry lacks, where that view follows
another broker's, is looked at again once the view has taken a record more
(``_look_again``): a schema registered a moment ago at the leader of ``_schemas`` passes.

Quotas: the request's record bytes count against the client's ``producer_byte_rate``
(quotas.py); over it, the response carries the throttle time and the connection is muted
for that long.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from .context import Broker

import asyncio
import inspect
import time
from collections.abc import Callable
from functools import partial

from headrace.broker.log.log_validator import validate
from headrace.broker.log.storage_errors import storage_failed
from headrace.broker.security.authorizer import TOPIC, TRANSACTIONAL_ID, Operation
from headrace.broker.security.quotas import PRODUCE as PRODUCE_QUOTA
from headrace.protocol import ErrorCode, messages
from headrace.protocol.records import ATTR_TRANSACTIONAL, CorruptRecordError, iter_batches
from headrace.storage import StorageError

from .leader_hints import LeaderHints

R = messages.ProduceResponse


def handle(broker: Broker, header, request: messages.ProduceRequest):
    version = header.api_version
    if request.acks not in (0, 1, -1):
        return _all_failed(request, version, ErrorCode.INVALID_REQUIRED_ACKS)
    authorizer, session = broker.authorizer, header.session
    if request.transactional_id is not None and not authorizer.allows(
        session, Operation.WRITE, TRANSACTIONAL_ID, request.transactional_id
    ):
        return _all_failed(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    joining = _joining(broker, session, request, version)
    if joining is not None:  # transactions v2: the partitions join the transaction first
        appended = asyncio.get_running_loop().create_future()
        session.hold(appended)  # the connection's next batches wait until these are appended
        return _join_then_produce(broker, header, request, appended, *joining)
    return _produce(broker, header, request)


def _joining(broker: Broker, session, request: messages.ProduceRequest, version: int):
    """(producer id, epoch, partitions) for a transactional Produce v12+ with batches for
    partitions led here where the producer has no open transaction yet: they join its
    transaction before anything is appended (KIP-890), as Kafka's leaders add them. None when
    there is nothing to join."""
    if version < 12 or request.transactional_id is None:
        return None
    keys, producer = set(), None
    for t in request.topic_data:
        topic = broker.topics.find(None if version >= 13 else t.name, t.topic_id)
        if topic is None or not broker.authorizer.allows(
            session, Operation.WRITE, TOPIC, topic.name
        ):
            continue
        for p in t.partition_data:
            partition = topic.partition(p.index)
            batches = _batches(cast("memoryview | None", p.records))
            if partition is None or not batches:
                continue
            head = batches[0][2]
            if head.attributes & ATTR_TRANSACTIONAL and head.producer_id not in (
                partition.producers.ongoing
            ):
                keys.add((topic.name, p.index))
                producer = (head.producer_id, head.producer_epoch)
                partition.producers.guard(head.producer_id, head.producer_epoch, head.base_sequence)
    return None if producer is None else (*producer, keys)


async def _join_then_produce(broker: Broker, header, request, appended, producer_id, epoch, keys):
    try:
        error = await broker.transactions.add_partitions_manager.join(
            request.transactional_id, producer_id, epoch, keys
        )
        outcome = _produce(broker, header, request, dict.fromkeys(keys, error) if error else None)
    finally:
        appended.set_result(None)  # (the acks and flushes are awaited without holding)
    return await outcome if inspect.isawaitable(outcome) else outcome


def _produce(
    broker: Broker,
    header,
    request: messages.ProduceRequest,
    refused: dict | None = None,
    again: bool = False,
):
    """Validate and append every partition's batches (``refused``: partitions answered with
    an error instead, (topic, partition) -> code). ``again``: a second look at partitions
    whose schema ids this broker's view of the registry did not have (``_look_again``)."""
    version = header.api_version
    authorizer, session = broker.authorizer, header.session
    topics = broker.topics
    bytes_in = broker.metrics.bytes_in
    responses = []
    to_flush = []
    now_ms = int(time.time() * 1000)
    acks_all = request.acks == -1
    waits: list[tuple[object, object, asyncio.Future]] = []  # (answer, leader state, future)
    writes: list[tuple[str, object, asyncio.Future]] = []  # (topic, answer, append stage's write)
    hints = LeaderHints(broker, session, R, 10, 10, version)
    schemas = broker.schema_registry  # (read only by topics that validate schema ids)
    later: list[tuple[object, object]] = []  # (topic data, partition data) to look at again
    code: int
    for t in request.topic_data:
        topic = topics.find(None if version >= 13 else t.name, t.topic_id)
        name = topic.name if topic is not None else t.name  # (unknown names too, as Kafka)
        if name and not authorizer.allows(session, Operation.WRITE, TOPIC, name):
            responses.append(_topic_failed(t, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        unknown = (
            ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        partitions = []
        for p in t.partition_data:
            partition = topic.partition(p.index) if topic is not None else None
            if topic is None or partition is None:
                code = unknown if topic is None else topic.partition_error(p.index)
                answer = R.PartitionProduceResponse(index=p.index, error_code=code)
                if topic is not None:
                    hints.add(answer, topic.name, p.index)
                partitions.append(answer)
                continue
            if refused and (topic.name, p.index) in refused:
                code = refused[(topic.name, p.index)]
                partitions.append(R.PartitionProduceResponse(index=p.index, error_code=code))
                continue
            verify: Callable[[int, int], int] | None = None
            if request.transactional_id is not None:
                if broker.transactions.owns(request.transactional_id):
                    verify = partial(
                        broker.transactions.verify, request.transactional_id, topic.name, p.index
                    )
                else:
                    verify = _epoch_checked_by_the_partition
            config = topic.produce_config
            append_time = int(time.time() * 1000) if config.log_append_time else -1
            rejection = None
            written = None
            ls = partition.leader_state
            records = cast("memoryview | None", p.records)  # decoded: a slice of the frame
            batches = _batches(records)
            if records is None or batches is None:
                code, base = ErrorCode.CORRUPT_MESSAGE, -1
            elif acks_all and ls is not None and len(ls.isr) < ls.min_isr:
                code, base = ErrorCode.NOT_ENOUGH_REPLICAS, -1
            elif (rejection := validate(records, batches, topic, now_ms, schemas)) is not None:
                code, base = rejection.error_code, -1
                if rejection.schema_id_refused and not again and schemas and schemas.may_lag():
                    later.append((t, p))
            else:
                code, base, count, written = partition.produce(
                    records,
                    batches,
                    config.max_message_bytes,
                    verify,
                    append_time,
                    broker.appender,
                    config.flush_messages == 1,
                )
                if count and partition.flush_due:
                    to_flush.append(partition)
                if code == ErrorCode.NONE:
                    bytes_in[topic.name] = bytes_in.get(topic.name, 0) + len(records)
            answer = R.PartitionProduceResponse(
                index=p.index,
                error_code=code,
                base_offset=base,
                log_append_time_ms=append_time if code == ErrorCode.NONE else -1,
                log_start_offset=partition.log.log_start_offset,
            )
            if rejection is not None:
                answer.error_message = rejection.message
                if rejection.record_index >= 0:
                    answer.record_errors = [
                        R.BatchIndexAndErrorMessage(
                            batch_index=rejection.record_index,
                            batch_index_error_message=rejection.message,
                        )
                    ]
            partitions.append(answer)
            if written is not None:
                writes.append((t.name, answer, written))
            if (
                acks_all
                and ls is not None
                and batches is not None
                and code == ErrorCode.NONE
                and not ls.solo
            ):
                # (a retry's batches too: it gets their first offset, and waits for them all)
                end = base + sum(h.records_count for _, _, h in batches)
                waits.append((answer, ls, ls.wait(end)))
        responses.append(
            R.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=partitions)
        )
    response = R(responses=responses, throttle_time_ms=0, node_endpoints=hints.endpoints())
    if later:
        return _look_again(broker, header, request, later, response, writes, to_flush, waits)
    return _continue(broker, header, request, response, writes, to_flush, waits, not again)


# how long a produce refused for a schema id waits for this broker's view of the registry to
# take one more record from the leader of _schemas before it is looked at again
LOOK_AGAIN_S = 1.0


def _look_again(broker: Broker, header, request, later, response, writes, to_flush, waits):
    """Partitions refused for a schema id this broker's view of the registry does not allow,
    where that view follows another broker's (a schema registered there a moment ago may not
    be here yet): the rest of the request goes on as usual, these are validated again once
    the view has taken a record more (at most ``LOOK_AGAIN_S``), and appended if they pass.
    The connection's later requests wait for that, so its batches keep their order."""
    first = _continue(broker, header, request, response, writes, to_flush, waits)
    if inspect.isawaitable(first):  # (the rest of the request goes on meanwhile)
        first = asyncio.ensure_future(first)
    held = asyncio.get_running_loop().create_future()
    header.session.hold(held)
    P = messages.ProduceRequest
    retry = P(
        transactional_id=request.transactional_id,
        acks=request.acks,
        timeout_ms=request.timeout_ms,
        topic_data=[
            P.TopicProduceData(name=t.name, topic_id=t.topic_id, partition_data=[p])
            for t, p in later
        ],
    )
    return _merged(broker, header, retry, first, response, held)


async def _merged(broker: Broker, header, retry, first, response, held):
    try:
        assert broker.schema_registry is not None
        await broker.schema_registry.fresher(LOOK_AGAIN_S)
        second = _produce(broker, header, retry, again=True)
    finally:
        held.set_result(None)
        if inspect.isawaitable(first):
            await first
    if inspect.isawaitable(second):
        second = await second
    if second is not None:  # (acks=0: no answers)
        answers = {
            (t.name, t.topic_id, a.index): a
            for t in second.responses
            for a in t.partition_responses
        }
        for t in response.responses:
            t.partition_responses = [
                answers.get((t.name, t.topic_id, a.index), a) for a in t.partition_responses
            ]
    return None if retry.acks == 0 else response


def _continue(broker: Broker, header, request, response, writes, to_flush, waits, quota=True):
    """The quota (unless a second look: the request was counted), then the append stage's
    writes, the flush and the ISR."""
    if quota and PRODUCE_QUOTA in broker.quotas.active:
        size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
        response.throttle_time_ms = broker.quotas.throttle_ms(
            header.session, header.client_id, PRODUCE_QUOTA, size, time.monotonic()
        )
        header.session.throttle(response.throttle_time_ms)
    if writes:
        return _after_writes(writes, broker, to_flush, waits, response, request)
    return _finish(broker, to_flush, waits, response, request)


def _finish(broker: Broker, to_flush, waits, response, request: messages.ProduceRequest):
    """The response once the batches are in the page cache: at once, or after the flush
    stage and the ISR."""
    if waits:
        flushed = broker.topics.flush(to_flush) if to_flush else None
        return _after_replication(flushed, waits, response, request.timeout_ms / 1000)
    if to_flush:
        return _after_flush(broker.topics.flush(to_flush), response, request.acks)
    return None if request.acks == 0 else response


async def _after_writes(writes, broker, to_flush, waits, response, request):
    """Wait for the append stage's writes (a failed one answers KAFKA_STORAGE_ERROR), then
    ``_finish``. acks=0 waits too: the request counts against the request limits until then."""
    await asyncio.wait([w for _, _, w in writes])
    for name, answer, write in writes:
        error = write.exception()
        if error is not None and answer.error_code == ErrorCode.NONE:
            storage_failed(f"{name}-{answer.index}", "append", error)
            answer.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            answer.base_offset = -1
    result = _finish(broker, to_flush, waits, response, request)
    return await result if asyncio.iscoroutine(result) else result


async def _after_replication(flushed, waits, response, timeout_s: float):
    """acks=all: wait (at most ``timeout_s``) for the ISR to have each batch (and for the
    local flush, when one was due)."""
    if flushed is not None:
        await _after_flush(flushed, response, -1)
    futures = [f for _, _, f in waits]
    _, pending = await asyncio.wait(futures, timeout=max(timeout_s, 0))
    for answer, ls, future in waits:
        if future in pending:
            future.cancel()
            ls.forget(future)
            code = ErrorCode.REQUEST_TIMED_OUT
        else:
            code = future.result()
        if code and answer.error_code == ErrorCode.NONE:
            answer.error_code = code
            answer.base_offset = -1
    return response


def _batches(records) -> list | None:
    """The payload's batches (``iter_batches``), parsed once for the validation and the
    append; None when there is no payload or its framing is broken (CORRUPT_MESSAGE)."""
    if records is None:
        return None
    try:
        return list(iter_batches(records))
    except CorruptRecordError:
        return None


def _epoch_checked_by_the_partition(producer_id: int, epoch: int) -> int:
    return ErrorCode.NONE


async def _after_flush(flushed: asyncio.Future, response, acks: int):
    try:
        await flushed
    except StorageError as e:
        for t in response.responses:
            for p in t.partition_responses:
                if p.error_code == ErrorCode.NONE:
                    storage_failed(f"{t.name}-{p.index}", "flush", e)
                    p.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    p.base_offset = -1
    return None if acks == 0 else response


def _all_failed(request: messages.ProduceRequest, version, code):
    return R(responses=[_topic_failed(t, code) for t in request.topic_data])


def _topic_failed(t, code: int):
    """Every partition of topic ``t`` of the request answered with ``code``."""
    return R.TopicProduceResponse(
        name=t.name,
        topic_id=t.topic_id,
        partition_responses=[
            R.PartitionProduceResponse(index=p.index, error_code=code) for p in t.partition_data
        ],
    )
