"""A KIP-1071 streams group in ``__consumer_offsets``, in Kafka's records
(``modern_records``): what ``records`` writes and ``restore`` reads back.

The group's own records: StreamsGroupMetadata (group epoch; the hash of what its topology
was configured from, ``ModernGroup.metadata_hash``; the validated topology epoch; the last
assignment's ``num.standby.replicas``), StreamsGroupTopology (the topology, once a member
sent it) and StreamsGroupTargetAssignmentMetadata (assignment epoch). A member's:
StreamsGroupMemberMetadata (ids, rack, rebalance timeout, topology epoch, process id, user
endpoint, client tags), StreamsGroupTargetAssignmentMember (its target active and standby
tasks) and StreamsGroupCurrentMemberAssignment (epochs, state, its tasks, each active one
with the epoch it was given at, and those it still has to revoke). The configured topology
is not stored: it is computed again from the topology and the cluster's topics at the next
heartbeat, and the stored hash tells whether the topics changed meanwhile.
"""

from __future__ import annotations

from typing import Any

from headrace.protocol import messages

from . import modern_records as r
from .streams_group import STABLE, UNRELEASED_TASKS, UNREVOKED_TASKS, StreamsGroup, StreamsMember
from .streams_topology import Subtopology, TopicInfo, Topology

STATES = {STABLE: 1, UNREVOKED_TASKS: 2, UNRELEASED_TASKS: 3}  # Kafka's streams MemberState
FROM_STATES = {v: k for k, v in STATES.items()}
STANDBY = "num.standby.replicas"

MV = messages.StreamsGroupMetadataValue
TV = messages.StreamsGroupTopologyValue
CV = messages.StreamsGroupCurrentMemberAssignmentValue
TMV = messages.StreamsGroupTargetAssignmentMemberValue
MMV = messages.StreamsGroupMemberMetadataValue


def _task_ids(tasks, cls, epochs: dict | None = None) -> list:
    """Tasks, (subtopology, partition), as Kafka's TaskIds structs ``cls`` (with each active
    task's assignment epoch when ``epochs`` is given)."""
    by_sub: dict[str, list[int]] = {}
    for sub, p in tasks:
        by_sub.setdefault(sub, []).append(p)
    out = []
    for sub, ps in sorted(by_sub.items()):
        ps.sort()
        if epochs is None:
            out.append(cls(subtopology_id=sub, partitions=ps))
        else:
            out.append(
                cls(
                    subtopology_id=sub,
                    partitions=ps,
                    assignment_epochs=[epochs[(sub, p)] for p in ps],
                )
            )
    return out


def _tasks(ids) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in ids for p in t.partitions}


def _epochs(ids, default: int) -> dict[tuple[str, int], int]:
    out = {}
    for t in ids:
        epochs = t.assignment_epochs or [default] * len(t.partitions)
        for p, e in zip(t.partitions, epochs, strict=False):
            out[(t.subtopology_id, p)] = e
    return out


def _topic_info(t: TopicInfo):
    return TV.TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=t.replication_factor,
        topic_configs=[TV.TopicConfig(key=k, value=v) for k, v in t.configs],
    )


def _topology(topology: Topology):
    subs = []
    for s in topology.subtopologies:
        sources = list(s.source_topics)
        repartition = [t.name for t in s.repartition_source_topics]
        groups = [
            TV.CopartitionGroup(
                source_topics=[i for i, n in enumerate(sources) if n in g],
                source_topic_regex=[],
                repartition_source_topics=[i for i, n in enumerate(repartition) if n in g],
            )
            for g in s.copartition_groups
        ]
        subs.append(
            TV.Subtopology(
                subtopology_id=s.subtopology_id,
                source_topics=sources,
                source_topic_regex=[],
                state_changelog_topics=[_topic_info(t) for t in s.state_changelog_topics],
                repartition_sink_topics=list(s.repartition_sink_topics),
                repartition_source_topics=[_topic_info(t) for t in s.repartition_source_topics],
                copartition_groups=groups,
            )
        )
    return TV(epoch=topology.epoch, subtopologies=subs)


