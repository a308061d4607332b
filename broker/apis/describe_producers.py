"""DescribeProducers (key 61), version 0: the producers a partition knows.

For each partition: every producer id with state here, its epoch, last sequence, the
timestamp of its last batch, the coordinator epoch of its last marker and, when it has an
open transaction in the partition, the transaction's first offset (what
``kafka-transactions.sh find-hanging`` looks for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

R = messages.DescribeProducersResponse


def handle(broker: Broker, header, request: messages.DescribeProducersRequest):
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        if not broker.authorizer.allows(header.session, Operation.READ, TOPIC, t.name):
            partitions = [
                R.PartitionResponse(
                    partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
                for index in t.partition_indexes
            ]
        else:
            partitions = [
                _partition(topic, topic.partition(index) if topic else None, index)
                for index in t.partition_indexes
            ]
        topics.append(R.TopicResponse(name=t.name, partitions=partitions))
    return R(throttle_time_ms=0, topics=topics)


def _partition(topic, partition, index: int):
    """The producers ``partition`` (None: not here, or no such partition) knows."""
    if partition is None:
        return R.PartitionResponse(
            partition_index=index,
            error_code=(
                topic.partition_error(index) if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            ),
            active_producers=[],
        )
    state = partition.producers
    active = []
    for pid in sorted(set(state.producers) | set(state.ongoing)):
        entry = state.producers.get(pid)
        active.append(
            R.ProducerState(
                producer_id=pid,
                producer_epoch=entry.epoch if entry else -1,
                last_sequence=entry.batches[-1][1] if entry and entry.batches else -1,
                last_timestamp=entry.last_timestamp if entry else -1,
                coordinator_epoch=entry.coordinator_epoch if entry else -1,
                current_txn_start_offset=state.ongoing.get(pid, -1),
            )
        )
    return R.PartitionResponse(
        partition_index=index, error_code=ErrorCode.NONE, active_producers=active
    )
