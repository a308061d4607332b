"""DescribeShareGroupOffsets (key 90), versions 0-1: each share partition's start offset,
leader epoch and (v1) lag, read from the share coordinator (ReadShareGroupStateSummary,
through ``broker.share_state``).

A group asked with topics null is described for every partition it has state for (the
group coordinator's record, ``ShareGroup.state_partitions``, loaded from
``__consumer_offsets`` after a restart), leaving out the topics the
client may not DESCRIBE; an unknown group has none. Asked with topics, every partition named
is described: an unknown topic's with topic id zero and start offset -1, a topic the client
may not DESCRIBE with TOPIC_AUTHORIZATION_FAILED. As in Kafka, the group's kind and members
do not matter here.

The lag (KIP-1226) is Kafka's: the partition's high watermark less the start offset less the
delivery-complete count (records past the start offset acknowledged or archived), -1 when
either is unknown (a key never initialized, or initialized without a start offset). The high
watermark is this broker's replica's; a partition with no replica here is reported with lag
-1 (Kafka asks its leader with ListOffsets).

The share coordinator is asked for at most ``answer_all``'s slice of partitions at a time, and
not for a partition beyond its topic's count, so a request naming millions of partitions
costs no more than its answer.

DESCRIBE on the group is needed (else GROUP_AUTHORIZATION_FAILED); the group's coordinator
must be this broker. With ``share.version`` at 0 every group gets UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.DescribeShareGroupOffsetsResponse
TOPIC_AUTHORIZATION_FAILED = "Topic authorization failed."
ZERO_UUID = uuid.UUID(int=0)


async def described_partition(broker: Broker, group_id: str, topic, index: int):
    """The response partition of one share partition: its summary and lag."""
    s = await broker.share_state.read_summary(group_id, topic.topic_id, index)
    if s.error or s.start_offset == -1 or s.delivery_complete_count == -1:
        return R.DescribeShareGroupOffsetsResponsePartition(
            partition_index=index,
            start_offset=s.start_offset if not s.error else -1,
            leader_epoch=s.leader_epoch if not s.error else 0,
            lag=-1,
        )
    partition = topic.held.get(index)  # a follower's high watermark may trail a little
    lag = -1
    if partition is not None:
        lag = partition.high_watermark - s.start_offset - s.delivery_complete_count
    return R.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=s.start_offset, leader_epoch=s.leader_epoch, lag=lag
    )


def _described_topic(broker: Broker, group_id: str, topic, indexes):
    """The topic's answer, and a call per partition to fill in its place (one beyond the
    topic's count is answered without one, as the share coordinator would answer it)."""
    partitions = [
        R.DescribeShareGroupOffsetsResponsePartition(partition_index=i, start_offset=-1, lag=-1)
        for i in indexes
    ]
    calls = [
        (n, lambda i=i: described_partition(broker, group_id, topic, i))
        for n, i in enumerate(indexes)
        if 0 <= i < topic.count
    ]
    answer = R.DescribeShareGroupOffsetsResponseTopic(
        topic_name=topic.name, topic_id=topic.topic_id, partitions=partitions
    )
    return answer, calls


def _undescribed_topic(name: str, indexes, error: int = 0, message: str | None = None):
    return R.DescribeShareGroupOffsetsResponseTopic(
        topic_name=name,
        topic_id=ZERO_UUID,
        partitions=[
            R.DescribeShareGroupOffsetsResponsePartition(
                partition_index=i, start_offset=-1, lag=-1, error_code=error, error_message=message
            )
            for i in indexes
        ],
    )


async def _group(broker: Broker, session, asked):
    group_id = asked.group_id
    if broker.features.level(SHARE_VERSION) < 1:
        return R.DescribeShareGroupOffsetsResponseGroup(
            group_id=group_id, topics=[], error_code=ErrorCode.UNSUPPORTED_VERSION
        )
    refused = group_refusal(broker, session, Operation.DESCRIBE, group_id)
    if refused:
        return R.DescribeShareGroupOffsetsResponseGroup(
            group_id=group_id, topics=[], error_code=refused
        )
    authorizer = broker.authorizer

    def may_describe(name: str) -> bool:
        return authorizer.allows(session, Operation.DESCRIBE, TOPIC, name)

    described, undescribed = [], []
    if asked.topics is None:
        group = broker.groups.share.groups.get(group_id)
        recorded = {} if group is None else group.state_partitions
        for tid, indexes in sorted(recorded.items(), key=lambda kv: str(kv[0])):
            topic = broker.topics.find(None, tid)
            if topic is not None and may_describe(topic.name):
                described.append(_described_topic(broker, group_id, topic, sorted(indexes)))
    else:
        for t in asked.topics:
            topic = broker.topics.get(t.topic_name)
            if not may_describe(t.topic_name):
                undescribed.append(
                    _undescribed_topic(
                        t.topic_name,
                        t.partitions,
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        TOPIC_AUTHORIZATION_FAILED,
                    )
                )
            elif topic is None:
                undescribed.append(_undescribed_topic(t.topic_name, t.partitions))
            else:
                described.append(_described_topic(broker, group_id, topic, t.partitions))
    # a request naming a million partitions is answered a slice at a time
    answers = await answer_all([call for _, calls in described for _, call in calls])
    places = [(topic, n) for topic, calls in described for n, _ in calls]
    for (topic, n), partition in zip(places, answers, strict=True):
        topic.partitions[n] = partition
    topics = [topic for topic, _ in described]
    return R.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=topics + undescribed)


async def handle(broker: Broker, header, request: messages.DescribeShareGroupOffsetsRequest):
    groups = await asyncio.gather(*(_group(broker, header.session, g) for g in request.groups))
    return R(throttle_time_ms=0, groups=list(groups))
