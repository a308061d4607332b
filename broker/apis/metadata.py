"""Metadata (key 3), versions 0-13: brokers, topics, partitions and leaders.

On a single broker it leads every partition. In a cluster the brokers, replicas, leaders,
leader epochs, ISRs and the controller come from ZooKeeper (``Cluster``: the topics and each
partition's state znode); a partition whose leader is down, or that has none, has leader -1
and LEADER_NOT_AVAILABLE, and replicas on brokers that are down are listed as offline. Topics
are named (or, from v10, identified by topic ID). An unknown topic is created when
``auto.create.topics.enable`` is on and the request allows it (v4+); otherwise it gets
UNKNOWN_TOPIC_OR_PARTITION. A topic without a name before v12 (where the response's name is
not nullable) closes the connection, as Kafka refuses it with INVALID_REQUEST.

Authorization (Kafka's): a request for every topic lists only those the principal may
DESCRIBE; a named topic it may not describe gets TOPIC_AUTHORIZATION_FAILED, whether it
exists or not. Creating a missing topic needs CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED. ``topic_authorized_operations`` (v8+) and
``cluster_authorized_operations`` (v8-10) hold what the principal may do, when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_offsets import INTERNAL_TOPICS
from headrace.broker.log.topic import TopicCreationError, topic_name_error
from headrace.broker.security.authorizer import (
    CLUSTER,
    CLUSTER_NAME,
    OMITTED_OPERATIONS,
    TOPIC,
    Operation,
)
from headrace.pipeline import CloseConnection
from headrace.protocol import ErrorCode, messages

M = messages.MetadataResponse


def handle(broker: Broker, header, request: messages.MetadataRequest):
    version = header.api_version
    authorizer, session = broker.authorizer, header.session
    if request.topics is None or (version == 0 and not request.topics):
        shown = [
            t
            for t in broker.topics.all_topics()
            if authorizer.allows(session, Operation.DESCRIBE, TOPIC, t.name)
        ]
        return _response(broker, header, shown, [], request)
    if version < 12 and any(t.name is None for t in request.topics):
        raise CloseConnection(f"Metadata v{version}: a topic without a name (topic IDs need v12)")
    found, missing, denied = [], [], []
    for t in request.topics:
        topic = broker.topics.find(t.name, t.topic_id)
        name = topic.name if topic is not None else t.name
        if name is not None and not authorizer.allows(session, Operation.DESCRIBE, TOPIC, name):
            denied.append(t)
        elif topic is not None:
            found.append(topic)
        else:
            missing.append(t)
    creatable = []
    if broker.config["auto.create.topics.enable"] and request.allow_auto_topic_creation:
        anywhere = authorizer.allows_cluster(session, Operation.CREATE)
        for t in list(missing):
            if t.name is None or topic_name_error(t.name) is not None:
                continue
            if anywhere or authorizer.allows(session, Operation.CREATE, TOPIC, t.name):
                creatable.append(t.name)
            else:
                missing.remove(t)
                denied.append(t)
    if not creatable:
        return _response(broker, header, found, missing, request, denied)
    return _create_then_respond(broker, header, request, found, missing, creatable, denied)


async def _create_then_respond(broker: Broker, header, request, found, missing, creatable, denied):
    partitions = int(broker.config["num.partitions"])
    still_missing = []
    for t in missing:
        if t.name in creatable:
            topic = broker.topics.get(t.name)
            if topic is None:
                try:
                    topic = await broker.topics.create(t.name, partitions, {})
                except FileExistsError:
                    topic = broker.topics.get(t.name)
                except TopicCreationError:
                    topic = None  # undone; the topic is reported missing
            if topic is not None:
                found.append(topic)
                continue
        still_missing.append(t)
    return _response(broker, header, found, still_missing, request, denied)


def _response(
    broker: Broker, header, topics, missing, request: messages.MetadataRequest, denied=()
):
    version = header.api_version
    authorizer, session = broker.authorizer, header.session
    include_ops = version >= 8 and request.include_topic_authorized_operations
    cluster = broker.cluster
    out = []
    for topic in topics:
        record = cluster.topics.get(topic.name)
        if record is None:  # deleted a moment ago: the table forgets it next
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.append(M.MetadataResponseTopic(error_code=code, name=topic.name))
            continue
        out.append(
            M.MetadataResponseTopic(
                error_code=ErrorCode.NONE,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=topic.name in INTERNAL_TOPICS,
                partitions=_placed(cluster, topic.name, record),
                topic_authorized_operations=(
                    authorizer.operations(session, TOPIC, topic.name)
                    if include_ops
                    else OMITTED_OPERATIONS
                ),
            )
        )
    for t in denied:
        out.append(
            M.MetadataResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                name=t.name,
                topic_id=t.topic_id,
                is_internal=t.name in INTERNAL_TOPICS,
            )
        )
    for t in missing:
        if t.name is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID
        elif topic_name_error(t.name):
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        out.append(M.MetadataResponseTopic(error_code=code, name=t.name, topic_id=t.topic_id))
    brokers = [
        M.MetadataResponseBroker(node_id=b, host=e.host, port=e.port, rack=e.rack)
        for b, e in broker.brokers(header.session.listener).items()
    ]
    cluster_ops = OMITTED_OPERATIONS
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = authorizer.operations(session, CLUSTER, CLUSTER_NAME)
    return M(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=out,
        cluster_authorized_operations=cluster_ops,
    )


def _placed(cluster, name: str, record) -> list:
    return [
        M.MetadataResponsePartition(
            error_code=ErrorCode.NONE if p["leader_id"] >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            **p,
        )
        for p in partition_states(cluster, name, record, range(len(record.replicas)))
    ]


def partition_states(cluster, name: str, record, indexes) -> list[dict]:
    """Each partition's leader, leader epoch, replicas, ISR and offline replicas, as the
    fields of Metadata's (and DescribeTopicPartitions') partition answers."""
    out = []
    for i in indexes:
        replicas = record.assigned(i)  # during a move, the adding replicas too (as Kafka)
        out.append(
            {
                "partition_index": i,
                "leader_id": cluster.leader(name, i),
                "leader_epoch": cluster.leader_epoch(name, i),
                "replica_nodes": list(replicas),
                "isr_nodes": cluster.isr(name, i),
                "offline_replicas": [r for r in replicas if r not in cluster.brokers],
            }
        )
    return out
