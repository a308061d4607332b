"""WriteShareGroupState (key 85), versions 0-1: the leader of a partition writes what a share
group has done with some of its records (state batches, a new start offset) to the share
coordinator (KIP-932). Version 1 adds the delivery-complete count (KIP-1226).

Each partition is the share coordinator's ``write`` (coordinator/share/), which says what each
answer means: the batches merged into the stored state, answered once the record is in the
ISR of its ``__share_group_state`` partition; FENCED_LEADER_EPOCH or FENCED_STATE_EPOCH for a
leader or state that was superseded; INVALID_REQUEST for an uninitialized partition or
batches beyond ``share.coordinator.state.max.batches``. A request without a group id, or with
no topics, or a topic with no partitions, gets an empty answer, as Kafka gives. Only brokers
may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from functools import partial

from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.WriteShareGroupStateResponse


async def handle(broker: Broker, header, request: messages.WriteShareGroupStateRequest):
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return R(results=[])
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    coordinator = broker.share_coordinator
    calls = [(t.topic_id, p) for t in request.topics for p in t.partitions]
    answers = await answer_all(
        [
            partial(
                coordinator.write,
                (request.group_id, t, p.partition),
                p.state_epoch,
                p.leader_epoch,
                p.start_offset,
                [
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches
                ],
                p.delivery_complete_count,
            )
            for t, p in calls
        ]
        if allowed
        else []
    )
    results: dict = {}
    for i, (topic_id, p) in enumerate(calls):
        error, message = answers[i] if allowed else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        results.setdefault(topic_id, []).append(
            R.PartitionResult(partition=p.partition, error_code=error, error_message=message)
        )
    return R(results=[R.WriteStateResult(topic_id=t, partitions=ps) for t, ps in results.items()])
