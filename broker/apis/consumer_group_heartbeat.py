"""ConsumerGroupHeartbeat (key 68), versions 0-1: KIP-848's consumer group protocol.

One request does what JoinGroup, SyncGroup, Heartbeat and LeaveGroup do in the classic
protocol; the broker computes the assignment (see ``consumer_group``). The assignment is
sent only when it changed since the member was last told; partitions are named by topic id.
With the cluster's ``group.version`` at 0 (cluster/features.py) the protocol is off: every
request gets UNSUPPORTED_VERSION, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import GROUP_VERSION
from headrace.broker.coordinator.group.group_configs import HEARTBEAT_INTERVAL
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ApiKey, ErrorCode, messages

from .refusals import group_refusal

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
MIN_VERSION, MAX_VERSION = 0, 1

R = messages.ConsumerGroupHeartbeatResponse
OFF = "The consumer group protocol is off in this cluster (group.version 0)."


def handle(broker: Broker, header, request: messages.ConsumerGroupHeartbeatRequest):
    coordinator = broker.groups.consumer
    off = broker.features.level(GROUP_VERSION) < 1
    refused = (
        ErrorCode.UNSUPPORTED_VERSION
        if off
        else group_refusal(broker, header.session, Operation.READ, request.group_id)
    )
    if refused:
        error, message, member_id, epoch, assigned = refused, OFF if off else None, None, 0, None
    else:
        error, message, member_id, epoch, assigned = coordinator.heartbeat(
            request, header.client_id or ""
        )
    assignment = None
    if assigned is not None:
        by_topic: dict = {}
        for tid, p in assigned:
            by_topic.setdefault(tid, []).append(p)
        assignment = R.Assignment(
            topic_partitions=[
                R.TopicPartitions(topic_id=tid, partitions=sorted(ps))
                for tid, ps in by_topic.items()
            ]
        )
    return R(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        member_id=member_id,
        member_epoch=epoch,
        heartbeat_interval_ms=(
            coordinator.configs.value(request.group_id, HEARTBEAT_INTERVAL) if not error else 0
        ),
        assignment=assignment,
    )
