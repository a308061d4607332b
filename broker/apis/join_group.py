"""JoinGroup (key 11), versions 0-9: join a classic group and wait for its rebalance.

From v4 a member without an id first gets MEMBER_ID_REQUIRED and an id to join with
(KIP-394); static members (``group_instance_id``, v5+) skip that step. The answer waits
until the join phase of the rebalance ends (see ``classic_coordinator``); the leader's answer
carries every member's metadata. v0 has no rebalance timeout: the session timeout serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.classic_group import JoinResult, MemberSpec
from headrace.broker.security.authorizer import Operation
from headrace.protocol import messages

from .refusals import group_refusal

R = messages.JoinGroupResponse


def handle(broker: Broker, header, request: messages.JoinGroupRequest):
    version = header.api_version
    refused = group_refusal(broker, header.session, Operation.READ, request.group_id)
    if refused:
        return _response(JoinResult(refused), version)
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
    spec = MemberSpec(
        client_id=header.client_id or "",
        client_host="",
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
    )
    outcome = broker.groups.classic.join(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 5 else None,
        spec,
        require_known_member=version >= 4,
    )
    if isinstance(outcome, JoinResult):
        return _response(outcome, version)
    return _later(outcome, version)


async def _later(waiter, version):
    return _response(await waiter, version)


def _response(r: JoinResult, version: int):
    name = r.protocol_name
    if name is None and version < 7:
        name = ""
    return R(
        throttle_time_ms=0,
        error_code=r.error,
        generation_id=r.generation,
        protocol_type=r.protocol_type,
        protocol_name=name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=[
            R.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in r.members
        ],
    )
