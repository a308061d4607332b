"""FindCoordinator (key 10), versions 0-6: which broker coordinates a group.

The coordinator is chosen by rendezvous hashing of the key over the brokers
(``GroupCoordinator.coordinator_for``, ``TransactionCoordinator.coordinator_for`` for
transactional ids); with one broker it is always this one. From v4 a request carries several
keys and gets one answer per key. Key type 0 is a group, 1 a transactional id; other types
get INVALID_REQUEST.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION, MAX_VERSION = 0, 6

R = messages.FindCoordinatorResponse
GROUP_KEY = 0
TRANSACTION_KEY = 1


def _answer(broker, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    if key_type == TRANSACTION_KEY:
        if not key:
            return ErrorCode.INVALID_REQUEST, "empty transactional id", -1, "", -1
        node = broker.transactions.coordinator_for(key)
        host, port = broker.advertised
        return ErrorCode.NONE, None, node, host, port
    if key_type != GROUP_KEY:
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    if not key:
        return ErrorCode.INVALID_REQUEST, "empty group id", -1, "", -1
    node = broker.groups.coordinator_for(key)
    host, port = broker.advertised  # one broker: the chosen node is this one
    return ErrorCode.NONE, None, node, host, port


def handle(broker, header, request):
    if header.api_version < 4:
        error, message, node, host, port = _answer(broker, request.key, request.key_type)
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
        error, message, node, host, port = _answer(broker, key, request.key_type)
        coordinators.append(
            R.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
            )
        )
    return R(throttle_time_ms=0, coordinators=coordinators)
