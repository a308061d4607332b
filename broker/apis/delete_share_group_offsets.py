"""DeleteShareGroupOffsets (key 92), version 0: delete a share group's state for whole topics
(``kafka-share-groups --delete-offsets``).

The group must be a share group without members: an unknown id is GROUP_ID_NOT_FOUND ("Group
G not found."), another kind's "Group G is not a share group.", one with members
NON_EMPTY_GROUP, each at the top level. For each topic named, the partitions the group has
state for (``ShareGroup.state_partitions``) are deleted at the share coordinator
(DeleteShareGroupState through ``broker.share_state``) and forgotten by the group; this
broker drops the group's share partitions of the topic it holds, and a leader elsewhere
finds the state gone at its next write and reads it afresh (a fetch then starts where
``share.auto.offset.reset`` says). A topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION,
one the group has no state for too, with Kafka's message "There is no offset information to
delete."; a failed delete answers its error for the topic, which stays recorded.

DELETE on the group is needed (else a top-level GROUP_AUTHORIZATION_FAILED), READ on each
topic (else TOPIC_AUTHORIZATION_FAILED for it). With ``share.version`` at 0 the answer is
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .alter_share_group_offsets import MESSAGES
from .refusals import group_refusal

R = messages.DeleteShareGroupOffsetsResponse
E = ErrorCode
NO_OFFSETS = "There is no offset information to delete."
ZERO_UUID = uuid.UUID(int=0)


def _refused(error: int, message: str | None = None):
    return R(throttle_time_ms=0, error_code=error, error_message=message or MESSAGES.get(error))


def _topic(name: str, topic_id, error: int, message: str | None = None):
    if error and message is None:
        message = MESSAGES.get(error, ErrorCode(error).name)
    return R.DeleteShareGroupOffsetsResponseTopic(
        topic_name=name, topic_id=topic_id, error_code=error, error_message=message
    )


async def _delete(broker: Broker, group, topic):
    """Delete the group's state of ``topic``'s recorded partitions."""
    indexes = sorted(group.state_partitions.get(topic.topic_id, ()))
    error = await broker.share_state.delete(group.group_id, [(topic.topic_id, indexes)])
    broker.shares.forget(group.group_id, topic.topic_id)
    if not error:
        group.state_partitions.pop(topic.topic_id, None)
        group.initializing.pop(topic.topic_id, None)
        error = await broker.groups.share.persisted(group.group_id, None)
    return _topic(topic.name, topic.topic_id, error)


async def handle(broker: Broker, header, request: messages.DeleteShareGroupOffsetsRequest):
    group_id = request.group_id
    if broker.features.level(SHARE_VERSION) < 1:
        return _refused(E.UNSUPPORTED_VERSION)
    session = header.session
    refused = group_refusal(broker, session, Operation.DELETE, group_id)
    if refused:
        return _refused(refused)
    if not group_id:
        return _refused(E.INVALID_GROUP_ID)
    errors, allowed = [], []
    for t in request.topics:
        if broker.authorizer.allows(session, Operation.READ, TOPIC, t.topic_name):
            allowed.append(t.topic_name)
        else:
            errors.append(_topic(t.topic_name, ZERO_UUID, E.TOPIC_AUTHORIZATION_FAILED))
    error, message, group = broker.groups.share.empty_group(group_id, create=False)
    if group is None:
        return _refused(error, message)
    calls = []
    for name in allowed:
        topic = broker.topics.get(name)
        if topic is None:
            errors.append(_topic(name, ZERO_UUID, E.UNKNOWN_TOPIC_OR_PARTITION))
        elif topic.topic_id not in group.state_partitions:
            errors.append(_topic(name, ZERO_UUID, E.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS))
        else:
            calls.append(lambda topic=topic: _delete(broker, group, topic))
    deleted = await answer_all(calls)
    return R(throttle_time_ms=0, error_code=E.NONE, responses=deleted + errors)
