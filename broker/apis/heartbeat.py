"""Heartbeat (key 12), versions 0-4: keep a member's session alive; learn of rebalances.

A heartbeat during PreparingRebalance answers REBALANCE_IN_PROGRESS (the member must rejoin);
an unknown member gets UNKNOWN_MEMBER_ID and a stale generation ILLEGAL_GENERATION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import messages

from .refusals import group_refusal


def handle(broker: Broker, header, request: messages.HeartbeatRequest):
    refused = group_refusal(broker, header.session, Operation.READ, request.group_id)
    if refused:
        return messages.HeartbeatResponse(throttle_time_ms=0, error_code=refused)
    error = broker.groups.classic.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if header.api_version >= 3 else None,
    )
    return messages.HeartbeatResponse(throttle_time_ms=0, error_code=error)
