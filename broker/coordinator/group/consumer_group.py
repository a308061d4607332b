"""KIP-848 consumer groups: the broker assigns, members reconcile through heartbeats.

How this works
--------------
A member sends ConsumerGroupHeartbeat with its epoch: 0 to join, -1 to leave, otherwise the
epoch it was last given. Joining, leaving, a subscription change, a change in the subscribed
topics' partition counts or an expired session bumps the *group epoch*, and the server-side
assignor ("uniform", the default, or "range") computes a new *target assignment* for every
member at once (``assign``).

Each member then moves towards its target, one heartbeat at a time (``reconcile``):
- while it still owns partitions outside its target, it is told to keep only
  ``owned & target`` (it revokes the rest and reports what it owns on its next heartbeat);
  its epoch stays;
- once it owns nothing outside its target it takes the group's epoch and gets every target
  partition that no other member still owns; the others arrive on later heartbeats, as
  their previous owners report them revoked.
So a partition never has two owners, and partitions that stay put are never revoked.

A member told to revoke partitions must confirm it (report them gone) within its rebalance
timeout (``rebalance_timeout_ms`` of its heartbeat); otherwise it is removed like an expired
member, so its partitions can move on.

A request with an epoch other than the member's current or previous one gets
FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID; both make the client rejoin with
epoch 0. Sessions expire after ``group.consumer.session.timeout.ms`` (or the group's
``consumer.session.timeout.ms``, group_configs.py) without a heartbeat.

Static members (``group.instance.id``): leaving with epoch -2 keeps the member, its assignment
and its place in the target (epoch -2, no new group epoch) until its session expires. A member
joining with that instance id within the session takes the old member's place under its own
member id: same assignment, no rebalance. While the old member has not left, a join with its
instance id gets UNRELEASED_INSTANCE_ID.
Committed offsets use the same ``__consumer_offsets`` records as classic groups
(``offset_store``); an Empty classic group (e.g. one that only has offsets) becomes a consumer
group on the first heartbeat, keeping its offsets.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable

from headrace.broker.background import wall_clock_ms
from headrace.protocol import ErrorCode

from .group_configs import SESSION_TIMEOUT, GroupConfigs
from .modern_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ModernGroup,
    ModernGroupCoordinator,
    ModernMember,
)
from .modern_group_log import ModernGroupLog

log = logging.getLogger("headrace.groups")

E = ErrorCode
ASSIGNORS = ("uniform", "range")


class ConsumerMember(ModernMember):
    __slots__ = (
        "subscribed",
        "regex",
        "assignor",
        "rebalance_timeout_ms",
        "owned",
        "assigned",
        "last_sent",
    )

    def __init__(self, member_id: str, client_id: str) -> None:
        super().__init__(member_id, client_id)
        self.subscribed: list[str] = []
        self.regex: str | None = None
        self.assignor: str | None = None
        self.rebalance_timeout_ms = 300_000
        self.owned: set[tuple[uuid.UUID, int]] = set()  # what the member holds, as it last told us
        self.assigned: set[tuple[uuid.UUID, int]] = set()  # what we last gave it
        self.last_sent: frozenset | None = None


class ConsumerGroup(ModernGroup):
    group_type = "consumer"
    protocol_type = "consumer"
    members: dict[str, ConsumerMember]
    target: dict[str, set[tuple[uuid.UUID, int]]]

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        self.offsets: dict = {}
        self.assignor_name = "uniform"

    def check_commit(self, member_id: str, epoch: int) -> int:
        """An offset commit's error for a member at ``epoch`` (Kafka's
        ``ConsumerGroup.validateOffsetCommit``): it must be the member's current epoch."""
        if epoch < 0 and not member_id:
            return E.NONE if not self.members else E.UNKNOWN_MEMBER_ID
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != member.epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    @property
    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(
            m.epoch != self.assignment_epoch or m.assigned != self.target.get(m.member_id, set())
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"


def assign(
    members: dict[str, ConsumerMember],
    topics: dict[str, tuple[uuid.UUID, int]],
    previous: dict[str, set],
    assignor: str,
) -> dict[str, set]:
    """The target assignment: member id -> {(topic id, partition)}."""
    target: dict[str, set] = {m: set() for m in members}
    if assignor == "range":
        for name, (tid, count) in sorted(topics.items()):
            subs = sorted(m for m, mem in members.items() if name in mem.subscribed)
            if not subs:
                continue
            per, extra = divmod(count, len(subs))
            start = 0
            for i, m in enumerate(subs):
                n = per + (1 if i < extra else 0)
                target[m].update((tid, p) for p in range(start, start + n))
                start += n
        return target
    # uniform: balanced counts over each partition's subscribers, sticky to the previous target
    wanted: dict[tuple, list[str]] = {}
    for name, (tid, count) in topics.items():
        subs = [m for m, mem in members.items() if name in mem.subscribed]
        for p in range(count):
            if subs:
                wanted[(tid, p)] = subs
    if not wanted:
        return target
    quota = -(-len(wanted) // max(1, len({m for s in wanted.values() for m in s})))
    free = []
    for tp, subs in sorted(wanted.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        keeper = next(
            (m for m in subs if tp in previous.get(m, ()) and len(target[m]) < quota), None
        )
        if keeper is None:
            free.append(tp)
        else:
            target[keeper].add(tp)
    for tp in free:
        m = min(wanted[tp], key=lambda m: (len(target[m]), m))
        target[m].add(tp)
    return target


class ConsumerGroupCoordinator(ModernGroupCoordinator[ConsumerGroup]):
    """The KIP-848 groups; ``classic`` (the ClassicGroupCoordinator) hands over Empty classic
    groups of the same id."""

    def __init__(
        self,
        topics,
        classic,
        *,
        configs: GroupConfigs,  # session timeouts and heartbeat intervals, per group
        max_size: int,  # group.consumer.max.size
        group_log: ModernGroupLog,  # the groups' records in __consumer_offsets
        records,  # consumer_records.records
        now_ms=wall_clock_ms,
    ) -> None:
        super().__init__(topics, configs, max_size, SESSION_TIMEOUT, group_log, records, now_ms)
        self.classic = classic
        # is this id a share group's? (the group coordinator sets it)
        self.share_group: Callable[[str], bool] = lambda group_id: False

    def heartbeat(self, request, client_id: str):
        """(error, message, member id, epoch, assignment or None)."""
        member: ConsumerMember | None
        group_id = request.group_id
        if not group_id:
            return E.INVALID_GROUP_ID, "empty group id", None, 0, None
        if self.share_group(group_id):
            message = f"Group {group_id} is not a consumer group."
            return E.GROUP_ID_NOT_FOUND, message, None, 0, None
        group = self.groups.get(group_id)
        if group is None:
            classic = self.classic.groups.get(group_id)
            if classic is not None and classic.members:
                return (
                    E.GROUP_ID_NOT_FOUND,
                    f"{group_id} is a classic group with members",
                    None,
                    0,
                    None,
                )
            if classic is None and not self.classic.room_for_group():
                return E.COORDINATOR_NOT_AVAILABLE, "group.max.groups reached", None, 0, None
            group = self.groups[group_id] = ConsumerGroup(group_id)
            if classic is not None:  # an empty classic group: keep its offsets
                group.offsets = classic.offsets
                self.classic.remove_group(classic)  # its stored metadata goes
        epoch = request.member_epoch
        member_id = request.member_id
        assignor = request.server_assignor
        if assignor is not None and assignor not in ASSIGNORS:
            return E.UNSUPPORTED_ASSIGNOR, f"unknown assignor {assignor}", member_id, 0, None
        if epoch == 0:
            if not request.subscribed_topic_names and not getattr(
                request, "subscribed_topic_regex", None
            ):
                if request.subscribed_topic_names is None:
                    return (
                        E.INVALID_REQUEST,
                        "a joining member must give its subscription",
                        member_id,
                        0,
                        None,
                    )
            instance_id = request.instance_id
            static = group.static_member(instance_id) if instance_id else None
            if static is not None and static.member_id != member_id:
                if static.epoch != STATIC_LEAVE_EPOCH:
                    return (
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} cannot join "
                        f"the group because the instance id is owned by {static.member_id} "
                        f"member.",
                        member_id,
                        0,
                        None,
                    )
                member = self._replace_static(
                    group, static, member_id or str(uuid.uuid4()), client_id
                )
                before = (tuple(member.subscribed), member.regex, member.assignor)
                self._update(member, request)
                if (tuple(member.subscribed), member.regex, member.assignor) != before:
                    group.epoch += 1
            else:
                member = group.members.get(member_id) if member_id else None
                if member is None:
                    if len(group.members) >= self.max_size:
                        return E.GROUP_MAX_SIZE_REACHED, None, member_id, 0, None
                    member = ConsumerMember(member_id or str(uuid.uuid4()), client_id)
                    group.members[member.member_id] = member
                else:
                    member.owned = set()
                    member.assigned = set()
                    member.last_sent = None
                member.epoch = 0
                self._update(member, request)
                group.epoch += 1
                log.info(
                    "consumer group %s: member %s joined (epoch %d)",
                    group_id,
                    member.member_id,
                    group.epoch,
                )
        elif epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = group.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID, None, member_id, epoch, None
            if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
                # a static member's leave keeps its place until the session expires
                if member.revoke_timer is not None:
                    member.revoke_timer.cancel()
                    member.revoke_timer = None
                member.epoch = STATIC_LEAVE_EPOCH
                log.info(
                    "consumer group %s: static member %s (instance %s) left for now",
                    group_id,
                    member_id,
                    member.instance_id,
                )
                return E.NONE, None, member_id, epoch, None
            self._remove(group, member, "left")
            return E.NONE, None, member_id, epoch, None
        else:
            member = group.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID, None, member_id, epoch, None
            if member.epoch == STATIC_LEAVE_EPOCH or epoch not in (
                member.epoch,
                member.previous_epoch,
            ):
                return E.FENCED_MEMBER_EPOCH, None, member_id, epoch, None
            before = (tuple(member.subscribed), member.regex, member.assignor)
            self._update(member, request)
            if (tuple(member.subscribed), member.regex, member.assignor) != before:
                group.epoch += 1
        if request.topic_partitions is not None:
            member.owned = {(t.topic_id, p) for t in request.topic_partitions for p in t.partitions}
        self.sessions.touch(group, member)
        self._refresh_target(group)
        self._reconcile(group, member)
        sent = None
        if member.last_sent != frozenset(member.assigned):
            member.last_sent = frozenset(member.assigned)
            sent = member.assigned
        return E.NONE, None, member.member_id, member.epoch, sent

    def loaded(self, group: ConsumerGroup) -> None:
        """A loaded member still revoking partitions has its rebalance timeout again."""
        super().loaded(group)
        for member in group.members.values():
            if member.owned - member.assigned:
                self._revoke_timer(group, member)

    def _revoke_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.revoke_timer is None:
            member.revoke_timer = asyncio.get_running_loop().call_later(
                member.rebalance_timeout_ms / 1000,
                self._revocation_overdue,
                group,
                member,
                member.epoch,
            )

    def _update(self, member: ConsumerMember, request) -> None:
        if request.subscribed_topic_names is not None:
            member.subscribed = sorted(request.subscribed_topic_names)
        regex = getattr(request, "subscribed_topic_regex", None)
        if regex is not None:
            member.regex = regex or None
        if request.server_assignor is not None:
            member.assignor = request.server_assignor
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms

    def _refresh_target(self, group: ConsumerGroup) -> None:
        names = set()
        for m in group.members.values():
            names.update(m.subscribed)
            if m.regex:
                try:
                    pattern = re.compile(m.regex)
                except re.error:
                    continue
                names.update(n for n in self.topics.topics if pattern.fullmatch(n))
        topics = self._subscribed_topics(group, names)
        if group.assignment_epoch == group.epoch:
            return
        group.assignor_name = next(
            (m.assignor for m in group.members.values() if m.assignor), "uniform"
        )
        if any(m.regex for m in group.members.values()):
            for m in group.members.values():  # a regex member subscribes to what it matches
                if m.regex:
                    pattern = re.compile(m.regex)
                    m.subscribed = sorted(
                        set(m.subscribed) | {n for n in topics if pattern.fullmatch(n)}
                    )
        group.target = assign(group.members, topics, group.target, group.assignor_name)
        group.assignment_epoch = group.epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        target = group.target.get(member.member_id, set())
        revoking = member.owned - target
        if revoking:
            member.assigned = member.owned & target
            self._revoke_timer(group, member)
            return
        if member.revoke_timer is not None:
            member.revoke_timer.cancel()
            member.revoke_timer = None
        held_elsewhere = set()
        for other in group.members.values():
            if other is not member:
                held_elsewhere |= other.owned
        if member.epoch != group.assignment_epoch:
            member.previous_epoch = member.epoch
            member.epoch = group.assignment_epoch
        member.assigned = {tp for tp in target if tp not in held_elsewhere}
        member.owned |= member.assigned

    def _replace_static(
        self, group: ConsumerGroup, old: ConsumerMember, member_id: str, client_id: str
    ) -> ConsumerMember:
        """A static member rejoins under a new member id: it takes the old one's subscription,
        assignment and target; the group epoch stays."""
        old.cancel_timers()
        del group.members[old.member_id]
        member = ConsumerMember(member_id, client_id)
        for name in (
            "instance_id",
            "rack_id",
            "subscribed",
            "regex",
            "assignor",
            "rebalance_timeout_ms",
        ):
            setattr(member, name, getattr(old, name))
        member.owned = set(old.assigned)
        member.assigned = set(old.assigned)
        member.epoch = member.previous_epoch = 0
        group.members[member_id] = member
        if old.member_id in group.target:
            group.target[member_id] = group.target.pop(old.member_id)
        log.info(
            "consumer group %s: static member %s (instance %s) rejoined as %s",
            group.group_id,
            old.member_id,
            old.instance_id,
            member_id,
        )
        return member

    def _revocation_overdue(self, group: ConsumerGroup, member: ConsumerMember, epoch: int) -> None:
        member.revoke_timer = None
        if group.members.get(member.member_id) is not member or member.epoch != epoch:
            return
        if member.owned - group.target.get(member.member_id, set()):
            self._expire(
                group,
                member,
                f"did not revoke its partitions within its rebalance "
                f"timeout ({member.rebalance_timeout_ms} ms)",
            )
