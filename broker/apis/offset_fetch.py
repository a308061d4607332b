"""OffsetFetch (key 9), versions 1-10: read a group's committed offsets.

v1-7 ask for one group; v8+ for several at once. Topics may be null (v2+): every committed
offset of the group. A partition without a committed offset gets offset -1 and no error, as
in Kafka. v10 names topics by id. Offsets are written before they are acknowledged. With
``require_stable`` (v7+, read_committed consumers) a partition that has offsets committed in a
transaction not ended yet (TxnOffsetCommit, held until the marker) gets
UNSTABLE_OFFSET_COMMIT and offset -1, as in Kafka: the consumer asks again rather than start
from an offset the transaction may be about to replace. A share group's id gets
GROUP_ID_NOT_FOUND (share groups commit no offsets), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import uuid

from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.OffsetFetchResponse
NO_ID = uuid.UUID(int=0)


def handle(broker: Broker, header, request: messages.OffsetFetchRequest):
    version = header.api_version
    session = header.session
    if version < 8:
        group_id = request.group_id
        stable = version >= 7 and request.require_stable
        error, answers = _group(broker, session, group_id, request.topics, False, stable)
        return R(
            throttle_time_ms=0,
            error_code=error,
            topics=[
                R.OffsetFetchResponseTopic(
                    name=name, partitions=_partitions(R.OffsetFetchResponsePartition, parts)
                )
                for name, _, parts in answers
            ],
        )
    by_id = version >= 10
    groups = []
    for g in request.groups:
        error, answers = _group(
            broker, session, g.group_id, g.topics, by_id, request.require_stable
        )
        groups.append(
            R.OffsetFetchResponseGroup(
                group_id=g.group_id,
                error_code=error,
                topics=[
                    R.OffsetFetchResponseTopics(
                        name=name,
                        topic_id=topic_id,
                        partitions=_partitions(R.OffsetFetchResponsePartitions, parts),
                    )
                    for name, topic_id, parts in answers
                ],
            )
        )
    return R(throttle_time_ms=0, groups=groups)


def _partitions(cls, parts):
    """One group's answers for a topic as response partitions (``cls``: the version's)."""
    return [
        cls(
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=e,
            metadata=m,
            error_code=code,
        )
        for p, o, e, m, code in parts
    ]


def _group(broker: Broker, session, group_id, topics, by_id, stable: bool):
    """(group error, [(topic name, topic id, [(partition, offset, epoch, metadata, error)])]).
    Authorization (Kafka's): DESCRIBE on the group, and on each topic (all topics: those not
    allowed are left out; named ones get TOPIC_AUTHORIZATION_FAILED)."""
    authorizer = broker.authorizer
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, []
    refused = group_refusal(broker, session, Operation.DESCRIBE, group_id)
    if refused:
        return refused, []
    if broker.groups.group_type(group_id) == "share":  # no committed offsets, as in Kafka
        return ErrorCode.GROUP_ID_NOT_FOUND, []
    offsets = broker.groups.fetch_offsets(group_id)
    pending = broker.groups.pending_offsets(group_id) if stable else set()
    answers = []
    if topics is None:
        by_topic: dict[str, list] = {}
        for (t, p), committed in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                (p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
                if (t, p) in pending
                else (
                    p,
                    committed.offset,
                    committed.leader_epoch,
                    committed.metadata,
                    ErrorCode.NONE,
                )
            )
        name: str | None
        for name, parts in by_topic.items():
            topic = broker.topics.get(name)
            if by_id and topic is None:
                continue
            if not authorizer.allows(session, Operation.DESCRIBE, TOPIC, name):
                continue
            answers.append((name, topic.topic_id if topic else NO_ID, parts))
        return ErrorCode.NONE, answers
    for t in topics:
        if by_id:
            topic = broker.topics.by_id.get(t.topic_id)
            name = topic.name if topic else None
        else:
            name = t.name
        parts = []
        allowed = name is None or authorizer.allows(session, Operation.DESCRIBE, TOPIC, name)
        for p in t.partition_indexes:
            c = offsets.get((name, p)) if name is not None else None
            if not allowed:
                parts.append((p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif (name, p) in pending:
                parts.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif c is None:
                parts.append((p, -1, -1, "", ErrorCode.NONE))
            else:
                parts.append((p, c.offset, c.leader_epoch, c.metadata, ErrorCode.NONE))
        answers.append((t.name if not by_id else "", t.topic_id if by_id else NO_ID, parts))
    return ErrorCode.NONE, answers
