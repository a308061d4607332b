"""AlterReplicaLogDirs (key 34), versions 1-2: move replicas between a broker's log
directories (``kafka-reassign-partitions`` with ``log_dirs``).

A broker has one data directory, so no replica ever moves: a partition held here, asked for
the data directory (as DescribeLogDirs names it, or any path to it), is already there (NONE);
a directory the broker does not have is LOG_DIR_NOT_FOUND, a partition it does not hold
REPLICA_NOT_AVAILABLE, as in Kafka. It needs ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every partition).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import os

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.AlterReplicaLogDirsResponse


def handle(broker: Broker, header, request: messages.AlterReplicaLogDirsRequest):
    allowed = broker.authorizer.allows_cluster(header.session, Operation.ALTER)
    here = os.path.realpath(broker.data_dir)
    codes: dict[str, dict[int, int]] = {}
    for d in request.dirs:
        known = os.path.isabs(d.path) and os.path.realpath(d.path) == here
        for t in d.topics:
            topic = broker.topics.get(t.name)
            held = {p.index for p in topic.partitions} if topic is not None else set()
            for index in t.partitions:
                if not allowed:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif not known:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                elif index not in held:
                    code = ErrorCode.REPLICA_NOT_AVAILABLE
                else:
                    code = ErrorCode.NONE
                codes.setdefault(t.name, {})[index] = code
    return R(
        throttle_time_ms=0,
        results=[
            R.AlterReplicaLogDirTopicResult(
                topic_name=name,
                partitions=[
                    R.AlterReplicaLogDirPartitionResult(partition_index=i, error_code=c)
                    for i, c in by_index.items()
                ],
            )
            for name, by_index in codes.items()
        ],
    )
