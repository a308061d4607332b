"""AlterShareGroupOffsets (key 91), version 0: start a share group's partitions afresh at
the start offsets given (``kafka-share-groups --reset-offsets``).

How this works
--------------
The group must be a share group without members (NON_EMPTY_GROUP, "The group is not
empty."; another kind's id GROUP_ID_NOT_FOUND); an unknown id is made an empty share group,
as Kafka makes it. Each partition's state is initialized at the share coordinator
(InitializeShareGroupState through ``broker.share_state``) with the new start offset, no
records in flight, and a state epoch above the one stored (its ReadShareGroupStateSummary's
plus one, at least the group epoch): a leader still holding the old state in memory is then
fenced at its next write (FENCED_STATE_EPOCH) and reads the new state afresh. This broker
also drops the group's share partitions it holds at once (``broker.shares.forget``); a leader
elsewhere that writes nothing serves its old state until its next write, as in Kafka, which
relies on the same fencing. The partitions are recorded as the group's
(``ShareGroup.state_partitions``, written to the group's records in ``__consumer_offsets``
before the answer), for DescribeShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups.

READ on the group is needed (else a top-level GROUP_AUTHORIZATION_FAILED) and READ on each
topic (else TOPIC_AUTHORIZATION_FAILED for its partitions); an unknown topic or a partition
beyond its count is UNKNOWN_TOPIC_OR_PARTITION. With ``share.version`` at 0 the answer is
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.AlterShareGroupOffsetsResponse
E = ErrorCode
ZERO_UUID = uuid.UUID(int=0)
# Kafka's default messages of the errors answered
MESSAGES: dict[int, str] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    E.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    E.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    E.UNSUPPORTED_VERSION: "The version of API is not supported.",
    E.NOT_COORDINATOR: "This is not the correct coordinator.",
    E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
}


def _refused(error: int, message: str | None = None):
    return R(throttle_time_ms=0, error_code=error, error_message=message or MESSAGES.get(error))


async def _alter(broker: Broker, group, topic_id, index: int, start_offset: int) -> int:
    """Initialize one share partition at ``start_offset`` with a newer state epoch."""
    group_id = group.group_id
    summary = await broker.share_state.read_summary(group_id, topic_id, index)
    if summary.error:
        return summary.error
    state_epoch = max(summary.state_epoch + 1, group.epoch)
    error = await broker.share_state.initialize(
        group_id, topic_id, index, state_epoch, start_offset
    )
    broker.shares.forget(group_id, topic_id, index)  # read afresh at the next fetch here
    if not error:
        group.record_state([(topic_id, index)])
        error = await broker.groups.share.persisted(group_id, None)
    return error


async def handle(broker: Broker, header, request: messages.AlterShareGroupOffsetsRequest):
    group_id = request.group_id
    if broker.features.level(SHARE_VERSION) < 1:
        return _refused(E.UNSUPPORTED_VERSION)
    session = header.session
    refused = group_refusal(broker, session, Operation.READ, group_id)
    if refused:
        return _refused(refused)
    if not group_id:
        return _refused(E.INVALID_GROUP_ID)
    error, message, group = broker.groups.share.empty_group(group_id, create=True)
    if group is None:
        return _refused(error, message)
    answers = []  # (topic name, topic id, [[partition, error code]])
    calls, slots = [], []
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        partitions: list[list[int]] = []
        if not broker.authorizer.allows(session, Operation.READ, TOPIC, t.topic_name):
            partitions = [[p.partition_index, E.TOPIC_AUTHORIZATION_FAILED] for p in t.partitions]
        elif topic is None:
            partitions = [[p.partition_index, E.UNKNOWN_TOPIC_OR_PARTITION] for p in t.partitions]
        else:
            for p in t.partitions:
                if not 0 <= p.partition_index < topic.count:
                    partitions.append([p.partition_index, E.UNKNOWN_TOPIC_OR_PARTITION])
                    continue
                partitions.append([p.partition_index, E.NONE])
                slots.append(partitions[-1])
                calls.append(
                    lambda t=topic.topic_id, p=p: _alter(
                        broker, group, t, p.partition_index, p.start_offset
                    )
                )
        answers.append((t.topic_name, ZERO_UUID if topic is None else topic.topic_id, partitions))
    for slot, code in zip(slots, await answer_all(calls), strict=True):
        slot[1] = code
    return R(
        throttle_time_ms=0,
        error_code=E.NONE,
        responses=[
            R.AlterShareGroupOffsetsResponseTopic(
                topic_name=name,
                topic_id=tid,
                partitions=[
                    R.AlterShareGroupOffsetsResponsePartition(
                        partition_index=index,
                        error_code=code,
                        error_message=MESSAGES.get(code, _name(code)) if code else None,
                    )
                    for index, code in partitions
                ],
            )
            for name, tid, partitions in answers
        ],
    )


def _name(code: int) -> str:
    return ErrorCode(code).name
