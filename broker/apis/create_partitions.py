"""CreatePartitions (key 37), versions 0-3: add partitions to a topic (never remove).

A topic's growth is all or nothing: when a new partition cannot be made (too many open
files, a full disk...) none is kept and the topic's result carries the error and its cause.
In a cluster the new partitions are placed over the live brokers (or where the request's
assignments say: one live broker each) and written to the topic's znode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import logging

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.log.topic import TopicCreationError
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .create_topics import check_assignment

log = logging.getLogger("headrace")

R = messages.CreatePartitionsResponse


async def handle(broker: Broker, header, request: messages.CreatePartitionsRequest):
    results = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        if broker.authorizer.allows(header.session, Operation.ALTER, TOPIC, t.name):
            error, message = _check(broker, topic, t)
        else:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        result = R.CreatePartitionsTopicResult(name=t.name, error_code=error, error_message=message)
        results.append(result)
        if not error and topic is not None and not request.validate_only:
            replicas = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            try:
                await broker.topics.add_partitions(topic, t.count, replicas)
            except (TopicCreationError, TopicChangeError) as e:
                result.error_code, result.error_message = e.error_code, e.message
                log.warning("CreatePartitions: %s", e.message)
    return R(throttle_time_ms=0, results=results)


def _check(broker: Broker, topic, t) -> tuple[int, str | None]:
    """(error code, message) for a request to grow ``topic`` to ``t.count`` partitions."""
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t.name}' does not exist."
    current = topic.count
    if t.count <= current:
        return (
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, {t.count} would not be an increase.",
        )
    if t.assignments is not None:
        if len(t.assignments) != t.count - current:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{len(t.assignments)} assignments for {t.count - current} new partitions.",
            )
        for a in t.assignments:
            problem = check_assignment(broker, a.broker_ids)
            if problem:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    return ErrorCode.NONE, None
