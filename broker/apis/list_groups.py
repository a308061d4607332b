"""ListGroups (key 16), versions 0-5: every group, filtered by state (v4+) and type (v5+).

Classic groups have type "classic", KIP-848 groups "consumer", KIP-932 share groups "share"
(Empty or Stable), KIP-1071 streams groups "streams" (protocol type "streams"; the state
NotReady is matched by the filter "not_ready" as in Kafka, or "notready"). Groups that only
hold committed offsets are listed Empty, with no protocol type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_state import DEAD
from headrace.broker.security.authorizer import GROUP, Operation
from headrace.protocol import ApiKey, ErrorCode, messages

API_KEY = ApiKey.LIST_GROUPS
MIN_VERSION, MAX_VERSION = 0, 5

R = messages.ListGroupsResponse
GROUP_TYPE = "classic"


def handle(broker: Broker, header, request: messages.ListGroupsRequest):
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if version >= 5 else set()
    out = []
    authorizer, session = broker.authorizer, header.session
    # DESCRIBE on the cluster lists every group, else the groups DESCRIBE is allowed on
    every = authorizer.allows_cluster(session, Operation.DESCRIBE)

    def hidden(group_id: str) -> bool:
        return not every and not authorizer.allows(session, Operation.DESCRIBE, GROUP, group_id)

    for group in broker.groups.groups.values():
        if group.state is DEAD or hidden(group.group_id):
            continue
        if states and group.state.value.lower() not in states:
            continue
        if types and GROUP_TYPE not in types:
            continue
        out.append(
            R.ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type=GROUP_TYPE,
            )
        )
    for consumer_group in broker.groups.consumer.groups.values():  # KIP-848 groups
        state = consumer_group.state_name
        if hidden(consumer_group.group_id):
            continue
        if (states and state.lower() not in states) or (types and "consumer" not in types):
            continue
        out.append(
            R.ListedGroup(
                group_id=consumer_group.group_id,
                protocol_type="consumer",
                group_state=state,
                group_type="consumer",
            )
        )
    for share_group in broker.groups.share.groups.values():
        state = share_group.state_name
        if hidden(share_group.group_id):
            continue
        if (states and state.lower() not in states) or (types and "share" not in types):
            continue
        out.append(
            R.ListedGroup(
                group_id=share_group.group_id,
                protocol_type="share",
                group_state=state,
                group_type="share",
            )
        )
    for streams_group in broker.groups.streams.groups.values():
        state = streams_group.state_name
        if hidden(streams_group.group_id):
            continue
        names = {state.lower(), "not_ready" if state == "NotReady" else state.lower()}
        if (states and not names & set(states)) or (types and "streams" not in types):
            continue
        out.append(
            R.ListedGroup(
                group_id=streams_group.group_id,
                protocol_type="streams",
                group_state=state,
                group_type="streams",
            )
        )
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=out)
