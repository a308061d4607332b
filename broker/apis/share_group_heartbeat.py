"""ShareGroupHeartbeat (key 76), version 1: KIP-932's share groups.

A member joins (epoch 0, with its subscribed topic names), heartbeats and leaves (epoch -1)
with this one request; the broker assigns partitions, and members may share one (see
``share_group``). With the cluster's ``share.version`` at 0 (cluster/features.py) share
groups are off: every request gets UNSUPPORTED_VERSION, as in Kafka. The answer waits for
the group's records in ``__consumer_offsets`` and for the state of partitions given out for
the first time to be initialized at the share coordinator (``ShareGroupCoordinator.settled``).

Kafka's checks, in its order: READ on the group (GROUP_AUTHORIZATION_FAILED), a member id of
1 to 36 characters (INVALID_REQUEST), DESCRIBE on every subscribed topic
(TOPIC_AUTHORIZATION_FAILED), then the coordinator (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS) and the request's own fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.group.group_configs import SHARE_HEARTBEAT_INTERVAL
from headrace.broker.coordinator.group.share_group import MAX_MEMBER_ID
from headrace.broker.security.authorizer import GROUP, TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .consumer_group_heartbeat import response

R = messages.ShareGroupHeartbeatResponse
OFF = "Share groups are off in this cluster (share.version 0)."


def refusal(broker: Broker, session, request) -> tuple[int, str | None]:
    """(error, message) when the request is refused before the coordinator, else (0, None)."""
    if broker.features.level(SHARE_VERSION) < 1:
        return ErrorCode.UNSUPPORTED_VERSION, OFF
    authorizer = broker.authorizer
    if not authorizer.allows(session, Operation.READ, GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not request.member_id or len(request.member_id) > MAX_MEMBER_ID:
        return ErrorCode.INVALID_REQUEST, "Invalid member id in the request."
    for name in set(request.subscribed_topic_names or ()):
        if not authorizer.allows(session, Operation.DESCRIBE, TOPIC, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    return broker.groups.not_served(request.group_id), None


async def handle(broker: Broker, header, request: messages.ShareGroupHeartbeatRequest):
    coordinator = broker.groups.share
    session = header.session
    error, message = refusal(broker, session, request)
    if not error:
        error = await coordinator.group_log.ready()
    if error:
        answer = error, message, None, 0, None
    else:
        host = f"/{session.host}" if session.host else ""
        answer = coordinator.heartbeat(request, header.client_id or "", host)
        # written to __consumer_offsets, and the state of newly assigned partitions
        # initialized at the share coordinator, before the answer
        error = await coordinator.settled(request.group_id, answer[2])
        if error and not answer[0]:
            answer = error, None, None, 0, None
    interval_ms = coordinator.configs.value(request.group_id, SHARE_HEARTBEAT_INTERVAL)
    return response(R, answer, interval_ms)
