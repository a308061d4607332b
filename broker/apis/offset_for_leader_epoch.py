"""OffsetForLeaderEpoch (key 23), versions 2-4: where a leader epoch ended on this leader.

A follower that starts following a new leader (replica_fetcher.py), or a client checking its
position after a leader change (KIP-320), names a leader epoch; the leader answers the largest
epoch it knows that is not above it and the offset where that epoch ended (the start of the
next one, or the log end for the current one), from its leader-epoch cache
(headrace.storage.LeaderEpochCache). The asker truncates above that offset.

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, or UNKNOWN_LEADER_EPOCH
when the asker knows a newer leader epoch than this broker has seen:
``fetch.not_served_error``). The request's ``current_leader_epoch``, when given, is checked as
Fetch checks it: an older one gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.

A broker on its own keeps no epoch cache: it has led every partition in leader epoch 0 (as
Metadata says) since the log began, so it answers as Kafka's cache with that one epoch would:
epoch 0 ends at the log end, any other is unknown (-1, -1). (Answering (-1, -1) for epoch 0
made a Java consumer resuming from an offset committed with leader epoch 0 see a truncation
and reset to auto.offset.reset, reprocessing what it had committed.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.protocol import ErrorCode, messages

from .fetch import not_served_error

R = messages.OffsetForLeaderEpochResponse


def handle(broker: Broker, header, request: messages.OffsetForLeaderEpochRequest):
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.topic)
        out = []
        for p in t.partitions:
            result = R.EpochEndOffset(
                error_code=ErrorCode.NONE, partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            out.append(result)
            partition = topic.partition(p.partition) if topic is not None else None
            if partition is None:
                result.error_code = (
                    not_served_error(broker, topic, p.partition, p.current_leader_epoch)
                    if topic is not None
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                continue
            current = partition.leader_epoch
            if current >= 0 and p.current_leader_epoch >= 0:
                if p.current_leader_epoch < current:
                    result.error_code = ErrorCode.FENCED_LEADER_EPOCH
                    continue
                if p.current_leader_epoch > current:
                    result.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                    continue
            epochs = partition.epochs
            if epochs is None:  # a broker on its own: one leader epoch since the log began
                if p.leader_epoch == broker.cluster.leader_epoch(t.topic, p.partition):
                    result.leader_epoch = p.leader_epoch
                    result.end_offset = partition.log.log_end_offset
                continue
            result.leader_epoch, result.end_offset = epochs.end_offset_for(
                p.leader_epoch, partition.log.log_end_offset
            )
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=out))
    return R(throttle_time_ms=0, topics=topics)
