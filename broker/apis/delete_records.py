"""DeleteRecords (key 21), versions 0-2: move a partition's log start offset forward.

Per partition: an offset of -1 means the high watermark; anything else must lie in
[0, high watermark] (OFFSET_OUT_OF_RANGE otherwise). The log start offset only moves forward:
a smaller offset leaves it where it is. Segments wholly below the new start are deleted; the
new start is checkpointed before the answer, so it survives a crash. The answer's low
watermark is the log start offset afterwards. A topic whose cleanup.policy does not include
``delete`` refuses with POLICY_VIOLATION, as Kafka does. The disk work runs in a thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.log.storage_errors import storage_failed
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages
from headrace.storage import OffsetOutOfRange, StorageError

R = messages.DeleteRecordsResponse
HIGH_WATERMARK = -1


async def handle(broker: Broker, header, request: messages.DeleteRecordsRequest):
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        results = []
        allowed = broker.authorizer.allows(header.session, Operation.DELETE, TOPIC, t.name)
        for p in t.partitions:
            result = R.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NONE
            )
            results.append(result)
            if not allowed:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            partition = topic.partition(p.partition_index) if topic is not None else None
            if topic is None or partition is None:
                result.error_code = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if topic is None
                    else topic.partition_error(p.partition_index)
                )
                continue
            if "delete" not in str(topic.setting("cleanup.policy")):
                result.error_code = ErrorCode.POLICY_VIOLATION
                continue
            log = partition.log
            offset = log.log_end_offset if p.offset == HIGH_WATERMARK else p.offset
            if offset < 0:
                result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            try:
                await asyncio.to_thread(log.delete_records_before, offset)
            except OffsetOutOfRange:
                result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            except StorageError as e:
                storage_failed(f"{t.name}-{p.partition_index}", "delete records", e)
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            result.low_watermark = log.log_start_offset
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=results))
    return R(throttle_time_ms=0, topics=topics)
