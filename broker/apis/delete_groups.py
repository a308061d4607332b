"""DeleteGroups (key 42), versions 0-2: delete groups without members, offsets included.

A group with members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND. Deleting writes
a tombstone for each committed offset to ``__consumer_offsets`` and waits for the flush.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ApiKey, messages

from .refusals import group_refusal

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION, MAX_VERSION = 0, 2

R = messages.DeleteGroupsResponse


async def handle(broker: Broker, header, request: messages.DeleteGroupsRequest):
    results = []
    for group_id in request.groups_names:
        error = group_refusal(broker, header.session, Operation.DELETE, group_id)
        if not error:
            error = await broker.groups.delete_group(group_id)
        results.append(R.DeletableGroupResult(group_id=group_id, error_code=error))
    return R(throttle_time_ms=0, results=results)
