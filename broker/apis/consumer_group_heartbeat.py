"""ConsumerGroupHeartbeat (key 68), versions 0-1: KIP-848's consumer group protocol.

One request does what JoinGroup, SyncGroup, Heartbeat and LeaveGroup do in the classic
protocol; the broker computes the assignment (see ``consumer_group``). The assignment is
sent only when it changed since the member was last told; partitions are named by topic id.
The answer waits until the records of what the heartbeat changed are durable in
``__consumer_offsets`` (``ModernGroupCoordinator.persisted``).
With the cluster's ``group.version`` at 0 (cluster/features.py) the protocol is off: every
request gets UNSUPPORTED_VERSION, as in Kafka.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import GROUP_VERSION
from headrace.broker.coordinator.group.group_configs import HEARTBEAT_INTERVAL
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.ConsumerGroupHeartbeatResponse
OFF = "The consumer group protocol is off in this cluster (group.version 0)."


async def handle(broker: Broker, header, request: messages.ConsumerGroupHeartbeatRequest):
    coordinator = broker.groups.consumer
    off = broker.features.level(GROUP_VERSION) < 1
    refused = (
        ErrorCode.UNSUPPORTED_VERSION
        if off
        else group_refusal(broker, header.session, Operation.READ, request.group_id)
    )
    if not refused:
        refused = await coordinator.group_log.ready()
    if refused:
        answer = refused, OFF if off else None, None, 0, None
    else:
        answer = coordinator.heartbeat(request, header.client_id or "")
        # what it changed is written to __consumer_offsets first, as Kafka answers once
        # the records are committed
        error = await coordinator.persisted(request.group_id, answer[2])
        if error and not answer[0]:
            answer = error, None, None, 0, None
    interval_ms = coordinator.configs.value(request.group_id, HEARTBEAT_INTERVAL)
    return response(R, answer, interval_ms)


def response(cls, answer: tuple, interval_ms: int):
    """ConsumerGroupHeartbeat's response, or ShareGroupHeartbeat's (``cls``, of the same
    fields), from the coordinator's (error, message, member id, epoch, assignment or None):
    the assignment by topic id, and the heartbeat interval unless there is an error."""
    error, message, member_id, epoch, assigned = answer
    assignment = None
    if assigned is not None:
        assignment = cls.Assignment(
            topic_partitions=[
                cls.TopicPartitions(topic_id=tid, partitions=ps) for tid, ps in by_topic(assigned)
            ]
        )
    return cls(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        member_id=member_id,
        member_epoch=epoch,
        heartbeat_interval_ms=0 if error else interval_ms,
        assignment=assignment,
    )


def by_topic(parts) -> list[tuple[uuid.UUID, list[int]]]:
    """(topic id, partitions in order) of (topic id, partition) pairs, topics as they come."""
    partitions: dict[uuid.UUID, list[int]] = {}
    for tid, p in parts:
        partitions.setdefault(tid, []).append(p)
    return [(tid, sorted(ps)) for tid, ps in partitions.items()]
