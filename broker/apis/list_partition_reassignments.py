"""ListPartitionReassignments (key 46), version 0: the moves under way (all, or of the
partitions named), as the topics' znodes say: ``replicas`` is the current replica set with the
target's brokers (Kafka lists both while a move runs), ``adding`` and ``removing`` what
changes. A partition that is not moving is left out; an unknown topic or partition is left
out too (Kafka answers the same). Without a cluster nothing ever moves: the list is empty."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.ListPartitionReassignmentsResponse


def handle(broker: Broker, header, request: messages.ListPartitionReassignmentsRequest):
    if not broker.authorizer.allows_cluster(header.session, Operation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, error_code=code, error_message=None, topics=[])
    records = broker.cluster.topics
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = {name: None for name in sorted(records)}
    else:
        wanted = {t.name: set(t.partition_indexes) for t in request.topics}
    topics = []
    for name, indexes in wanted.items():
        record = records.get(name)
        if record is None:
            continue
        partitions = []
        for index, move in sorted(record.reassigning.items()):
            if indexes is not None and index not in indexes:
                continue
            current = record.replicas[index]
            partitions.append(
                R.OngoingPartitionReassignment(
                    partition_index=index,
                    replicas=move["target"] + [b for b in current if b not in move["target"]],
                    adding_replicas=list(move["adding"]),
                    removing_replicas=list(move["removing"]),
                )
            )
        if partitions:
            topics.append(R.OngoingTopicReassignment(name=name, partitions=partitions))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=topics)
