"""ReadShareGroupState (key 84), version 0: the leader of a partition reads the state of a
share group's share partition there (its state epoch, start offset and state batches) from the
share coordinator (KIP-932).

Each partition is the share coordinator's ``read`` (coordinator/share/), which says what each
answer means: the leader's epoch is recorded when it is newer (an older one is
FENCED_LEADER_EPOCH), an uninitialized partition is INVALID_REQUEST. A request without a
group id, or with no topics, or a topic with no partitions, gets an empty answer, as Kafka
gives. Only brokers may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from functools import partial

from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.ReadShareGroupStateResponse


async def handle(broker: Broker, header, request: messages.ReadShareGroupStateRequest):
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return R(results=[])
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    coordinator = broker.share_coordinator
    calls = [(t.topic_id, p) for t in request.topics for p in t.partitions]
    answers = await answer_all(
        [
            partial(coordinator.read, (request.group_id, t, p.partition), p.leader_epoch)
            for t, p in calls
        ]
        if allowed
        else []
    )
    results: dict = {}
    for i, (topic_id, p) in enumerate(calls):
        if not allowed:
            result = R.PartitionResult(
                partition=p.partition, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
        else:
            a = answers[i]
            result = R.PartitionResult(
                partition=p.partition,
                error_code=a.error,
                error_message=a.message,
                state_epoch=a.state_epoch,
                start_offset=a.start_offset,
                state_batches=[R.StateBatch(**b._asdict()) for b in a.batches],
            )
        results.setdefault(topic_id, []).append(result)
    return R(results=[R.ReadStateResult(topic_id=t, partitions=ps) for t, ps in results.items()])
