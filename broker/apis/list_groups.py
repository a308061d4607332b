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
from headrace.protocol import ErrorCode, messages

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
    groups = broker.groups
    for kind in (groups.consumer, groups.share, groups.streams):  # KIP-848, 932, 1071 groups
        for g in kind.groups.values():
            state = g.state_name
            if hidden(g.group_id):
                continue
            names = {state.lower(), "not_ready" if state == "NotReady" else state.lower()}
            if (states and not names & states) or (types and g.group_type not in types):
                continue
            out.append(
                R.ListedGroup(
                    group_id=g.group_id,
                    protocol_type=g.protocol_type,
                    group_state=state,
                    group_type=g.group_type,
                )
            )
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=out)
