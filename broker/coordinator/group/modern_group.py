"""What KIP-848 consumer, KIP-932 share and KIP-1071 streams groups have in common: Kafka's
"modern" groups, whose members heartbeat and whose broker assigns.

How this works
--------------
A group has a *group epoch*, bumped whenever what its assignment depends on changes (a
member joins or leaves, a subscription or a member's metadata changes, the subscribed topics
change), and an *assignment epoch*, the group epoch its *target* assignment (member id ->
what the member is to have) was computed at; a heartbeat that finds the assignment epoch
behind computes a new target. ``ModernGroup.remove`` takes a member out, its target with it,
and bumps the group epoch.

A member has its epoch and the one before, and two timers: its session (``timer`` and
``deadline``, kept by ``group_sessions.SessionTimers``) and, for consumer and streams members
told to give something back, the deadline of that revocation (``revoke_timer``).

A group is kept in ``__consumer_offsets`` in Kafka's records (``modern_records``, and each
kind's ``*_records`` module): ``persist`` writes what changed since the group's last write
(``modern_group_log``), ``delete_records`` its tombstones, and a group loaded from them
(``loaded``) gives each member a fresh session, as Kafka does.

``ModernGroupCoordinator`` is the part of each kind's coordinator that is the same: the
kind's groups of this broker's partitions of ``__consumer_offsets``, their members'
sessions, removing a member (it left, its session expired, it revoked too late), cancelling
the timers at ``stop`` and ``unload``, and, for the groups that subscribe to topics by name
(consumer, share), the subscribed topics (``_subscribed_topics``): their ids and partition
counts, the *subscription metadata*, whose change bumps the group epoch unless a bump is
pending already. A streams group's topics are matched by its topology instead
(``streams_topology``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from headrace.broker.background import wall_clock_ms

from .group_configs import GroupConfigs
from .group_sessions import SessionTimers
from .modern_group_log import NOTHING, ModernGroupLog, Write
from .modern_records import Stored

log = logging.getLogger("headrace.groups")

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


class ModernMember:
    __slots__ = (
        "member_id",
        "instance_id",
        "rack_id",
        "client_id",
        "client_host",
        "epoch",
        "previous_epoch",
        "deadline",
        "timer",
        "revoke_timer",
    )

    def __init__(self, member_id: str, client_id: str = "", client_host: str = "") -> None:
        self.member_id = member_id
        self.instance_id: str | None = None  # a static member's (not for share groups)
        self.rack_id: str | None = None
        self.client_id = client_id
        self.client_host = client_host
        self.epoch = 0
        self.previous_epoch = -1
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.revoke_timer: asyncio.TimerHandle | None = None  # while it must give back

    def cancel_timers(self) -> None:
        for t in (self.timer, self.revoke_timer):
            if t is not None:
                t.cancel()
        self.timer = self.revoke_timer = None


class ModernGroup:
    group_type: str
    members: dict[str, Any]  # member id -> the kind's ModernMember
    target: dict[str, Any]  # member id -> what it is to have

    def __init__(self, group_id: str, epoch: int = 0) -> None:
        self.group_id = group_id
        self.epoch = epoch
        self.assignment_epoch = epoch
        self.members = {}
        self.target = {}
        self.empty_since_ms: int | None = None
        self.metadata_hash = 0  # of the subscribed topics' ids and partition counts
        self.stored: Stored = {}  # what its records in the log say (modern_group_log)
        self.stored_epochs = (epoch, epoch)  # (epoch, assignment epoch) at the last write

    def static_member(self, instance_id: str | None) -> Any:
        """The static member of ``instance_id``, or None (also for no instance id)."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def remove(self, member: ModernMember, now_ms: int) -> bool:
        """Take ``member`` out, and its target; the group epoch moves on. False when it is
        not in the group (any more)."""
        if self.members.get(member.member_id) is not member:
            return False
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        self.epoch += 1
        if not self.members:
            self.empty_since_ms = now_ms
        return True

    def cancel_timers(self) -> None:
        for m in self.members.values():
            m.cancel_timers()


G = TypeVar("G", bound=ModernGroup)


