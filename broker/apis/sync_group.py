"""SyncGroup (key 14), versions 0-5: the leader hands out the assignment; everyone gets theirs.

While the group completes its rebalance a member's SyncGroup waits for the leader's; the
leader's carries every member's assignment, which the broker stores without reading it.
Once Stable, a SyncGroup is answered at once with the member's current assignment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.SyncGroupResponse


def handle(broker: Broker, header, request: messages.SyncGroupRequest):
    version = header.api_version
    refused = group_refusal(broker, header.session, Operation.READ, request.group_id)
    if refused:
        return _response(broker, request, refused, b"")
    outcome = broker.groups.classic.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        request.assignments,
    )
    if isinstance(outcome, tuple):
        return _response(broker, request, *outcome)
    return _later(broker, request, outcome)


async def _later(broker: Broker, request, waiter):
    return _response(broker, request, *(await waiter))


def _response(broker: Broker, request: messages.SyncGroupRequest, error, assignment):
    group = broker.groups.groups.get(request.group_id) if error == ErrorCode.NONE else None
    return R(
        throttle_time_ms=0,
        error_code=error,
        protocol_type=group.protocol_type if group is not None else None,
        protocol_name=group.protocol_name if group is not None else None,
        assignment=assignment,
    )
