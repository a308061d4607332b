"""OffsetCommit (key 8), versions 2-10: store a group's consumed positions.

A member of an active group commits with its member id and generation (checked as
``group_state.MEMBER_COMMIT`` says: REBALANCE_IN_PROGRESS while the group completes a
rebalance); a commit with generation -1 and no member id stores offsets for a group without
members (``assign()`` consumers, admin tools). Partitions that do not exist get
UNKNOWN_TOPIC_OR_PARTITION (v10 names topics by id: UNKNOWN_TOPIC_ID), metadata over 4096
bytes OFFSET_METADATA_TOO_LARGE. A streams group member committing with an epoch older than
its own may commit only partitions of tasks it was given at that epoch or before (and still
holds or is giving back); one other partition fails the whole commit with
STALE_MEMBER_EPOCH (every partition that reached the group's checks, nothing written), as
Kafka's CommitPartitionValidator throws. A streams member must commit with v9 or later
(UNSUPPORTED_VERSION). The accepted ones are written to ``__consumer_offsets`` as
one batch and acknowledged after it is flushed. The checks happen in arrival order, before
the write is awaited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.background import wall_clock_ms
from headrace.broker.coordinator.group.group_coordinator import (
    OFFSET_METADATA_MAX_BYTES,
    CommittedOffset,
)
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.OffsetCommitResponse


def handle(broker: Broker, header, request: messages.OffsetCommitRequest):
    version = header.api_version
    by_id = version >= 10
    error, group = broker.groups.check_commit(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        request.group_instance_id if version >= 7 else None,
        version,
    )
    authorizer, session = broker.authorizer, header.session
    refused = group_refusal(broker, session, Operation.READ, request.group_id)
    if refused:
        error, group = refused, None
    now = wall_clock_ms()
    # a streams group member committing with an older epoch: each partition's task must have
    # been given to it at that epoch or before (Kafka's check)
    stale = None
    if group is not None and not error:
        stale = broker.groups.partition_check(
            group, request.member_id, request.generation_id_or_member_epoch, version
        )
    topics = []
    entries = []  # (response partition, topic, partition, committed offset)
    checked = []  # the response partitions that reached the group's checks
    refused_all = False
    for t in request.topics:
        topic = broker.topics.find(None if by_id else t.name, t.topic_id)
        out = R.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[])
        topics.append(out)
        name = topic.name if topic is not None else t.name
        allowed = not name or authorizer.allows(session, Operation.READ, TOPIC, name)
        for p in t.partitions:
            resp = R.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error
            )
            out.partitions.append(resp)
            if error:
                continue
            if not allowed:
                resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None:
                resp.error_code = (
                    ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif not 0 <= p.partition_index < topic.count:
                resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif (
                p.committed_metadata is not None
                and len(p.committed_metadata.encode()) > OFFSET_METADATA_MAX_BYTES
            ):
                resp.error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                checked.append(resp)
            else:
                if stale is not None and stale(topic.name, p.partition_index):
                    refused_all = True
                c = CommittedOffset(
                    p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", now
                )
                entries.append((resp, topic.name, p.partition_index, c))
                checked.append(resp)
    if refused_all:  # Kafka's check throws: the whole commit fails, nothing is written
        for resp in checked:
            resp.error_code = ErrorCode.STALE_MEMBER_EPOCH
        entries = []
    response = R(throttle_time_ms=0, topics=topics)
    if not entries:
        return response
    return _write(broker, group, entries, response)


async def _write(broker: Broker, group, entries, response):
    error = await broker.groups.write_offsets(group, [(t, p, c) for _, t, p, c in entries])
    if error:
        for resp, *_ in entries:
            resp.error_code = error
    return response
