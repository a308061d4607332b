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
import logging
import uuid
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from headrace.broker.background import wall_clock_ms

from .group_configs import GroupConfigs
from .group_sessions import SessionTimers

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
        now_ms=wall_clock_ms,
    ) -> None:
        self.topics = topics
        self.configs = configs
        self.max_size = max_size
        self.now_ms = now_ms
        self.groups: dict[str, G] = {}
        self.sessions = SessionTimers(
            lambda g, m: self._remove(g, m, "session expired"),
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
        ``subscription_metadata``) the group epoch moves on, unless it is ahead already."""
        topics = {}
        for name in sorted(names):
            t = self.topics.get(name)
            if t is not None:
                topics[name] = (t.topic_id, t.count)
        metadata = tuple(sorted((n, str(i), c) for n, (i, c) in topics.items()))
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            if group.assignment_epoch == group.epoch:
                group.epoch += 1
        return topics


def unknown_member(member_id: str, group_id: str) -> str:
    """Kafka's message with UNKNOWN_MEMBER_ID."""
    return f"Member {member_id} is not a member of group {group_id}."
