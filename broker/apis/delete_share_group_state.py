"""DeleteShareGroupState (key 86), version 0: a share group's state of some partitions is
deleted at the share coordinator (KIP-932): the group is deleted, or stops reading a topic.

Each partition is the share coordinator's ``delete`` (coordinator/share/): a tombstone in
``__share_group_state``, nothing for a partition without state. A request without a group id,
or with no topics, or a topic with no partitions, gets an empty answer, as Kafka gives. Only
brokers may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from functools import partial

from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.DeleteShareGroupStateResponse


async def handle(broker: Broker, header, request: messages.DeleteShareGroupStateRequest):
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return R(results=[])
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    coordinator = broker.share_coordinator
    calls = [(t.topic_id, p.partition) for t in request.topics for p in t.partitions]
    answers = await answer_all(
        [partial(coordinator.delete, (request.group_id, t, p)) for t, p in calls] if allowed else []
    )
    results: dict = {}
    for i, (topic_id, partition) in enumerate(calls):
        error, message = answers[i] if allowed else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        results.setdefault(topic_id, []).append(
            R.PartitionResult(partition=partition, error_code=error, error_message=message)
        )
    return R(results=[R.DeleteStateResult(topic_id=t, partitions=ps) for t, ps in results.items()])
