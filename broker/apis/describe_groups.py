"""DescribeGroups (key 15), versions 0-6: a group's state, protocol and members.

Member metadata and assignments are given only while the group is Stable, as in Kafka. An
unknown group is described as Dead; from v6 it also gets GROUP_ID_NOT_FOUND. A KIP-848, a
share or a streams group is not a classic group, and Kafka 4.x answers it the same way (Dead;
from v6 GROUP_ID_NOT_FOUND, "Group G is not a classic group."): the admin client asks
ConsumerGroupDescribe (or ShareGroupDescribe, StreamsGroupDescribe) first and comes here only
for groups that are not of that kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_state import DEAD, STABLE
from headrace.broker.security.authorizer import GROUP, OMITTED_OPERATIONS, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.DescribeGroupsResponse


def described_refusal(broker: Broker, session, group_id: str, asked: bool) -> tuple[int, int]:
    """(why the group is not described, or 0; its ``authorized_operations``), for
    DescribeGroups and ConsumerGroupDescribe: DESCRIBE on the group, then its coordinator. The
    operations are given when ``asked``, unless the principal may not describe the group."""
    refused = group_refusal(broker, session, Operation.DESCRIBE, group_id)
    if not asked or refused == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return refused, OMITTED_OPERATIONS
    return refused, broker.authorizer.operations(session, GROUP, group_id)


def undescribed(cls, group_id: str, code: int, ops: int, state: str = "", message=None):
    """A group answered by its error alone (no protocol, no members): refused, or not a group
    of the API's kind. ``cls``: DescribeGroups' or ConsumerGroupDescribe's DescribedGroup."""
    return cls(
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state=state,
        authorized_operations=ops,
    )


def described(cls, group, ops: int, assignor: str, members: list, **more):
    """A consumer, share or streams group as ``cls`` (its Describe API's DescribedGroup): its
    state, epochs, assignor and ``members``, and ``more`` of the kind's own fields."""
    return cls(
        error_code=ErrorCode.NONE,
        group_id=group.group_id,
        group_state=group.state_name,
        group_epoch=group.epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=assignor,
        authorized_operations=ops,
        members=members,
        **more,
    )


def group_of_kind(broker: Broker, session, group_id: str, asked: bool, kind: str, groups, cls, off):
    """The opening of ShareGroupDescribe and StreamsGroupDescribe: (the group, its
    ``authorized_operations``, None) when it is described, else (None, ops, its answer by error
    alone): ``off`` (the message) while the kind's feature is at 0, refused, or no group of
    ``kind`` in ``groups`` under that id."""
    if off is not None:
        code = ErrorCode.UNSUPPORTED_VERSION
        return (
            None,
            OMITTED_OPERATIONS,
            undescribed(cls, group_id, code, OMITTED_OPERATIONS, "", off),
        )
    refused, ops = described_refusal(broker, session, group_id, asked)
    if refused:
        return None, ops, undescribed(cls, group_id, refused, ops)
    group = groups.get(group_id)
    if group is None:
        message = (
            f"Group {group_id} is not a {kind} group."
            if broker.groups.group_type(group_id) is not None
            else f"Group {group_id} not found."
        )
        code = ErrorCode.GROUP_ID_NOT_FOUND
        return None, ops, undescribed(cls, group_id, code, ops, "", message)
    return group, ops, None


def handle(broker: Broker, header, request: messages.DescribeGroupsRequest):
    version = header.api_version
    asked = version >= 3 and request.include_authorized_operations
    out = []
    for group_id in request.groups:
        group = broker.groups.groups.get(group_id)
        refused, ops = described_refusal(broker, header.session, group_id, asked)
        if refused:
            out.append(undescribed(R.DescribedGroup, group_id, refused, ops))
            continue
        if group is None or group.state is DEAD:
            if broker.groups.group_type(group_id) in ("consumer", "share", "streams"):
                message = f"Group {group_id} is not a classic group."
            else:
                message = f"Group {group_id} not found."
            v6 = version >= 6  # (before: no error, the state says it)
            code = ErrorCode.GROUP_ID_NOT_FOUND if v6 else ErrorCode.NONE
            out.append(
                undescribed(R.DescribedGroup, group_id, code, ops, "Dead", message if v6 else None)
            )
            continue
        stable = group.state is STABLE
        out.append(
            R.DescribedGroup(
                error_code=ErrorCode.NONE,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=[
                    R.DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata(group.protocol_name) if stable else b"",
                        member_assignment=m.assignment if stable else b"",
                    )
                    for m in group.members.values()
                ],
                authorized_operations=ops,
            )
        )
    return R(throttle_time_ms=0, groups=out)
