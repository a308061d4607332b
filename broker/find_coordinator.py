"""FindCoordinator (key 10), versions 0-6: which broker coordinates a group.

The coordinator of a group is the leader of the group's partition of
``__consumer_offsets``, that of a transactional id the leader of its partition of
``__transaction_state`` (``coordinator_for``; the topic is made on first use), as in Kafka;
with one broker it is always this one. A partition without a leader (its broker is down)
gives COORDINATOR_NOT_AVAILABLE, and the client asks again. From v4 a request carries several
keys and gets one answer per key. Key type 0 is a group, 1 a transactional id; other types
get INVALID_REQUEST.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.storage import StorageError

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION, MAX_VERSION = 0, 6

R = messages.FindCoordinatorResponse
GROUP_KEY = 0
TRANSACTION_KEY = 1


async def _answer(broker, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    if key_type == TRANSACTION_KEY:
        coordinator, what = broker.transactions, "transactional id"
    elif key_type == GROUP_KEY:
        coordinator, what = broker.groups, "group id"
    else:
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    if not key:
        return ErrorCode.INVALID_REQUEST, f"empty {what}", -1, "", -1
    try:
        node = await coordinator.coordinator_for(key)
    except StorageError as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e), -1, "", -1
    if broker.cluster is None:
        host, port = broker.advertised
        return ErrorCode.NONE, None, node, host, port
    endpoint = broker.cluster.brokers.get(node)
    if endpoint is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "its broker is not available", -1, "", -1
    return ErrorCode.NONE, None, node, endpoint.host, endpoint.port


async def handle(broker, header, request):
    if header.api_version < 4:
        error, message, node, host, port = await _answer(broker, request.key, request.key_type)
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
        error, message, node, host, port = await _answer(broker, key, request.key_type)
        coordinators.append(
            R.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
            )
        )
    return R(throttle_time_ms=0, coordinators=coordinators)
