"""DeleteTopics (key 20), versions 1-6: by name, or from v6 by name or topic ID.

A deleted topic disappears from metadata at once; its directories are renamed with a
``-delete`` suffix and removed (leftovers are removed at the next start); in a cluster its
znode is deleted and every broker does this for its partitions. The group coordinator (of
every broker) is then told, and purges every group's committed offsets for the topic (with
tombstones), so that a topic re-created under the same name is consumed from its start; so is
the transaction coordinator, whose open transactions drop their pending offsets for it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

R = messages.DeleteTopicsResponse


async def handle(broker: Broker, header, request: messages.DeleteTopicsRequest):
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        topic = broker.topics.find(name, topic_id)
        result = R.DeletableTopicResult(name=name, error_code=ErrorCode.NONE)
        if topic_id is not None:
            result.topic_id = topic_id
        results.append(result)
        known = topic.name if topic is not None else name
        if known is not None and not broker.authorizer.allows(
            header.session, Operation.DELETE, TOPIC, known
        ):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if topic is None:
            result.error_code = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name is not None
                else ErrorCode.UNKNOWN_TOPIC_ID
            )
            continue
        if not broker.config["delete.topic.enable"]:
            result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
            continue
        result.name, result.topic_id = topic.name, topic.topic_id
        try:
            await broker.topics.delete(topic)
        except OSError as e:  # topics.json could not be saved: the topic stays
            result.error_code, result.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(e)
        except TopicChangeError as e:
            result.error_code, result.error_message = e.error_code, e.message
    return R(throttle_time_ms=0, responses=results)