def records(group: StreamsGroup, part: str | None) -> dict[bytes, bytes]:
    """The records of the group itself (``part`` None) or of its member ``part``."""
    gid = group.group_id
    if part is None:
        out = {
            r.key(r.STREAMS_METADATA, gid): r.value(
                MV(
                    epoch=group.epoch,
                    metadata_hash=group.metadata_hash,
                    validated_topology_epoch=group.validated_epoch,
                    last_assignment_configs=[
                        MV.LastAssignmentConfig(key=STANDBY, value=str(group.standby_replicas))
                    ],
                )
            ),
            r.key(r.STREAMS_TARGET_METADATA, gid): r.value(
                messages.StreamsGroupTargetAssignmentMetadataValue(
                    assignment_epoch=group.assignment_epoch
                )
            ),
        }
        if group.topology is not None:
            out[r.key(r.STREAMS_TOPOLOGY, gid)] = r.value(_topology(group.topology))
        return out
    m = group.members[part]
    out = {
        r.key(r.STREAMS_MEMBER, gid, part): r.value(
            MMV(
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                topology_epoch=m.topology_epoch,
                process_id=m.process_id,
                user_endpoint=None
                if m.user_endpoint is None
                else MMV.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
                client_tags=[
                    MMV.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())
                ],
            )
        ),
        r.key(r.STREAMS_CURRENT, gid, part): r.value(
            CV(
                member_epoch=m.epoch,
                previous_member_epoch=m.previous_epoch,
                state=STATES.get(m.state, 127),
                active_tasks=_task_ids(m.active, CV.TaskIds, m.active),
                standby_tasks=_task_ids(m.standby, CV.TaskIds),
                warmup_tasks=[],
                active_tasks_pending_revocation=_task_ids(
                    m.revoking_active, CV.TaskIds, m.revoking_active
                ),
                standby_tasks_pending_revocation=_task_ids(m.revoking_standby, CV.TaskIds),
                warmup_tasks_pending_revocation=[],
            )
        ),
    }
    target = group.target.get(part)
    if target is not None:
        active, standby = target
        out[r.key(r.STREAMS_TARGET_MEMBER, gid, part)] = r.value(
            TMV(
                active_tasks=_task_ids(active, TMV.TaskIds),
                standby_tasks=_task_ids(standby, TMV.TaskIds),
                warmup_tasks=[],
            )
        )
    return out


def _from_info(t) -> TopicInfo:
    return TopicInfo(
        t.name,
        t.partitions,
        t.replication_factor,
        tuple(sorted((c.key, c.value) for c in t.topic_configs)),
    )


def _from_topology(v) -> Topology:
    subs = []
    for s in v.subtopologies:
        sources = tuple(s.source_topics)
        repartition = tuple(_from_info(t) for t in s.repartition_source_topics)
        groups = tuple(
            frozenset(
                {sources[i] for i in g.source_topics if 0 <= i < len(sources)}
                | {
                    repartition[i].name
                    for i in g.repartition_source_topics
                    if 0 <= i < len(repartition)
                }
            )
            for g in s.copartition_groups
        )
        subs.append(
            Subtopology(
                s.subtopology_id,
                sources,
                tuple(s.repartition_sink_topics),
                repartition,
                tuple(_from_info(t) for t in s.state_changelog_topics),
                groups,
            )
        )
    return Topology(v.epoch, tuple(sorted(subs, key=lambda s: s.subtopology_id)))


def restore(group_id: str, stored: r.Stored) -> StreamsGroup:
    """The group its records describe; its members' timers are not started. DecodeError
    when a record is malformed."""
    group = StreamsGroup(group_id)
    own = r.values(stored, None)
    meta: Any = own[r.STREAMS_METADATA]
    group.epoch, group.metadata_hash = meta.epoch, meta.metadata_hash
    group.validated_epoch = meta.validated_topology_epoch
    for c in meta.last_assignment_configs or ():
        if c.key == STANDBY:
            group.standby_replicas = int(c.value)
    target_meta: Any = own.get(r.STREAMS_TARGET_METADATA)
    group.assignment_epoch = target_meta.assignment_epoch if target_meta else group.epoch
    topology: Any = own.get(r.STREAMS_TOPOLOGY)
    if topology is not None:
        group.topology = _from_topology(topology)
    for part in stored:
        if part is None:
            continue
        values = r.values(stored, part)
        mm: Any = values.get(r.STREAMS_MEMBER)
        if mm is None:
            continue
        m = StreamsMember(part)
        m.instance_id, m.rack_id = mm.instance_id, mm.rack_id
        m.client_id, m.client_host = mm.client_id, mm.client_host
        m.rebalance_timeout_ms, m.topology_epoch = mm.rebalance_timeout_ms, mm.topology_epoch
        m.process_id = mm.process_id
        if mm.user_endpoint is not None:
            m.user_endpoint = (mm.user_endpoint.host, mm.user_endpoint.port)
        m.client_tags = {kv.key: kv.value for kv in mm.client_tags}
        current: Any = values.get(r.STREAMS_CURRENT)
        if current is not None:
            m.epoch, m.previous_epoch = current.member_epoch, current.previous_member_epoch
            m.state = FROM_STATES.get(current.state, STABLE)
            m.active = _epochs(current.active_tasks, m.epoch)
            m.standby = _tasks(current.standby_tasks)
            m.revoking_active = _epochs(current.active_tasks_pending_revocation, m.epoch)
            m.revoking_standby = _tasks(current.standby_tasks_pending_revocation)
        target: Any = values.get(r.STREAMS_TARGET_MEMBER)
        if target is not None:
            group.target[part] = (_tasks(target.active_tasks), _tasks(target.standby_tasks))
        group.members[part] = m
    group.stored = {p: dict(recs) for p, recs in stored.items()}
    return group
