"""LeaveGroup (key 13), versions 0-5: members leave (v3+: several at once, by member id or
``group.instance.id``); the group rebalances without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import messages

from .refusals import group_refusal

R = messages.LeaveGroupResponse


def handle(broker: Broker, header, request: messages.LeaveGroupRequest):
    refused = group_refusal(broker, header.session, Operation.READ, request.group_id)
    if refused:
        return R(throttle_time_ms=0, error_code=refused, members=[])
    if header.api_version < 3:
        _, errors = broker.groups.classic.leave(request.group_id, [(request.member_id, None)])
        return R(throttle_time_ms=0, error_code=errors[0])
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = broker.groups.classic.leave(request.group_id, members)
    return R(
        throttle_time_ms=0,
        error_code=error,
        members=[
            R.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(members, errors)
        ],
    )
