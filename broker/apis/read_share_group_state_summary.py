"""ReadShareGroupStateSummary (key 87), versions 0-1: a share group's start offset, epochs and
(version 1, KIP-1226) delivery-complete count of some partitions, from the share coordinator
(KIP-932): what describing a share group's offsets and lag reads.

Each partition is the share coordinator's ``read_summary`` (coordinator/share/): nothing is
written; a partition without state answers start offset -1 and count -1. A request without a
group id, or with no topics, or a topic with no partitions, gets an empty answer, as Kafka
gives. Only brokers may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.ReadShareGroupStateSummaryResponse


def handle(broker: Broker, header, request: messages.ReadShareGroupStateSummaryRequest):
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return R(results=[])
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    coordinator = broker.share_coordinator
    results = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            if not allowed:
                partitions.append(
                    R.PartitionResult(
                        partition=p.partition, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    )
                )
                continue
            a = coordinator.read_summary((request.group_id, t.topic_id, p.partition))
            partitions.append(
                R.PartitionResult(
                    partition=p.partition,
                    error_code=a.error,
                    error_message=a.message,
                    state_epoch=a.state_epoch,
                    leader_epoch=a.leader_epoch,
                    start_offset=a.start_offset,
                    delivery_complete_count=a.delivery_complete_count,
                )
            )
        results.append(R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=partitions))
    return R(results=results)
