"""DescribeTopicPartitions (key 75), version 0: topics and their partitions a page at a time
(KIP-966), as the 4.x admin client's ``describeTopics`` asks for them.

The topics named (or, when none is, every topic the principal may DESCRIBE), from the
cursor's topic and partition on, in name order, with at most ``response_partition_limit``
partitions (at most ``max.request.partition.size.limit``); where the page ends inside the
list, ``next_cursor`` names the topic and partition to go on from. Partitions are answered as
Metadata answers them (a leader that is down is -1), with no eligible leader replicas (ELR is
a KRaft feature: empty lists). A named topic the principal may not describe gets
TOPIC_AUTHORIZATION_FAILED, a missing one UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
for a name no topic can have). A cursor on a topic not named, or on a negative partition,
fails every named topic with INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_offsets import INTERNAL_TOPICS
from headrace.broker.log.topic import topic_name_error
from headrace.broker.security.authorizer import OMITTED_OPERATIONS, TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .metadata import partition_states

R = messages.DescribeTopicPartitionsResponse


def handle(broker: Broker, header, request: messages.DescribeTopicPartitionsRequest):
    authorizer, session = broker.authorizer, header.session
    cursor = request.cursor
    start = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    names = (
        sorted(t.name for t in broker.topics.all_topics())
        if every
        else sorted({t.name for t in request.topics})
    )
    names = [n for n in names if n >= start]
    if cursor is not None and (cursor.partition_index < 0 or not every and start not in names):
        return R(
            throttle_time_ms=0,
            topics=[
                R.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.INVALID_REQUEST, name=t.name, partitions=[]
                )
                for t in request.topics
            ],
        )
    limit = max(
        1,
        min(
            int(broker.config["max.request.partition.size.limit"]), request.response_partition_limit
        ),
    )
    out, denied, next_cursor = [], [], None
    for name in names:
        if not authorizer.allows(session, Operation.DESCRIBE, TOPIC, name):
            if not every:
                denied.append(_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
            continue
        if limit == 0:
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        topic = broker.topics.get(name)
        record = broker.cluster.topics.get(name) if topic is not None else None
        if topic is None or record is None:
            if not every:
                code = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if topic_name_error(name)
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                out.append(_error(code, name))
            continue
        first = cursor.partition_index if cursor is not None and name == start else 0
        end = min(len(record.replicas), first + limit)
        partitions = partition_states(broker.cluster, name, record, range(first, end))
        out.append(
            R.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=topic.topic_id,
                is_internal=name in INTERNAL_TOPICS,
                partitions=[
                    R.DescribeTopicPartitionsResponsePartition(
                        error_code=ErrorCode.NONE,
                        eligible_leader_replicas=[],
                        last_known_elr=[],
                        **p,
                    )
                    for p in partitions
                ],
                topic_authorized_operations=authorizer.operations(session, TOPIC, name),
            )
        )
        if end < len(record.replicas):
            next_cursor = R.Cursor(topic_name=name, partition_index=end)
            break
        limit -= len(partitions)
    return R(throttle_time_ms=0, topics=out + denied, next_cursor=next_cursor)


def _error(code: int, name: str):
    return R.DescribeTopicPartitionsResponseTopic(
        error_code=code,
        name=name,
        partitions=[],
        topic_authorized_operations=OMITTED_OPERATIONS,
    )
