"""Metadata (key 3), versions 0-13: brokers, topics, partitions and leaders.

On a single broker it leads every partition. In a cluster the brokers, replicas, leaders,
leader epochs, ISRs and the controller come from ZooKeeper (``Cluster``: the topics and each
partition's state znode); a partition whose leader is down, or that has none, has leader -1
and LEADER_NOT_AVAILABLE, and replicas on brokers that are down are listed as offline. Topics
are named (or, from v10, identified by topic ID). An unknown topic is created when
``auto.create.topics.enable`` is on and the request allows it (v4+); otherwise it gets
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

from .group_offsets import INTERNAL_TOPICS
from .topics import TopicCreationError, topic_name_error

API_KEY = ApiKey.METADATA
MIN_VERSION, MAX_VERSION = 0, 13

M = messages.MetadataResponse
# every topic operation is allowed (no authorizer): READ 3 ... ALTER_CONFIGS 11
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def handle(broker, header, request):
    version = header.api_version
    if request.topics is None or (version == 0 and not request.topics):
        return _response(broker, header, broker.topics.all_topics(), [], request)
    found, missing = [], []
    for t in request.topics:
        topic = broker.topics.find(t.name, t.topic_id)
        if topic is not None:
            found.append(topic)
        else:
            missing.append(t)
    creatable = [
        t.name
        for t in missing
        if t.name is not None
        and topic_name_error(t.name) is None
        and broker.config["auto.create.topics.enable"]
        and request.allow_auto_topic_creation
    ]
    if not creatable:
        return _response(broker, header, found, missing, request)
    return _create_then_respond(broker, header, request, found, missing, creatable)


async def _create_then_respond(broker, header, request, found, missing, creatable):
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
    return _response(broker, header, found, still_missing, request)


def _response(broker, header, topics, missing, request):
    include_ops = header.api_version >= 8 and request.include_topic_authorized_operations
    cluster = broker.cluster
    out = []
    for topic in topics:
        record = cluster.topics.get(topic.name) if cluster is not None else None
        out.append(
            M.MetadataResponseTopic(
                error_code=ErrorCode.NONE,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=topic.name in INTERNAL_TOPICS,
                partitions=(
                    _placed(cluster, topic.name, record)
                    if record is not None
                    else [_here(broker.node_id, i) for i in range(topic.count)]
                ),
                **({"topic_authorized_operations": TOPIC_OPERATIONS} if include_ops else {}),
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
    return M(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=out,
    )


def _here(node: int, index: int):
    return M.MetadataResponsePartition(
        error_code=ErrorCode.NONE,
        partition_index=index,
        leader_id=node,
        leader_epoch=0,
        replica_nodes=[node],
        isr_nodes=[node],
        offline_replicas=[],
    )


def _placed(cluster, name: str, record) -> list:
    out = []
    for i in range(len(record.replicas)):
        replicas = record.assigned(i)  # during a move, the adding replicas too (as Kafka)
        leader = cluster.leader(name, i)
        out.append(
            M.MetadataResponsePartition(
                error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=i,
                leader_id=leader,
                leader_epoch=cluster.leader_epoch(name, i),
                replica_nodes=list(replicas),
                isr_nodes=cluster.isr(name, i),
                offline_replicas=[r for r in replicas if r not in cluster.brokers],
            )
        )
    return out
