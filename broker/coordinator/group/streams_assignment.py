"""A streams group's assignment: the target for every member at once, and each member's
steps towards it (Kafka's TargetAssignmentBuilder and CurrentAssignmentBuilder, without
warm-up tasks). Pure: the coordinator decides when, and keeps the timers.

How this works
--------------
``new_target`` runs when the group epoch has moved past the assignment epoch: with the
topology ready, the "sticky" assignor (``streams_assignor``) places every task (active
tasks, and ``streams.num.standby.replicas`` standby replicas of stateful ones) starting from
the previous target; not ready, every member's target is empty. The assignment epoch becomes
the group epoch.

``reconcile`` moves a member one step towards its target, one heartbeat at a time:
- while it owns tasks outside its target it keeps only those inside (state UNREVOKED_TASKS,
  its epoch stays) until it reports the others gone (the coordinator removes it when that
  takes longer than its rebalance timeout);
- then it takes the assignment epoch and every target task no other member still holds
  (an active task held by anyone, or a standby held on the same process, is *unreleased*:
  state UNRELEASED_TASKS until a later heartbeat finds it free).
An active task it is given records the assignment epoch (``StreamsMember.active``), which
offset commits are checked against; one it keeps keeps its epoch.
"""

from __future__ import annotations

import logging

from . import streams_assignor
from .streams_group import (
    EMPTY_TASKS,
    STABLE,
    UNRELEASED_TASKS,
    UNREVOKED_TASKS,
    StreamsGroup,
    StreamsMember,
    Task,
)

log = logging.getLogger("headrace.groups")


def new_target(group: StreamsGroup, standby: int) -> None:
    """A new target assignment at the group epoch (``standby``: replicas of stateful tasks)."""
    configured = group.configured
    if configured is None or not configured.ready or group.topology is None:
        group.target = {m: (set(), set()) for m in group.members}
    else:
        assert configured.tasks is not None
        members = {
            m.member_id: streams_assignor.AssignmentMember(
                m.process_id or m.member_id,
                frozenset(group.target.get(m.member_id, EMPTY_TASKS)[0]),
                frozenset(group.target.get(m.member_id, EMPTY_TASKS)[1]),
            )
            for m in group.members.values()
        }
        stateful = {s.subtopology_id for s in group.topology.subtopologies if s.stateful}
        group.target = streams_assignor.assign(members, configured.tasks, stateful, standby)
    group.standby_replicas = standby
    group.assignment_epoch = group.epoch
    log.info(
        "streams group %s: new target assignment at epoch %d (%d members)",
        group.group_id,
        group.epoch,
        len(group.members),
    )


def reconcile(group: StreamsGroup, member: StreamsMember, owned) -> bool:
    """Move ``member`` one step towards its target; False when it stays where it is (at its
    target already, or still owning tasks it must give back). ``owned``: (active, standby)
    it reported, or None when it did not."""
    if member.state == STABLE and member.epoch == group.assignment_epoch:
        return False
    if member.state == UNREVOKED_TASKS:
        if not_released(owned, member.revoking_active.keys(), member.revoking_standby):
            return False
        _next(group, member, member.epoch + 1, owned)
    else:
        _next(group, member, member.epoch, owned)
    return True


def _next(group: StreamsGroup, member: StreamsMember, epoch: int, owned) -> None:
    target_epoch = group.assignment_epoch
    target_active, target_standby = group.target.get(member.member_id, (set(), set()))
    active_at: dict[Task, str] = {}  # task -> the process running it (or giving it back)
    standby_at: dict[Task, set[str]] = {}
    for m in group.members.values():
        for t in (*m.active, *m.revoking_active):
            active_at[t] = m.process_id
        for t in (*m.standby, *m.revoking_standby):
            standby_at.setdefault(t, set()).add(m.process_id)
    process = member.process_id
    new_active = {t: e for t, e in member.active.items() if t in target_active}
    revoking_active = {t: e for t, e in member.active.items() if t not in target_active}
    pending_active = {t: target_epoch for t in target_active if t not in new_active}
    unreleased = False
    for t in list(pending_active):
        held_standby_here = process in standby_at.get(t, ()) and t not in member.standby
        if t in active_at or held_standby_here:
            del pending_active[t]
            unreleased = True
    new_standby = member.standby & target_standby
    revoking_standby = member.standby - target_standby
    pending_standby = target_standby - new_standby
    for t in list(pending_standby):
        run_here = active_at.get(t) == process and t not in member.active
        if run_here or process in standby_at.get(t, ()):
            pending_standby.discard(t)
            unreleased = True
    for t in member.active:  # an active task becoming a standby here: at once
        if t in pending_standby:
            pending_standby.discard(t)
            new_standby.add(t)
    for t in member.standby:  # a standby becoming active here is not revoked
        if t in target_active:
            revoking_standby.discard(t)
    revoking = bool(revoking_active or revoking_standby) and not_released(
        owned, revoking_active.keys(), revoking_standby
    )
    for t in member.standby:  # ... and is kept as a standby until it is granted
        if t in target_active and (revoking or t not in pending_active):
            new_standby.add(t)
    member.previous_epoch = member.epoch
    if revoking:
        member.state = UNREVOKED_TASKS
        member.epoch = epoch
        member.active, member.standby = new_active, new_standby
        member.revoking_active, member.revoking_standby = revoking_active, revoking_standby
        return
    member.state = UNRELEASED_TASKS if unreleased else STABLE
    member.epoch = target_epoch
    new_active.update(pending_active)
    member.active, member.standby = new_active, new_standby | pending_standby
    member.revoking_active, member.revoking_standby = {}, set()


def not_released(owned, active, standby) -> bool:
    """Does the member still own some of these tasks (as far as it told us)?"""
    if owned is None:
        return True
    return bool(owned[0] & set(active)) or bool(owned[1] & set(standby))
