"""A KIP-932 share group in ``__consumer_offsets``, in Kafka's records (``modern_records``):
what ``records`` writes and ``restore`` reads back.

The group's own records: ShareGroupMetadata (group epoch, metadata hash),
ShareGroupTargetAssignmentMetadata (assignment epoch) and, once it has share state,
ShareGroupStatePartitionMetadata: the partitions whose share state is initialized at the
share coordinator (``ShareGroup.state_partitions``), those being initialized
(``ShareGroup.initializing``) and the topics being deleted (none here: a deletion is one
step). A member's: ShareGroupMemberMetadata (rack, client id and host, subscribed topic
names), ShareGroupTargetAssignmentMember and ShareGroupCurrentMemberAssignment (epochs and
the partitions it was given; a share member has no revocation, so its state is always
STABLE).
"""

from __future__ import annotations

from typing import Any

from headrace.protocol import messages

from . import modern_records as r
from .consumer_records import by_topic, from_topics
from .share_group import ShareGroup, ShareMember

SV = messages.ShareGroupStatePartitionMetadataValue
CV = messages.ShareGroupCurrentMemberAssignmentValue
TV = messages.ShareGroupTargetAssignmentMemberValue


def records(group: ShareGroup, part: str | None, names) -> dict[bytes, bytes]:
    """The records of the group itself (``part`` None) or of its member ``part``;
    ``names(topic id)`` is a topic's name ("" when it is gone)."""
    gid = group.group_id
    if part is None:
        out = {
            r.key(r.SHARE_METADATA, gid): r.value(
                messages.ShareGroupMetadataValue(
                    epoch=group.epoch, metadata_hash=group.metadata_hash
                )
            ),
            r.key(r.SHARE_TARGET_METADATA, gid): r.value(
                messages.ShareGroupTargetAssignmentMetadataValue(
                    assignment_epoch=group.assignment_epoch
                )
            ),
        }
        if group.state_partitions or group.initializing:

            def topics(held: dict) -> list:
                return [
                    SV.TopicPartitionsInfo(topic_id=t, topic_name=names(t), partitions=sorted(ps))
                    for t, ps in sorted(held.items())
                    if ps
                ]

            out[r.key(r.SHARE_STATE_PARTITIONS, gid)] = r.value(
                SV(
                    initializing_topics=topics(group.initializing),
                    initialized_topics=topics(group.state_partitions),
                    deleting_topics=[],
                )
            )
        return out
    m = group.members[part]
    out = {
        r.key(r.SHARE_MEMBER, gid, part): r.value(
            messages.ShareGroupMemberMetadataValue(
                rack_id=m.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
            )
        ),
        r.key(r.SHARE_CURRENT, gid, part): r.value(
            CV(
                member_epoch=m.epoch,
                previous_member_epoch=m.previous_epoch,
                state=0,
                assigned_partitions=by_topic(m.assigned, CV.TopicPartitions),
            )
        ),
    }
    target = group.target.get(part)
    if target is not None:
        out[r.key(r.SHARE_TARGET_MEMBER, gid, part)] = r.value(
            TV(topic_partitions=by_topic(target, TV.TopicPartition))
        )
    return out


def restore(group_id: str, stored: r.Stored) -> ShareGroup:
    """The group its records describe; its members' timers are not started. DecodeError
    when a record is malformed."""
    group = ShareGroup(group_id)
    own = r.values(stored, None)
    meta: Any = own[r.SHARE_METADATA]
    group.epoch, group.metadata_hash = meta.epoch, meta.metadata_hash
    target_meta: Any = own.get(r.SHARE_TARGET_METADATA)
    group.assignment_epoch = target_meta.assignment_epoch if target_meta else group.epoch
    state: Any = own.get(r.SHARE_STATE_PARTITIONS)
    if state is not None:
        for t in state.initialized_topics:
            group.state_partitions.setdefault(t.topic_id, set()).update(t.partitions)
        for t in state.initializing_topics:
            group.initializing.setdefault(t.topic_id, set()).update(t.partitions)
    for part in stored:
        if part is None:
            continue
        values = r.values(stored, part)
        mm: Any = values.get(r.SHARE_MEMBER)
        if mm is None:
            continue
        m = ShareMember(part, mm.client_id, mm.client_host)
        m.rack_id = mm.rack_id
        m.subscribed = sorted(mm.subscribed_topic_names)
        current: Any = values.get(r.SHARE_CURRENT)
        if current is not None:
            m.epoch, m.previous_epoch = current.member_epoch, current.previous_member_epoch
            m.assigned = from_topics(current.assigned_partitions)
        target: Any = values.get(r.SHARE_TARGET_MEMBER)
        if target is not None:
            group.target[part] = from_topics(target.topic_partitions)
        group.members[part] = m
    group.stored = {part: dict(recs) for part, recs in stored.items()}
    return group