class ModernGroupCoordinator(Generic[G]):
    """One kind's groups; ``session_timeout``: the group config of its members' sessions."""

    def __init__(
        self,
        topics,
        configs: GroupConfigs,
        max_size: int,
        session_timeout: str,
        group_log: ModernGroupLog,
        records: Callable[[G, str | None], dict[bytes, bytes]],
        now_ms=wall_clock_ms,
    ) -> None:
        self.topics = topics
        self.group_log = group_log
        self._records = records  # (group, None or member id) -> its records
        self._flushing: set[asyncio.Task] = set()
        self.configs = configs
        self.max_size = max_size
        self.now_ms = now_ms
        self.groups: dict[str, G] = {}
        self.sessions = SessionTimers(
            lambda g, m: self._expire(g, m, "session expired"),
            lambda g, m: configs.value(g.group_id, session_timeout),
        )

    def stop(self) -> None:
        for g in self.groups.values():
            g.cancel_timers()

    def unload(self, group_id: str) -> None:
        """Forget a group (another broker now coordinates it, or it is deleted)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.cancel_timers()

    # the group in __consumer_offsets -------------------------------------------------------

    def persist(self, group: G, member_id: str | None = None) -> Write:
        """Append what changed in ``group``: its own records and ``member_id``'s, or every
        member's when members came or went or the epochs moved (or no member is named)."""
        members = [p for p in group.stored if p is not None]
        complete = (
            member_id is None
            or member_id not in group.members
            or len(members) != len(group.members)
            or group.stored_epochs != (group.epoch, group.assignment_epoch)
            or not all(m in group.members for m in members)
        )
        parts = list(group.members) if complete else [member_id]
        current = {p: self._records(group, p) for p in [None, *parts]}
        write = self.group_log.append(group, current, complete)
        if not write.error:
            group.stored_epochs = (group.epoch, group.assignment_epoch)
        return write

    async def persisted(self, group_id: str, member_id: str | None) -> int:
        """Write what a request changed in ``group_id`` (``member_id``: the member it was
        about) and wait until it is durable; an error code."""
        group = self.groups.get(group_id)
        if group is None:
            return 0
        return await self.group_log.durable(self.persist(group, member_id))

    def delete_records(self, group: ModernGroup) -> Write:
        """Tombstones for the group's records (it is deleted, not moved away)."""
        return self.group_log.delete(group)

    def persist_soon(self, write: Write) -> None:
        """Let ``write`` become durable in the background (a change no request waits for)."""
        if write is NOTHING or write.error:
            return
        task = asyncio.ensure_future(self.group_log.durable(write))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    def loaded(self, group: G) -> None:
        """``group`` was read back from its records: each member gets a fresh session."""
        self.groups[group.group_id] = group
        group.stored_epochs = (group.epoch, group.assignment_epoch)
        if not group.members:
            group.empty_since_ms = self.now_ms()
        for m in group.members.values():
            self.sessions.touch(group, m)

    def _expire(self, group: G, member: ModernMember, why: str) -> None:
        """A timer removes ``member``: the change is written, no request waits for it."""
        self._remove(group, member, why)
        if self.groups.get(group.group_id) is group:
            self.persist_soon(self.persist(group))

    def _remove(self, group: G, member: ModernMember, why: str) -> None:
        member.cancel_timers()
        if group.remove(member, self.now_ms()):
            log.info(
                "%s group %s: member %s %s (epoch %d)",
                group.group_type,
                group.group_id,
                member.member_id,
                why,
                group.epoch,
            )

    def _subscribed_topics(self, group, names: Iterable[str]) -> dict[str, tuple[uuid.UUID, int]]:
        """Those of the topics ``names`` that exist, name -> (topic id, partitions). When they
        changed since ``group``'s last heartbeat (a consumer or share group's
        ``metadata_hash``) the group epoch moves on, unless it is ahead already."""
        topics = {}
        for name in sorted(names):
            t = self.topics.get(name)
            if t is not None:
                topics[name] = (t.topic_id, t.count)
        digest = metadata_hash(sorted((n, str(i), c) for n, (i, c) in topics.items()))
        if digest != group.metadata_hash:
            group.metadata_hash = digest
            if group.assignment_epoch == group.epoch:
                group.epoch += 1
        return topics


def metadata_hash(metadata: list) -> int:
    """A signed 64-bit hash of the subscribed topics' (name, id, partitions), 0 for none (the
    group metadata record's MetadataHash; Kafka's is an xxh3 of its own, which a Kafka
    broker reading these records would recompute once)."""
    if not metadata:
        return 0
    digest = hashlib.blake2b(repr(metadata).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def unknown_member(member_id: str, group_id: str) -> str:
    """Kafka's message with UNKNOWN_MEMBER_ID."""
    return f"Member {member_id} is not a member of group {group_id}."
