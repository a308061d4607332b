"""FindCoordinator (key 10), versions 0-6: which broker coordinates a group.

The coordinator of a group is the leader of the group's partition of
``__consumer_offsets``, that of a transactional id the leader of its partition of
``__transaction_state`` (``coordinator_for``; the topic is made on first use), as in Kafka;
with one broker it is always this one. A partition without a leader (its broker is down)
gives COORDINATOR_NOT_AVAILABLE, and the client asks again; so does an answer that waited
``WAIT_S`` for the topic (made meanwhile, in the background): responses on a connection go
in order, so a slow answer here would hold up the client's fetches behind it. From v4 a
request carries several keys and gets one answer per key. Key type 0 is a group, 1 a
transactional id, 2 (v6) a share-partition key "groupId:topicId:partition" of a partition
leader looking for its share coordinator, the leader of the key's partition of
``__share_group_state``: only brokers ask (CLUSTER_ACTION on the cluster), and a key that is
not one, or type 2 before v6, gets INVALID_REQUEST, as in Kafka; other types get
INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.coordinator.share.share_state_log import parse_coordinator_key
from headrace.broker.security.authorizer import GROUP, TRANSACTIONAL_ID, Operation
from headrace.protocol import ErrorCode, messages
from headrace.storage import StorageError

R = messages.FindCoordinatorResponse
WAIT_S = 5.0  # the most an answer waits for the coordinators' topic
GROUP_KEY = 0
TRANSACTION_KEY = 1
SHARE_KEY = 2


async def _answer(
    broker, session, key: str, key_type: int, version: int
) -> tuple[int, str | None, int, str, int]:
    if key_type == SHARE_KEY:
        if version < 6:
            return ErrorCode.INVALID_REQUEST, "share keys need version 6", -1, "", -1
        if not broker.authorizer.allows_cluster(session, Operation.CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, -1, "", -1
        try:
            share_key = parse_coordinator_key(key)
        except ValueError as e:
            return ErrorCode.INVALID_REQUEST, f"invalid share coordinator key: {e}", -1, "", -1
        return await _find(broker, session, broker.share_coordinator.coordinator_for(share_key))
    if key_type == TRANSACTION_KEY:
        coordinator, what = broker.transactions, "transactional id"
        resource, denied = TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif key_type == GROUP_KEY:
        coordinator, what = broker.groups, "group id"
        resource, denied = GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    if not broker.authorizer.allows(session, Operation.DESCRIBE, resource, key):
        return denied, None, -1, "", -1
    if not key:
        return ErrorCode.INVALID_REQUEST, f"empty {what}", -1, "", -1
    return await _find(broker, session, coordinator.coordinator_for(key))


async def _find(broker, session, search) -> tuple[int, str | None, int, str, int]:
    """The answer once ``search`` (a coordinator's ``coordinator_for``) names the node."""
    listener = session.listener
    finding = asyncio.ensure_future(search)
    try:
        async with asyncio.timeout(WAIT_S):
            node = await asyncio.shield(finding)
    except StorageError as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e), -1, "", -1
    except TimeoutError:
        finding.add_done_callback(_retrieve)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinators are loading", -1, "", -1
    endpoint = broker.brokers(listener).get(node)
    if endpoint is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "its broker is not available", -1, "", -1
    return ErrorCode.NONE, None, node, endpoint.host, endpoint.port


def _retrieve(task: asyncio.Future) -> None:
    """A search given up on: its outcome is not wanted (and not an unretrieved error)."""
    if not task.cancelled():
        task.exception()


async def handle(broker: Broker, header, request: messages.FindCoordinatorRequest):
    if header.api_version < 4:
        error, message, node, host, port = await _answer(
            broker, header.session, request.key, request.key_type, header.api_version
        )
        return R(
            throttle_time_ms=0,
            error_code=error,
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )
    coordinators = []
    for key in request.coordinator_keys:
        error, message, node, host, port = await _answer(
            broker, header.session, key, request.key_type, header.api_version
        )
        coordinators.append(
            R.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
            )
        )
    return R(throttle_time_ms=0, coordinators=coordinators)
