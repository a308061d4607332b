"""DeleteGroups (key 42), versions 0-3: delete groups without members, offsets included.

A group with members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND, each with a
message from v3. Deleting writes a tombstone for each committed offset to
``__consumer_offsets`` and waits for the flush, and so does a consumer, share or streams
group's records. A share group's persisted state (every partition it has state for,
``ShareGroup.state_partitions`` and ``initializing``, loaded with the group after a
restart) is deleted at the share
coordinator first (DeleteShareGroupState through ``broker.share_state``), so a group made
again under the id starts where ``share.auto.offset.reset`` says; if that fails the error is
answered and the group kept. Its records in flight on the partitions this broker leads go
with it; a leader elsewhere finds the state gone at its next write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import group_refusal

R = messages.DeleteGroupsResponse
MESSAGES: dict[int, str] = {
    ErrorCode.NON_EMPTY_GROUP: "Group {} has members: it can be deleted once it has none.",
    ErrorCode.GROUP_ID_NOT_FOUND: "Group {} does not exist.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Not authorized to delete group {}.",
}


async def handle(broker: Broker, header, request: messages.DeleteGroupsRequest):
    results = []
    for group_id in request.groups_names:
        error = group_refusal(broker, header.session, Operation.DELETE, group_id)
        if not error and broker.groups.group_type(group_id) == "share":
            error = await _delete_share_state(broker, group_id)
        if not error:
            share = broker.groups.group_type(group_id) == "share"
            error = await broker.groups.delete_group(group_id)
            if share and not error:
                broker.shares.forget(group_id)  # its records in flight on partitions led here
        message = MESSAGES.get(error)
        results.append(
            R.DeletableGroupResult(
                group_id=group_id,
                error_code=error,
                error_message=message.format(group_id) if message is not None else None,
            )
        )
    return R(throttle_time_ms=0, results=results)


async def _delete_share_state(broker: Broker, group_id: str) -> int:
    """Delete an empty share group's persisted state (every partition it has state for)
    before the group: an error keeps the group, so that DeleteGroups can be tried again."""
    group = broker.groups.share.groups.get(group_id)
    if group is None or group.members:
        return ErrorCode.NONE  # delete_group answers
    held: dict = {}
    for state in (group.state_partitions, group.initializing):
        for tid, ps in state.items():
            held.setdefault(tid, set()).update(ps)
    recorded = [(tid, sorted(ps)) for tid, ps in held.items()]
    error = await broker.share_state.delete(group_id, recorded) if recorded else ErrorCode.NONE
    if not error:
        group.state_partitions.clear()
        group.initializing.clear()
    return error
