"""A KIP-848 consumer group in ``__consumer_offsets``, in Kafka's records
(``modern_records``): what ``records`` writes and ``restore`` reads back.

The group's own records: ConsumerGroupMetadata (the group epoch and the hash of its
subscribed topics' metadata, ``ModernGroup.metadata_hash``) and
ConsumerGroupTargetAssignmentMetadata (the assignment epoch). A member's: its
ConsumerGroupMemberMetadata (ids, subscription, assignor, rebalance timeout), its
ConsumerGroupTargetAssignmentMember (its target, once one is computed) and its
ConsumerGroupCurrentMemberAssignment (epoch, previous epoch, state, the partitions it was
given and those it still has to revoke). ``restore`` makes the member own what it was given
and what it must still revoke, and sends it its assignment again at its next heartbeat (its
last answer may have been lost with the old coordinator).
"""

from __future__ import annotations

import uuid
from typing import Any

from headrace.protocol import messages

from . import modern_records as r
from .consumer_group import ConsumerGroup, ConsumerMember

STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2  # Kafka's MemberState

CV = messages.ConsumerGroupCurrentMemberAssignmentValue
TV = messages.ConsumerGroupTargetAssignmentMemberValue


def by_topic(parts, cls) -> list:
    """(topic id, partition) pairs as Kafka's per-topic structs ``cls``, in order."""
    topics: dict[uuid.UUID, list[int]] = {}
    for tid, p in parts:
        topics.setdefault(tid, []).append(p)
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(topics.items())]


def from_topics(topics) -> set[tuple[uuid.UUID, int]]:
    return {(t.topic_id, p) for t in topics for p in t.partitions}


def records(group: ConsumerGroup, part: str | None) -> dict[bytes, bytes]:
    """The records of the group itself (``part`` None) or of its member ``part``."""
    gid = group.group_id
    if part is None:
        return {
            r.key(r.CONSUMER_METADATA, gid): r.value(
                messages.ConsumerGroupMetadataValue(
                    epoch=group.epoch, metadata_hash=group.metadata_hash
                )
            ),
            r.key(r.CONSUMER_TARGET_METADATA, gid): r.value(
                messages.ConsumerGroupTargetAssignmentMetadataValue(
                    assignment_epoch=group.assignment_epoch
                )
            ),
        }
    m = group.members[part]
    out = {
        r.key(r.CONSUMER_MEMBER, gid, part): r.value(
            messages.ConsumerGroupMemberMetadataValue(
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                subscribed_topic_regex=m.regex,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                server_assignor=m.assignor,
                classic_member_metadata=None,  # (as Kafka writes a member of this protocol)
            )
        )
    }
    target = group.target.get(part)
    if target is not None:
        out[r.key(r.CONSUMER_TARGET_MEMBER, gid, part)] = r.value(
            TV(topic_partitions=by_topic(target, TV.TopicPartition))
        )
    pending = m.owned - m.assigned
    if pending:
        state = UNREVOKED_PARTITIONS
    elif target is not None and m.assigned != target:
        state = UNRELEASED_PARTITIONS
    else:
        state = STABLE
    out[r.key(r.CONSUMER_CURRENT, gid, part)] = r.value(
        CV(
            member_epoch=m.epoch,
            previous_member_epoch=m.previous_epoch,
            state=state,
            assigned_partitions=by_topic(m.assigned, CV.TopicPartitions),
            partitions_pending_revocation=by_topic(pending, CV.TopicPartitions),
        )
    )
    return out


def restore(group_id: str, stored: r.Stored) -> ConsumerGroup:
    """The group its records describe (``stored``: part -> key -> value, as replayed); its
    members' timers are not started. DecodeError when a record is malformed."""
    group = ConsumerGroup(group_id)
    own = r.values(stored, None)
    meta: Any = own.get(r.CONSUMER_METADATA)
    group.epoch = meta.epoch
    group.metadata_hash = meta.metadata_hash
    target_meta: Any = own.get(r.CONSUMER_TARGET_METADATA)
    group.assignment_epoch = target_meta.assignment_epoch if target_meta else 0
    for part in stored:
        if part is None:
            continue
        values = r.values(stored, part)
        mm: Any = values.get(r.CONSUMER_MEMBER)
        if mm is None:
            continue  # a member's leftovers without its metadata: not a member
        m = ConsumerMember(part, mm.client_id)
        m.client_host = mm.client_host
        m.instance_id, m.rack_id = mm.instance_id, mm.rack_id
        m.subscribed = sorted(mm.subscribed_topic_names)
        m.regex, m.assignor = mm.subscribed_topic_regex, mm.server_assignor
        m.rebalance_timeout_ms = mm.rebalance_timeout_ms
        current: Any = values.get(r.CONSUMER_CURRENT)
        if current is not None:
            m.epoch, m.previous_epoch = current.member_epoch, current.previous_member_epoch
            m.assigned = from_topics(current.assigned_partitions)
            m.owned = m.assigned | from_topics(current.partitions_pending_revocation)
        target: Any = values.get(r.CONSUMER_TARGET_MEMBER)
        if target is not None:
            group.target[part] = from_topics(target.topic_partitions)
        group.members[part] = m
    if group.members:
        group.assignor_name = next(
            (m.assignor for m in group.members.values() if m.assignor), "uniform"
        )
    group.stored = {part: dict(recs) for part, recs in stored.items()}
    return group
