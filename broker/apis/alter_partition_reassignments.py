"""AlterPartitionReassignments (key 45), versions 0-1: move partitions to other brokers, or
cancel a move under way (``replicas`` null).

Each partition's target is checked before anything is written: the partition must exist
(UNKNOWN_TOPIC_OR_PARTITION), its target must name brokers once each (an empty or repeated
list is INVALID_REPLICA_ASSIGNMENT) and every one must be registered
(INVALID_REPLICA_ASSIGNMENT, naming the live brokers). A v1 request that forbids changing the
replication factor gets INVALID_REPLICATION_FACTOR for a target of another size. Every move
runs Kafka's way: the adding brokers follow the leader as replicas, and once they are all in
the ISR the leader writes the target as the replicas (replica_manager.py), handing leadership
to the first target replica in the ISR if it is itself removed. Cancelling a partition that is
not moving is NO_REASSIGNMENT_IN_PROGRESS. The accepted changes of a topic are written in one
compare-and-set of its znode (``Cluster.reassign``); the move itself then runs as
replica_manager.py says, and the answer does not wait for it (as Kafka's). A target equal to the
current placement ends any move of the partition. Without a cluster the only broker is the
only valid target, and nothing moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import logging
from typing import Any

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.AlterPartitionReassignmentsResponse
log = logging.getLogger("headrace")


async def handle(broker: Broker, header, request: messages.AlterPartitionReassignmentsRequest):
    allow_rf_change = header.api_version < 1 or request.allow_replication_factor_change
    if not broker.authorizer.allows_cluster(header.session, Operation.ALTER):
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message=None,
            responses=[],
        )
    responses = []
    for t in request.topics:
        out = R.ReassignableTopicResponse(name=t.name, partitions=[])
        responses.append(out)
        topic = broker.topics.get(t.name)
        targets: dict[int, list[int] | None] = {}
        answers: dict[int, Any] = {}  # R.ReassignablePartitionResponse
        for p in t.partitions:
            code, message = _check(broker, topic, p.partition_index, p.replicas, allow_rf_change)
            answer = R.ReassignablePartitionResponse(
                partition_index=p.partition_index, error_code=code, error_message=message
            )
            out.partitions.append(answer)
            if not code:
                targets[p.partition_index] = None if p.replicas is None else list(p.replicas)
                answers[p.partition_index] = answer
        if not targets:
            continue
        try:
            refused = await broker.cluster.admin.reassign(t.name, targets)
        except TopicChangeError as e:
            for answer in answers.values():
                answer.error_code, answer.error_message = e.error_code, e.message
            continue
        for index, message in refused.items():
            answer = answers[index]
            answer.error_message = message
            answer.error_code = (
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
                if targets[index] is None
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        for index, target in targets.items():
            if index not in refused:
                log.info(
                    "reassignment of %s-%d: %s",
                    t.name,
                    index,
                    "cancelled" if target is None else f"to {target}",
                )
    return R(
        throttle_time_ms=0,
        allow_replication_factor_change=allow_rf_change,
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=responses,
    )


def _check(
    broker: Broker, topic, index: int, replicas, allow_rf_change: bool
) -> tuple[int, str | None]:
    if topic is None or not 0 <= index < topic.count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic or partition does not exist."
    if replicas is None:
        record = broker.cluster.topics.get(topic.name)
        if record is None or index not in record.reassigning:
            return (
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"No reassignment of partition {index} of {topic.name} is in progress.",
            )
        return ErrorCode.NONE, None
    replicas = list(replicas)
    if not replicas or len(set(replicas)) != len(replicas):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The replica list {replicas} is empty or names a broker twice.",
        )
    record = broker.cluster.topics.get(topic.name)
    current = record.replicas[index] if record is not None and index < len(record.replicas) else [0]
    if len(replicas) != len(current) and not allow_rf_change:
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "The reassignment would change the replication factor.",
        )
    live = broker.brokers()
    for b in replicas:
        if b not in live:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Broker {b} is not a registered broker (registered: {sorted(live)}).",
            )
    return ErrorCode.NONE, None
