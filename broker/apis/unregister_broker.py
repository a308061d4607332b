"""UnregisterBroker (key 64), version 0: remove a broker from the cluster for good
(``kafka-cluster unregister --id N``).

The broker stops being a member (controller.py): the controller moves its partitions to the
brokers placement now gives them. A broker that is still running is drained that way and may
then be stopped; one that is down keeps its partitions until it is back to hand them over (a
move copies from the current broker). An id that is not a member is BROKER_ID_NOT_REGISTERED.
A broker on its own answers INVALID_REQUEST for its own id and BROKER_ID_NOT_REGISTERED for
any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.UnregisterBrokerResponse


async def handle(broker: Broker, header, request: messages.UnregisterBrokerRequest):
    node = request.broker_id
    if not broker.authorizer.allows_cluster(header.session, Operation.ALTER):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        removed = await broker.cluster.controller.remove_member(node)
    except TopicChangeError as e:  # (a broker on its own, of itself)
        return _answer(e.error_code, e.message)
    if not removed:
        return _answer(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {node} is not a member of the cluster."
        )
    return _answer(ErrorCode.NONE, None)


def _answer(code: int, message: str | None):
    return R(throttle_time_ms=0, error_code=code, error_message=message)
