"""KIP-932 share groups: the broker assigns partitions, and members may share one.

How this works
--------------
A member names itself (its member id, made by the client) and sends ShareGroupHeartbeat
with its epoch: 0 to join (with its subscribed topic names), -1 to leave, otherwise the
epoch it was last given. Joining, leaving, a subscription change, a change in the subscribed
topics' partition counts or an expired session bumps the *group epoch*; the next heartbeat
then computes a new *target assignment* for every member at once (``assign``, the "simple"
assignor) and the group's *assignment epoch* becomes the group epoch.

Unlike a consumer group's, a share group's partitions are never revoked first: records of a
partition are handed out by its leader to whichever members fetch them, each delivery under
an acquisition lock, so two members on one partition are normal. A member therefore takes
its target and the assignment epoch on its next heartbeat, in one step. It is sent its
assignment when it joins, when it sends its whole state (subscribed names not null), and
when its assignment changed.

``assign`` spreads P partitions over M members so that each partition is shared by
ceil(M / P) of its subscribers (one when there are at least as many partitions as members)
and the members' counts differ by at most one; what a member had and may keep, it keeps.

A request with an epoch above the member's, or below it and not its previous one, gets
FENCED_MEMBER_EPOCH; an unknown member UNKNOWN_MEMBER_ID: both make the client rejoin with
epoch 0. Sessions expire after ``group.share.session.timeout.ms`` (or the group's
``share.session.timeout.ms``, group_configs.py) without a heartbeat. At
``group.share.max.size`` members a new one gets GROUP_MAX_SIZE_REACHED.

A group id is one kind of group: a share heartbeat for a classic or consumer group's id gets
GROUP_ID_NOT_FOUND ("Group G is not a share group."), as in Kafka; ``other_kind`` tells.
Share groups are kept in ``__consumer_offsets`` in Kafka's records (``share_records``), as
consumer groups are: after a restart or a coordinator move the members carry on. Their
delivery state lives at the partitions' leaders, persisted by the share coordinator.

Which partitions a group has state for (Kafka's ShareGroupStatePartitionMetadata) is
``ShareGroup.state_partitions`` (initialized) and ``ShareGroup.initializing``. As in Kafka
4.4, the group coordinator initializes the state of the partitions a target assignment
gives out for the first time (``initialize``: InitializeShareGroupState through the
persister, at the group epoch): start offset -1 for a topic the group had no state for (its
leader then starts where ``share.auto.offset.reset`` says), 0 for partitions added later to a
topic it has state for (they start at their beginning); first recorded as initializing, then
as initialized once the share coordinator has them (dropped on failure, tried again at a
later heartbeat). Unlike Kafka, which assigns only initialized partitions, a member is
given its partitions at once, and a heartbeat is answered once the initializations of its
group in flight are done (at most ``INIT_WAIT_S`` later), so that no leader reads a
partition's state before it is made. (Should one answer first, while the share coordinator
moves, the leader starts the partition from its reset policy and the coordinator's later
initialization, at a state epoch not below the leader's, fences it: it reads the state
again.)
The offsets admin APIs add (AlterShareGroupOffsets) and take away (DeleteShareGroupOffsets)
initialized partitions; DeleteGroups and DescribeShareGroupOffsets without topics go by
them, also after a restart. They are bounded by the partitions of the cluster's topics: a
deleted topic's entries go (``topics_deleted``). A group holding state is kept when empty,
as Kafka keeps it, until DeleteGroups; only groups without members and without state are
forgotten when ``group.max.groups`` needs room.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from headrace.broker.background import wall_clock_ms
from headrace.protocol import ErrorCode

from .group_configs import SHARE_SESSION_TIMEOUT, GroupConfigs
from .modern_group import (
    LEAVE_EPOCH,
    ModernGroup,
    ModernGroupCoordinator,
    ModernMember,
    unknown_member,
)
from .modern_group_log import ModernGroupLog

log = logging.getLogger("headrace.groups")

E = ErrorCode
ASSIGNOR = "simple"
MAX_MEMBER_ID = 36  # Kafka's longest member id (a UUID's text)
# how long a heartbeat waits for its group's share-partition initializations
INIT_WAIT_S = 1.0

TopicPartition = tuple[uuid.UUID, int]


class StateInitializer(Protocol):
    """The persister, as the group coordinator uses it."""

    def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> Awaitable[int]: ...


class ShareMember(ModernMember):
    __slots__ = ("subscribed", "assigned")

    def __init__(self, member_id: str, client_id: str, client_host: str) -> None:
        super().__init__(member_id, client_id, client_host)
        self.subscribed: list[str] = []
        self.assigned: set[TopicPartition] = set()  # what it was last given


class ShareGroup(ModernGroup):
    group_type = "share"
    protocol_type = "share"
    members: dict[str, ShareMember]
    target: dict[str, set[TopicPartition]]

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        # topic id -> the partitions the group has state for (initialized), and those
        # being initialized
        self.state_partitions: dict[uuid.UUID, set[int]] = {}
        self.initializing: dict[uuid.UUID, set[int]] = {}
        self.in_flight: set[TopicPartition] = set()  # initializations sent, not answered
        self.init_tasks: set[asyncio.Future] = set()

    def remove(self, member: ModernMember, now_ms: int) -> bool:
        if not super().remove(member, now_ms):
            return False
        if not self.members:
            self.assignment_epoch = self.epoch  # nothing to assign
        return True

    def record_state(self, parts) -> None:
        """The group has state for ``parts``, (topic id, partition) pairs."""
        for tid, p in parts:
            self.state_partitions.setdefault(tid, set()).add(p)
            held = self.initializing.get(tid)
            if held is not None:
                held.discard(p)
                if not held:
                    del self.initializing[tid]

    def has_state(self) -> bool:
        return bool(self.state_partitions or self.initializing)

    def cancel_timers(self) -> None:
        super().cancel_timers()
        for task in self.init_tasks:
            task.cancel()

    @property
    def state_name(self) -> str:
        """Kafka's share group states: Empty without members, else Stable."""
        return "Stable" if self.members else "Empty"


