"""StreamsGroupDescribe (key 89), versions 0-1: streams groups, their topology, members and
each member's current and target assignment, the group and assignment epochs, the state
(Empty, NotReady, Assigning, Reconciling, Stable) and the assignor ("sticky").

The topology is described as the group configured it (internal topics with the partition
counts decided for them) once it is ready, else as the first member sent it. A group id that
is not a streams group gets GROUP_ID_NOT_FOUND with Kafka's messages ("Group G not found.",
"Group G is not a streams group."). DESCRIBE on the group is needed (else
GROUP_AUTHORIZATION_FAILED). With ``streams.version`` at 0 every group gets
UNSUPPORTED_VERSION. Topology descriptions (v1's ``IncludeTopologyDescription``) need Kafka's
description plugin, which Headrace does not have: none is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import STREAMS_VERSION
from headrace.broker.coordinator.group.streams_assignor import NAME as ASSIGNOR
from headrace.broker.coordinator.group.streams_topology import TopicInfo
from headrace.protocol import messages

from .describe_groups import described, group_of_kind
from .streams_group_heartbeat import OFF

R = messages.StreamsGroupDescribeResponse


def _ids(tasks) -> list:
    by_sub: dict[str, list[int]] = {}
    for sub, p in tasks:
        by_sub.setdefault(sub, []).append(p)
    return [R.TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(by_sub.items())]


def _assignment(active, standby):
    return R.Assignment(active_tasks=_ids(active), standby_tasks=_ids(standby), warmup_tasks=[])


def _offsets(offsets: dict) -> list:
    return [
        R.TaskOffset(subtopology_id=s, partition=p, offset=o)
        for (s, p), o in sorted(offsets.items())
    ]


def _topology(group):
    topology = group.topology
    if topology is None:
        return None
    configured = group.configured
    decided: dict[str, int] = {}
    if configured is not None and configured.ready and configured.tasks is not None:
        for s in topology.subtopologies:
            for t in s.state_changelog_topics:
                decided[t.name] = configured.tasks[s.subtopology_id]
            for t in s.repartition_source_topics:
                decided[t.name] = t.partitions or configured.tasks[s.subtopology_id]

    def info(t: TopicInfo):
        return R.TopicInfo(
            name=t.name,
            partitions=decided.get(t.name, t.partitions),
            replication_factor=t.replication_factor,
            topic_configs=[R.KeyValue(key=k, value=v) for k, v in t.configs],
        )

    return R.Topology(
        epoch=topology.epoch,
        subtopologies=[
            R.Subtopology(
                subtopology_id=s.subtopology_id,
                source_topics=sorted(s.source_topics),
                repartition_sink_topics=sorted(s.repartition_sink_topics),
                state_changelog_topics=[
                    info(t) for t in sorted(s.state_changelog_topics, key=lambda t: t.name)
                ],
                repartition_source_topics=[
                    info(t) for t in sorted(s.repartition_source_topics, key=lambda t: t.name)
                ],
            )
            for s in topology.subtopologies
        ],
    )


def handle(broker: Broker, header, request: messages.StreamsGroupDescribeRequest):
    asked = request.include_authorized_operations
    session = header.session
    groups = []
    off = OFF if broker.features.level(STREAMS_VERSION) < 1 else None
    for group_id in request.group_ids:
        group, ops, refused = group_of_kind(
            broker,
            session,
            group_id,
            asked,
            "streams",
            broker.groups.streams.groups,
            R.DescribedGroup,
            off,
        )
        if refused is not None:
            groups.append(refused)
            continue
        members = []
        for m in group.members.values():
            target = group.target.get(m.member_id, (set(), set()))
            members.append(
                R.Member(
                    member_id=m.member_id,
                    member_epoch=m.epoch,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    topology_epoch=m.topology_epoch,
                    process_id=m.process_id,
                    user_endpoint=(
                        None
                        if m.user_endpoint is None
                        else R.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1])
                    ),
                    client_tags=[
                        R.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())
                    ],
                    task_offsets=_offsets(m.task_offsets),
                    task_end_offsets=_offsets(m.task_end_offsets),
                    assignment=_assignment(m.active, m.standby),
                    target_assignment=_assignment(*target),
                    is_classic=False,
                )
            )
        topology = _topology(group)
        groups.append(described(R.DescribedGroup, group, ops, ASSIGNOR, members, topology=topology))
    return R(throttle_time_ms=0, groups=groups)
