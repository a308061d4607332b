"""The classic consumer group's state machine, as data. Everything that decides which state a
group may move to, and how a request is answered in each state, lives in this file.

How this works
--------------
A classic group is in one of five states (Kafka's names, shown by DescribeGroups/ListGroups):

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲      │                                               │
      │                 │      └──every member gone──▶ Empty                   │ leader's SyncGroup
      │                 │                                                      ▼
      │                 └──────── join, leave, expiry, metadata change ────── Stable
      └─ (any state) ──delete / all offsets expired or gone with their topics──▶ Dead

``TRANSITIONS`` lists the states each state may be entered from; ``ClassicGroupCoordinator``
moves a group only through ``transition``, which checks it. The tables below say how Heartbeat,
SyncGroup and a member's OffsetCommit are answered in each state once the member and its
generation have been checked; ``WAIT`` means the answer comes later (a SyncGroup waits for the
leader's assignment), ``ACCEPT`` that the request goes ahead.
"""

from __future__ import annotations

from enum import Enum

from headrace.protocol import ErrorCode


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# target state -> the states it may be entered from
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    PREPARING: frozenset({EMPTY, STABLE, COMPLETING}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    EMPTY: frozenset({PREPARING}),
    DEAD: frozenset({EMPTY, PREPARING, COMPLETING, STABLE, DEAD}),
}

WAIT = "wait"
ACCEPT = "accept"

# Heartbeat from a known member of the current generation (the session timer is reset in
# every state but Dead: a member that heartbeats while the group rebalances stays alive)
HEARTBEAT: dict[GroupState, int] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: ErrorCode.REBALANCE_IN_PROGRESS,
    COMPLETING: ErrorCode.NONE,
    STABLE: ErrorCode.NONE,
    DEAD: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}

# SyncGroup from a known member of the current generation
SYNC: dict[GroupState, int | str] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: ErrorCode.REBALANCE_IN_PROGRESS,
    COMPLETING: WAIT,  # until the leader sends the assignment
    STABLE: ACCEPT,  # the member's current assignment, at once
    DEAD: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}

# OffsetCommit with a member id and generation (a commit with generation -1 and no member id
# is an "offsets only" commit, allowed while the group has no members)
MEMBER_COMMIT: dict[GroupState, int | str] = {
    EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    PREPARING: ACCEPT,  # eager members commit before they rejoin
    COMPLETING: ErrorCode.REBALANCE_IN_PROGRESS,
    STABLE: ACCEPT,
    DEAD: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}

# states in which a join, leave or expiry starts a new rebalance (PreparingRebalance instead
# re-checks whether everyone has joined)
REBALANCE_ON_CHANGE = frozenset({STABLE, COMPLETING})


class IllegalTransition(RuntimeError):
    pass


def transition(group, target: GroupState) -> None:
    """Move ``group`` (anything with ``state``) to ``target``, if the table allows it."""
    if group.state not in TRANSITIONS[target]:
        raise IllegalTransition(f"group {group.group_id}: {group.state.value} -> {target.value}")
    group.state = target


def parse_state(text: str) -> GroupState | None:
    """A state name as ListGroups filters give it (any case); None when unknown."""
    for s in GroupState:
        if s.value.lower() == text.lower():
            return s
    return None