def assign(
    members: dict[str, list[str]],
    topics: dict[str, tuple[uuid.UUID, int]],
    previous: dict[str, set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """The target assignment, member id -> {(topic id, partition)}, from each member's
    subscribed topic names (``members``), the subscribed topics (name -> (id, partitions))
    and the previous target.

    Each partition gets ``sharing`` members: its subscribers divided by the partitions all of
    them subscribe to, rounded up (ceil(M / P) when every member subscribes to the same
    topics). The slots so made are dealt out: first to members that held the partition
    before, up to each member's fair share of slots, then to the members holding fewest."""
    target: dict[str, set[TopicPartition]] = {m: set() for m in members}
    subscribers: dict[TopicPartition, list[str]] = {}
    for name, (tid, count) in sorted(topics.items()):
        subs = sorted(m for m, names in members.items() if name in names)
        if subs:
            for p in range(count):
                subscribers[(tid, p)] = subs
    if not subscribers:
        return target
    counts: dict[frozenset[str], int] = {}  # subscriber set -> its partitions
    for subs in subscribers.values():
        key = frozenset(subs)
        counts[key] = counts.get(key, 0) + 1
    # subscriber set -> the partitions every one of them subscribes to
    by_set = {
        tuple(sorted(key)): sum(n for other, n in counts.items() if key <= other) for key in counts
    }
    sharing = {tp: math.ceil(len(subs) / by_set[tuple(subs)]) for tp, subs in subscribers.items()}
    # each member's fair share of the slots, and its whole count when it has a fraction
    share = {m: 0.0 for m in members}
    for tp, subs in subscribers.items():
        for m in subs:
            share[m] += sharing[tp] / len(subs)
    slots = sum(sharing.values())
    quota = {m: math.floor(share[m] + 1e-9) for m in members}
    spare = slots - sum(quota.values())
    held_before = {m: len(previous.get(m, ())) for m in members}
    for m in sorted(members, key=lambda m: (-(share[m] - quota[m]), -held_before[m], m)):
        if spare <= 0:
            break
        if share[m] - quota[m] > 1e-9:
            quota[m] += 1
            spare -= 1
    holders: dict[TopicPartition, set[str]] = {tp: set() for tp in subscribers}
    for m in sorted(members):  # sticky: keep what is still open to the member
        for tp in sorted(previous.get(m, ()), key=lambda tp: (str(tp[0]), tp[1])):
            if m not in subscribers.get(tp, ()):
                continue
            if len(holders[tp]) < sharing[tp] and len(target[m]) < quota[m]:
                holders[tp].add(m)
                target[m].add(tp)
    progress = True
    while progress:  # then each open slot to the eligible member holding fewest
        progress = False
        for tp in sorted(subscribers, key=lambda tp: (len(holders[tp]), str(tp[0]), tp[1])):
            if len(holders[tp]) >= sharing[tp]:
                continue
            free = [m for m in subscribers[tp] if m not in holders[tp]]
            if not free:
                continue
            m = min(free, key=lambda m: (len(target[m]), m))
            holders[tp].add(m)
            target[m].add(tp)
            progress = True
    return target


class ShareGroupCoordinator(ModernGroupCoordinator[ShareGroup]):
    """The share groups of this broker's partitions of ``__consumer_offsets``."""

    def __init__(
        self,
        topics,
        *,
        configs: GroupConfigs,  # session timeouts and heartbeat intervals, per group
        max_size: int,  # group.share.max.size
        other_kind: Callable[[str], bool],  # is this id a classic or consumer group's?
        room_for_group: Callable[[], bool],  # group.max.groups
        group_log: ModernGroupLog,  # the groups' records in __consumer_offsets
        records,  # the kind's records module's ``records``
        now_ms=wall_clock_ms,
    ) -> None:
        super().__init__(
            topics, configs, max_size, SHARE_SESSION_TIMEOUT, group_log, records, now_ms
        )
        self.other_kind = other_kind
        self.room_for_group = room_for_group
        # the persister (InitializeShareGroupState), set by the broker once it is made;
        # without one the target's partitions are taken as initialized
        self.persister: StateInitializer | None = None

    async def delete(self, group_id: str) -> int:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members; its records
        get tombstones."""
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.members:
            return E.NON_EMPTY_GROUP
        self.unload(group_id)
        log.info("share group %s deleted", group_id)
        return await self.group_log.durable(self.delete_records(group))

    # share-partition state at the share coordinator -----------------------------------------

    def plan_initialize(self, group: ShareGroup) -> dict[TopicPartition, int]:
        """The partitions of the target assignment without state yet, and not being
        initialized now: (topic id, partition) -> start offset, as Kafka 4.4 chooses it (-1
        for a topic the group had no state for, 0 for one it had); recorded as
        initializing."""
        known = set(group.state_partitions) | set(group.initializing)
        plan = {}
        for parts in group.target.values():
            for tid, p in parts:
                if (tid, p) in group.in_flight or p in group.state_partitions.get(tid, ()):
                    continue
                plan[(tid, p)] = 0 if tid in known else -1
        for tid, p in plan:
            group.initializing.setdefault(tid, set()).add(p)
            group.in_flight.add((tid, p))
        return plan

    async def initialize(self, group: ShareGroup, plan: dict[TopicPartition, int]) -> None:
        """InitializeShareGroupState for ``plan`` at the group epoch; what succeeded becomes
        initialized, what failed is no longer initializing (tried again later); the change
        is written."""
        epoch = group.epoch
        try:
            errors: list[int]
            if self.persister is None:
                errors = [E.NONE] * len(plan)
            else:
                persister = self.persister
                errors = list(
                    await asyncio.gather(
                        *(
                            persister.initialize(group.group_id, tid, p, epoch, start)
                            for (tid, p), start in plan.items()
                        )
                    )
                )
        finally:
            group.in_flight.difference_update(plan)
        done = [tp for tp, error in zip(plan, errors, strict=True) if not error]
        group.record_state(done)
        for (tid, p), error in zip(plan, errors, strict=True):
            if error:
                log.warning(
                    "share group %s: initializing the state of %s-%d failed (error %d)",
                    group.group_id,
                    tid,
                    p,
                    error,
                )
                held = group.initializing.get(tid)
                if held is not None:
                    held.discard(p)
                    if not held:
                        del group.initializing[tid]
        if self.groups.get(group.group_id) is group:
            await self.group_log.durable(self.persist(group))

    async def settled(self, group_id: str, member_id: str | None) -> int:
        """After a heartbeat: write what it changed, initialize the state of partitions
        given out for the first time, and wait for the group's initializations in flight
        (a member should not fetch a partition before its state is made), at most
        ``INIT_WAIT_S``: a share coordinator moving takes longer, and a heartbeat must not
        wait for it; an error code."""
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE
        plan = self.plan_initialize(group)
        error = await self.group_log.durable(self.persist(group, member_id))
        if error:
            return error
        if plan:
            task = asyncio.ensure_future(self.initialize(group, plan))
            group.init_tasks.add(task)
            task.add_done_callback(group.init_tasks.discard)
        if group.init_tasks:
            await asyncio.wait(
                [asyncio.shield(t) for t in list(group.init_tasks)], timeout=INIT_WAIT_S
            )
        return E.NONE

    def forget_empty(self) -> None:
        """Forget the groups without members and without state (they hold nothing). Kafka
        keeps an empty share group until it is deleted; here one that never held a partition
        is kept until ``group.max.groups`` is reached and room is needed."""
        for group_id, group in [
            (g, group)
            for g, group in self.groups.items()
            if not group.members and not group.has_state()
        ]:
            self.unload(group_id)
            self.persist_soon(self.delete_records(group))

    def topics_deleted(self) -> None:
        """Drop the groups' state records of topics that no longer exist."""
        for group in self.groups.values():
            changed = False
            for held in (group.state_partitions, group.initializing):
                for tid in [t for t in held if self.topics.find(None, t) is None]:
                    del held[tid]
                    changed = True
            if changed:
                self.persist_soon(self.persist(group))

    def empty_group(self, group_id: str, create: bool) -> tuple[int, str | None, ShareGroup | None]:
        """(error, message, group) for the offsets admin APIs, which need a share group
        without members: GROUP_ID_NOT_FOUND for another kind's id (or an unknown one unless
        ``create``: AlterShareGroupOffsets makes the group, as Kafka does), NON_EMPTY_GROUP
        while it has members."""
        group = self.groups.get(group_id)
        if group is None:
            if self.other_kind(group_id):
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
            if not create:
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
            if not self.room_for_group():
                return E.COORDINATOR_NOT_AVAILABLE, "group.max.groups reached", None
            group = self.groups[group_id] = ShareGroup(group_id)
            group.empty_since_ms = self.now_ms()
        if group.members:
            return E.NON_EMPTY_GROUP, "The group is not empty.", None
        return E.NONE, None, group

    @staticmethod
    def invalid(request) -> str | None:
        """Why a ShareGroupHeartbeat is malformed (Kafka's messages), or None."""
        if not request.group_id.strip():
            return "GroupId can't be empty."
        if request.rack_id is not None and not request.rack_id.strip():
            return "RackId can't be empty."
        if request.member_epoch == 0:
            if not request.subscribed_topic_names:
                return "SubscribedTopicNames must be set in first request."
        elif request.member_epoch < LEAVE_EPOCH:
            return "MemberEpoch is invalid."
        return None

    def heartbeat(self, request, client_id: str, client_host: str = ""):
        """(error, message, member id, epoch, assignment or None)."""
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        why = self.invalid(request)
        if why is not None:
            return E.INVALID_REQUEST, why, None, 0, None
        group = self.groups.get(group_id)
        if group is None and self.other_kind(group_id):
            message = f"Group {group_id} is not a share group."
            return E.GROUP_ID_NOT_FOUND, message, None, 0, None
        if epoch == LEAVE_EPOCH:
            if group is None:
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None, 0, None
            member = group.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID, unknown_member(member_id, group_id), None, 0, None
            self._remove(group, member, "left")
            return E.NONE, None, member_id, LEAVE_EPOCH, None
        if group is None:
            if epoch != 0:  # not stored here: the member rejoins
                return E.UNKNOWN_MEMBER_ID, unknown_member(member_id, group_id), None, 0, None
            if not self.room_for_group():
                return E.COORDINATOR_NOT_AVAILABLE, "group.max.groups reached", None, 0, None
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None and len(group.members) >= self.max_size:
            message = (
                f"The share group has reached its maximum capacity of {self.max_size} members."
            )
            return E.GROUP_MAX_SIZE_REACHED, message, None, 0, None
        if member is None:
            if epoch != 0:
                return E.UNKNOWN_MEMBER_ID, unknown_member(member_id, group_id), None, 0, None
            member = group.members[member_id] = ShareMember(member_id, client_id, client_host)
            group.empty_since_ms = None
            log.info("share group %s: member %s joined", group_id, member_id)
        elif epoch != 0:
            fenced = _fenced(member, epoch)
            if fenced is not None:
                return E.FENCED_MEMBER_EPOCH, fenced, None, 0, None
        before = set(member.assigned)
        member.client_id, member.client_host = client_id, client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        changed = False
        if request.subscribed_topic_names is not None:
            names = sorted(set(request.subscribed_topic_names))
            changed = names != member.subscribed
            member.subscribed = names
        if changed:
            group.epoch += 1
        self.sessions.touch(group, member)
        self._refresh_target(group)
        target = group.target.get(member.member_id, set())
        if member.epoch != group.assignment_epoch or changed:
            if member.epoch != group.assignment_epoch:
                member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
            member.assigned = self._subscribed_only(member, target)
        sent = None
        if epoch == 0 or request.subscribed_topic_names is not None or member.assigned != before:
            sent = member.assigned
        return E.NONE, None, member.member_id, member.epoch, sent

    def _subscribed_only(self, member: ShareMember, target: set) -> set[TopicPartition]:
        """The target's partitions of topics the member still subscribes to."""
        ids = set()
        for name in member.subscribed:
            t = self.topics.get(name)
            if t is not None:
                ids.add(t.topic_id)
        return {tp for tp in target if tp[0] in ids}

    def _refresh_target(self, group: ShareGroup) -> None:
        names = {name for m in group.members.values() for name in m.subscribed}
        topics = self._subscribed_topics(group, names)
        if group.assignment_epoch == group.epoch:
            return
        subscriptions = {m.member_id: m.subscribed for m in group.members.values()}
        group.target = assign(subscriptions, topics, group.target)
        group.assignment_epoch = group.epoch
        log.info(
            "share group %s: new target assignment at epoch %d (%d members)",
            group.group_id,
            group.epoch,
            len(group.members),
        )


def _fenced(member: ShareMember, epoch: int) -> str | None:
    """Kafka's message when ``epoch`` is neither the member's epoch nor its previous one."""
    if epoch > member.epoch:
        return (
            f"The share group member has a greater member epoch ({epoch}) than the one known"
            f" by the group coordinator ({member.epoch}). The member must abandon all its"
            " partitions and rejoin."
        )
    if epoch < member.epoch and epoch != member.previous_epoch:
        return (
            f"The share group member has a smaller member epoch ({epoch}) than the one known"
            f" by the group coordinator ({member.epoch}), and it does not match the previous"
            f" member epoch ({member.previous_epoch}). The member must abandon all its"
            " partitions and rejoin."
        )
    return None
