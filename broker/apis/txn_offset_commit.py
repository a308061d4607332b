"""TxnOffsetCommit (key 28), versions 0-5: offsets committed inside a transaction.

When this broker is also the transaction coordinator of the transactional id, the producer
must have added the group to its open transaction (AddOffsetsToTxn) with its current epoch,
else INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING or PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v3); elsewhere the partition's producer state fences an old epoch, as in Kafka before
KIP-890. From v5 (transactions v2, KIP-890) there is no AddOffsetsToTxn: the group's partition
of ``__consumer_offsets`` joins the transaction here first (``AddPartitionsToTxnManager.join``).
From v3 a member id and generation are checked against the group like OffsetCommit's
(STALE_MEMBER_EPOCH is ILLEGAL_GENERATION here, as Kafka answers before v6), a streams group
member's older epoch partition by partition (one refused fails the whole commit). The
offsets are written to the group's partition of ``__consumer_offsets`` as one transactional
batch of the producer and held by the group coordinator until the transaction's marker
reaches that partition: a commit makes them the group's committed offsets, an abort drops
them (see ``GroupCoordinator.complete_txn``). The answer waits for the batch to be flushed
and, in a cluster, for the partition's ISR to have it (as offset commits do,
``offset_store``).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.background import wall_clock_ms
from headrace.broker.coordinator.group import group_offsets
from headrace.broker.coordinator.group.group_coordinator import (
    OFFSET_METADATA_MAX_BYTES,
    CommittedOffset,
)
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.broker.security.authorizer import GROUP, TOPIC, TRANSACTIONAL_ID, Operation
from headrace.protocol import ErrorCode, messages
from headrace.protocol.records import Record, build_batch

R = messages.TxnOffsetCommitResponse


def _respond(request: messages.TxnOffsetCommitRequest, codes):
    return R(
        throttle_time_ms=0,
        topics=[
            R.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    R.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=codes(t.name, p.partition_index),
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle(broker: Broker, header, request: messages.TxnOffsetCommitRequest):
    version = header.api_version
    group_id = request.group_id
    if not group_id:
        return _respond(request, lambda t, p: ErrorCode.INVALID_GROUP_ID)
    authorizer, session = broker.authorizer, header.session
    if not authorizer.allows(session, Operation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _respond(request, lambda t, p: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorizer.allows(session, Operation.READ, GROUP, group_id):
        return _respond(request, lambda t, p: ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = broker.groups.not_served(group_id)
    if refused:
        return _respond(request, lambda t, p: refused)
    if version >= 5:
        return _join_then_commit(broker, header, request)
    return _commit(broker, header, request)


async def _join_then_commit(broker: Broker, header, request: messages.TxnOffsetCommitRequest):
    """Transactions v2: the group's offsets partition joins the transaction first."""
    partition = await broker.groups.offsets_partition(request.group_id)
    error = await broker.transactions.add_partitions_manager.join(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        {(OFFSETS_TOPIC, partition.index)},
    )
    if error:
        if error == ErrorCode.NOT_ENOUGH_REPLICAS:  # the coordinator unreachable: retried
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif error == ErrorCode.INVALID_PRODUCER_EPOCH:
            error = ErrorCode.PRODUCER_FENCED
        return _respond(request, lambda t, p: error)
    outcome = _commit(broker, header, request)
    return await outcome if inspect.isawaitable(outcome) else outcome


def _commit(broker: Broker, header, request: messages.TxnOffsetCommitRequest):
    version = header.api_version
    group_id = request.group_id
    authorizer, session = broker.authorizer, header.session
    error = _check_transaction(broker, request, group_id)
    if not error and broker.groups.group_type(group_id) == "share":
        error = ErrorCode.GROUP_ID_NOT_FOUND  # "Group G is not a consumer group."
    if not error and not broker.groups.room_for(group_id):
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # group.max.groups: no new group
    if error == ErrorCode.PRODUCER_FENCED and version < 3:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    stale = None  # a streams member's older epoch: (topic, partition) -> refused?
    if (
        not error
        and version >= 3
        and request.member_id
        and request.generation_id_or_member_epoch >= 0
    ):
        error, group = broker.groups.check_commit(
            group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            request.group_instance_id,
        )
        if not error:
            stale = broker.groups.partition_check(
                group, request.member_id, request.generation_id_or_member_epoch
            )
    if error == ErrorCode.STALE_MEMBER_EPOCH:  # Kafka's answer before v6
        error = ErrorCode.ILLEGAL_GENERATION
    if error:
        return _respond(request, lambda t, p: error)
    now = wall_clock_ms()
    codes = {}
    offsets = {}
    for t in request.topics:
        for p in t.partitions:
            topic = broker.topics.get(t.name)
            if not authorizer.allows(session, Operation.READ, TOPIC, t.name):
                codes[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < topic.count:
                codes[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif (
                p.committed_metadata is not None
                and len(p.committed_metadata.encode()) > OFFSET_METADATA_MAX_BYTES
            ):
                codes[(t.name, p.partition_index)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif stale is not None and stale(t.name, p.partition_index):
                # Kafka's check throws: the whole commit fails (ILLEGAL_GENERATION before v6)
                return _respond(request, lambda t, p: ErrorCode.ILLEGAL_GENERATION)
            else:
                codes[(t.name, p.partition_index)] = ErrorCode.NONE
                offsets[(t.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset,
                    p.committed_leader_epoch if version >= 2 else -1,
                    p.committed_metadata or "",
                    now,
                )
    if not offsets:
        return _respond(request, lambda t, p: codes[(t, p)])
    return _write(broker, request, group_id, offsets, codes, now, version)


def _check_transaction(broker: Broker, request: messages.TxnOffsetCommitRequest, group_id) -> int:
    """The transaction coordinator's check, when it is this broker."""
    txns = broker.transactions
    if not txns.owns(request.transactional_id):
        return ErrorCode.NONE
    return txns.check_offset_commit(
        request.transactional_id, request.producer_id, request.producer_epoch, group_id
    )


async def _write(broker: Broker, request, group_id, offsets, codes, now, version):
    partition = await broker.groups.offsets_partition(group_id)
    records = [
        Record(
            key=group_offsets.offset_key(group_id, t, p),
            value=group_offsets.offset_value(c),
            timestamp=now,
        )
        for (t, p), c in offsets.items()
    ]
    batch = bytearray(
        build_batch(
            records,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            base_sequence=-1,
            is_transactional=True,
        )
    )
    # checked again: the transaction may have changed while the offsets topic was created
    error = _check_transaction(broker, request, group_id)
    if not error:
        error = partition.append_transactional(batch, request.producer_id, request.producer_epoch)
    if error in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):  # per version
        error = ErrorCode.PRODUCER_FENCED if version >= 3 else ErrorCode.INVALID_PRODUCER_EPOCH
    if not error:
        broker.groups.add_txn_offsets(request.producer_id, group_id, offsets)
        error = await broker.groups.offsets_written(partition)
    if error:
        for key in offsets:
            codes[key] = error
    return _respond(request, lambda t, p: codes[(t, p)])
