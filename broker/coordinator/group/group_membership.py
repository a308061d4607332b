"""A classic group's membership in ``__consumer_offsets``, as Kafka stores it.

The group's metadata (generation, protocol, leader, each member's id, timeouts, subscription
and assignment) is written to the group's partition when a rebalance completes (the leader's
SyncGroup is answered once it is flushed), when the group becomes Empty and when a static
member takes over its old place; a removed group gets a tombstone. Writes of one group are
chained, so they reach the log in the order they were made. At start-up ``restore`` brings a
group back as its last record left it: Stable with its members, or Empty.
"""

from __future__ import annotations

import asyncio
import logging

from headrace.protocol import ErrorCode

from . import group_offsets
from .classic_group import ClassicGroup, Member, MemberSpec
from .group_offsets import StoredGroup, StoredMember
from .group_state import STABLE

log = logging.getLogger("headrace.groups")

E = ErrorCode


class MembershipLog:
    def __init__(self, store) -> None:
        self.store = store  # the OffsetStore: same partition, same write path
        self._writes: dict[str, asyncio.Future] = {}  # group id -> its latest metadata write

    def persist(self, group: ClassicGroup, tombstone: bool = False) -> asyncio.Future:
        """Write the group's metadata record (or its tombstone) after the group's earlier ones;
        the future gives an error code once it is flushed."""
        value = None if tombstone else group_offsets.group_value(stored(group))
        group_id = group.group_id
        task = asyncio.ensure_future(self._write(group_id, value, self._writes.get(group_id)))
        self._writes[group_id] = task

        def forget(t):
            if self._writes.get(group_id) is t:
                del self._writes[group_id]

        task.add_done_callback(forget)
        return task

    async def _write(self, group_id: str, value: bytes | None, previous) -> int:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            partition = await self.store.partition(group_id)
            error = self.store.append(partition, [(group_offsets.group_key(group_id), value)])
            if error:
                log.warning("group %s: storing its metadata failed (error %d)", group_id, error)
                return error
            return await self.store.flush(partition)
        except Exception:
            log.exception("group %s: storing its metadata failed", group_id)
            return E.KAFKA_STORAGE_ERROR


def stored(group: ClassicGroup) -> StoredGroup:
    return StoredGroup(
        group.protocol_type or "",
        group.generation,
        group.protocol_name,
        group.leader,
        group.state_since_ms,
        tuple(
            StoredMember(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(group.protocol_name),
                m.assignment,
            )
            for m in group.members.values()
        ),
    )


def restore(group: ClassicGroup, meta: StoredGroup) -> None:
    """A group as its last metadata record left it: Stable with its members, or Empty. The
    caller starts the members' sessions."""
    group.generation = meta.generation
    group.protocol_type = meta.protocol_type or None
    if not meta.members:
        return
    group.protocol_name = meta.protocol
    for sm in meta.members:
        spec = MemberSpec(
            sm.client_id,
            sm.client_host,
            sm.session_timeout_ms,
            sm.rebalance_timeout_ms,
            meta.protocol_type,
            [(meta.protocol or "", sm.subscription)],
        )
        m = Member(sm.member_id, sm.instance_id, spec)
        m.assignment = sm.assignment
        m.is_new = False
        group.members[m.member_id] = m
        if m.instance_id is not None:
            group.static[m.instance_id] = m.member_id
    group.leader = meta.leader if meta.leader in group.members else next(iter(group.members))
    group.state = STABLE  # loaded, not a transition
    group.state_since_ms = meta.state_timestamp if meta.state_timestamp > 0 else group.clock()
