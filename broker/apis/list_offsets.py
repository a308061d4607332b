"""ListOffsets (key 2), versions 1-11: offsets by time.

Special timestamps: -1 latest (the high watermark), -2 earliest (the log start offset), -3
the record with the largest timestamp (v7+), -4 earliest local (v8+, the log start), -5
latest tiered (v9+, none: -1). A timestamp >= 0 finds the first record whose timestamp is at
least that: the time index finds the batch, then the batch's records are read (this is the
only place the broker looks inside a batch, and it is not on the produce or fetch path).
With isolation level 1 (read_committed, v2+) "latest" is the last stable offset. In a
cluster only the leader answers, "latest" is its high watermark (what the ISR has), and a
``current_leader_epoch`` (v4+) older than the leader's gets FENCED_LEADER_EPOCH, a newer one
UNKNOWN_LEADER_EPOCH; answers carry the leader epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages
from headrace.protocol.compression import UnsupportedCompressionError
from headrace.protocol.records import (
    CorruptRecordError,
    decode_records,
)

from .fetch import epoch_error

R = messages.ListOffsetsResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


async def handle(broker: Broker, header, request: messages.ListOffsetsRequest):
    loop = asyncio.get_running_loop()
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        partitions = []
        allowed = broker.authorizer.allows(header.session, Operation.DESCRIBE, TOPIC, t.name)
        code: int
        for p in t.partitions:
            partition = topic.partition(p.partition_index) if topic is not None else None
            if partition is None or not allowed:
                if not allowed:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif topic is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = topic.partition_error(p.partition_index)
                partitions.append(
                    R.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=code
                    )
                )
                continue
            log = partition.log
            error = epoch_error(partition, getattr(p, "current_leader_epoch", -1))
            if error:
                partitions.append(
                    R.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=error
                    )
                )
                continue
            if p.timestamp == LATEST and header.api_version >= 2 and request.isolation_level == 1:
                timestamp, offset = -1, partition.last_stable_offset
            elif p.timestamp == LATEST:
                timestamp, offset = -1, partition.high_watermark
            else:
                timestamp, offset = await loop.run_in_executor(
                    broker.read_pool, _lookup, log, p.timestamp
                )
            partitions.append(
                R.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.NONE,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=max(partition.leader_epoch, 0),
                )
            )
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=partitions))
    return R(throttle_time_ms=0, topics=topics)


def _lookup(log, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) for a ListOffsets target (runs in a read thread)."""
    if timestamp == LATEST:
        return -1, log.log_end_offset
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, log.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        return log.max_timestamp()
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    base_offset, batch = found
    try:
        stored = decode_records(memoryview(batch))
    except (CorruptRecordError, UnsupportedCompressionError):
        return -1, base_offset  # the batch cannot be read here: its start is the best answer
    for offset, record_timestamp, *_ in stored:
        if record_timestamp >= timestamp and offset >= log.log_start_offset:
            return record_timestamp, offset
    return -1, base_offset
