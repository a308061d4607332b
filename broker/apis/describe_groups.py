"""DescribeGroups (key 15), versions 0-6: a group's state, protocol and members.

Member metadata and assignments are given only while the group is Stable, as in Kafka. An
unknown group is described as Dead; from v6 it also gets GROUP_ID_NOT_FOUND. A KIP-848 group is
not a classic group, and Kafka 4.0 answers it the same way (Dead; from v6 GROUP_ID_NOT_FOUND,
"Group G is not a classic group."): the admin client asks ConsumerGroupDescribe first and
comes here only for groups that are not consumer groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_state import DEAD, STABLE
from headrace.broker.security.authorizer import GROUP, OMITTED_OPERATIONS, Operation
from headrace.protocol import ApiKey, ErrorCode, messages

API_KEY = ApiKey.DESCRIBE_GROUPS
MIN_VERSION, MAX_VERSION = 0, 6

R = messages.DescribeGroupsResponse


def handle(broker: Broker, header, request: messages.DescribeGroupsRequest):
    version = header.api_version
    authorizer, session = broker.authorizer, header.session
    asked = version >= 3 and request.include_authorized_operations
    out = []
    for group_id in request.groups:
        group = broker.groups.groups.get(group_id)
        ops = authorizer.operations(session, GROUP, group_id) if asked else OMITTED_OPERATIONS
        if not authorizer.allows(session, Operation.DESCRIBE, GROUP, group_id):
            out.append(
                R.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=OMITTED_OPERATIONS,
                )
            )
            continue
        refused = broker.groups.not_served(group_id)
        if refused:
            out.append(
                R.DescribedGroup(
                    error_code=refused,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=ops,
                )
            )
            continue
        if group is None or group.state is DEAD:
            if group_id in broker.groups.consumer.groups:
                message = f"Group {group_id} is not a classic group."
            else:
                message = f"Group {group_id} not found."
            v6 = version >= 6
            out.append(
                R.DescribedGroup(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND if v6 else ErrorCode.NONE,
                    error_message=message if v6 else None,
                    group_id=group_id,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=ops,
                )
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
