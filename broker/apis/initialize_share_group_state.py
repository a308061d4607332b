"""InitializeShareGroupState (key 83), version 0: a share group starts the state of some of
its partitions afresh, at the share coordinator (KIP-932).

Each partition is the share coordinator's ``initialize`` (coordinator/share/), which says
what each answer means: a new state epoch and start offset, FENCED_STATE_EPOCH for an older
state epoch, NOT_COORDINATOR where the key is coordinated elsewhere. A request without a group
id, or with no topics, or a topic with no partitions, gets an empty answer, as Kafka gives.
Only brokers may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from functools import partial

from headrace.broker.coordinator.share.share_coordinator import answer_all
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.InitializeShareGroupStateResponse


async def handle(broker: Broker, header, request: messages.InitializeShareGroupStateRequest):
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return R(results=[])
    if not broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION):
        return _all(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    coordinator = broker.share_coordinator
    calls = [
        (t.topic_id, p.partition, (request.group_id, t.topic_id, p.partition), p)
        for t in request.topics
        for p in t.partitions
    ]
    answers = await answer_all(
        [
            partial(coordinator.initialize, key, p.state_epoch, p.start_offset)
            for _, _, key, p in calls
        ]
    )
    results: dict = {}
    for (topic_id, partition, _, _), (error, message) in zip(calls, answers, strict=True):
        results.setdefault(topic_id, []).append(
            R.PartitionResult(partition=partition, error_code=error, error_message=message)
        )
    return R(
        results=[R.InitializeStateResult(topic_id=t, partitions=ps) for t, ps in results.items()]
    )


def _all(request, error: int):
    return R(
        results=[
            R.InitializeStateResult(
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionResult(partition=p.partition, error_code=error) for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
