"""CreatePartitions (key 37), versions 0-3: add partitions to a topic (never remove)."""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

API_KEY = ApiKey.CREATE_PARTITIONS
MIN_VERSION, MAX_VERSION = 0, 3

R = messages.CreatePartitionsResponse


async def handle(broker, header, request):
    results = []
    for t in request.topics:
        result = R.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.NONE)
        results.append(result)
        topic = broker.topics.get(t.name)
        current = len(topic.partitions) if topic else 0
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"The topic '{t.name}' does not exist."
        elif t.count <= current:
            result.error_code = ErrorCode.INVALID_PARTITIONS
            result.error_message = f"Topic currently has {current} partitions, {t.count} would not be an increase."
        elif t.assignments is not None and (
            len(t.assignments) != t.count - current
            or any(a.broker_ids != [broker.node_id] for a in t.assignments)
        ):
            result.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
            result.error_message = f"Every new partition must be on broker {broker.node_id}, the only one."
        elif not request.validate_only:
            await broker.topics.add_partitions(topic, t.count)
    return R(throttle_time_ms=0, results=results)
