"""OffsetDelete (key 47), version 0: delete some committed offsets of a group.

Allowed for partitions of topics the group's members do not subscribe to (else
GROUP_SUBSCRIBED_TO_TOPIC); an unknown group gets GROUP_ID_NOT_FOUND, an unknown partition
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.OffsetDeleteResponse


async def handle(broker: Broker, header, request: messages.OffsetDeleteRequest):
    authorizer, session = broker.authorizer, header.session
    refused = group_refusal(broker, session, Operation.DELETE, request.group_id)
    if refused:
        return R(error_code=refused, throttle_time_ms=0, topics=[])
    group = broker.groups.groups.get(request.group_id)
    if group is None:
        return R(error_code=ErrorCode.GROUP_ID_NOT_FOUND, throttle_time_ms=0, topics=[])
    subscribed = group.subscribed_topics() if group.members else set()
    entries, out = [], []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            resp = R.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=0)
            if not authorizer.allows(session, Operation.READ, TOPIC, t.name):
                resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < topic.count:
                resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif subscribed is None or t.name in subscribed:
                resp.error_code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif (t.name, p.partition_index) in group.offsets:
                entries.append((t.name, p.partition_index, None))
            parts.append(resp)
        out.append(R.OffsetDeleteResponseTopic(name=t.name, partitions=parts))
    error = await broker.groups.write_offsets(group, entries)
    return R(error_code=error, throttle_time_ms=0, topics=out if not error else [])
