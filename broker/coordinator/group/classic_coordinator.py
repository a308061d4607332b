"""Classic groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, the rebalance between them.

How this works
--------------
Every classic group lives in ``ClassicGroupCoordinator.groups``; everything here runs on the
event loop, so no locks are needed. The allowed state changes and the per-state answers are
the tables in ``group_state``; this file carries out the steps between them.

A rebalance: a member joins (or leaves, or its session expires, or changes its metadata) ->
the group goes to PreparingRebalance and every member's JoinGroup is held (a future). The
join phase ends when every known member has rejoined, or when the longest rebalance timeout
of the members runs out (the ones that did not rejoin are removed). A group that was Empty
first waits ``group.initial.rebalance.delay.ms`` (extended while new members keep arriving,
up to the rebalance timeout) so that a fleet of consumers starting together gets one
rebalance. When the phase ends the generation goes up, a protocol every member supports is
chosen, and the held JoinGroups are answered: the leader gets every member's metadata and
computes the assignment on the client (the broker never looks inside it). Members then send
SyncGroup, held until the leader's SyncGroup brings the assignments and the group's metadata
is stored (``group_membership``); the group is then Stable. Eager and cooperative
rebalancing differ only in what the clients do between joins.

New members (JoinGroup v4+) first get MEMBER_ID_REQUIRED with an id, and join with it; the
id is pending until then, and forgotten after a session timeout. Static members
(``group.instance.id``) keep their place across restarts of the client: a rejoin with an
empty member id replaces the old member id, keeps its assignment and, when the group is
Stable and the protocol would not change, causes no rebalance. The old id is fenced.

Sessions (``group_sessions``): each member's deadline is moved by heartbeats and by every
answered join or sync; a member whose deadline passes is removed as if it had left. Members
waiting in a JoinGroup or SyncGroup are not expired meanwhile. After a restart, restored
members get a fresh session, so members that keep heartbeating (or static members that
rejoin) cause no rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from headrace.broker.background import wall_clock_ms
from headrace.protocol import ErrorCode

from . import group_membership
from .classic_group import ClassicGroup, JoinResult, Member, MemberSpec
from .group_membership import MembershipLog
from .group_sessions import SessionTimers
from .group_state import (
    ACCEPT,
    COMPLETING,
    DEAD,
    EMPTY,
    HEARTBEAT,
    MEMBER_COMMIT,
    PREPARING,
    REBALANCE_ON_CHANGE,
    STABLE,
    SYNC,
)

log = logging.getLogger("headrace.groups")

E = ErrorCode


class ClassicGroupCoordinator:
    def __init__(
        self,
        membership: MembershipLog,
        *,
        initial_delay_ms: int,  # group.initial.rebalance.delay.ms
        min_session_ms: int,  # group.min.session.timeout.ms
        max_session_ms: int,  # group.max.session.timeout.ms
        max_size: int,  # group.max.size
        now_ms=wall_clock_ms,
    ) -> None:
        self.initial_delay_ms = initial_delay_ms
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.max_size = max_size
        # may one more group be made? (group.max.groups: the group coordinator counts both
        # kinds of group and sets this)
        self.room_for_group: Callable[[], bool] = lambda: True
        # is this id a share group's? (the group coordinator sets it; JoinGroup refuses it)
        self.share_group: Callable[[str], bool] = lambda group_id: False
        self.membership = membership
        self.now_ms = now_ms
        self.groups: dict[str, ClassicGroup] = {}
        self.sessions = SessionTimers(
            self._session_expired,
            lambda g, m: m.session_timeout_ms,
            lambda m: m.join_waiter is not None or m.sync_waiter is not None,
        )

    def new_group(self, group_id: str) -> ClassicGroup:
        group = self.groups[group_id] = ClassicGroup(group_id, self.now_ms)
        return group

    def restore(self, group_id: str, meta) -> ClassicGroup:
        """Bring a group back from its stored metadata (at start-up)."""
        group = self.groups.get(group_id) or self.new_group(group_id)
        group_membership.restore(group, meta)
        for m in group.members.values():
            self.sessions.touch(group, m)
        return group

    def remove_group(self, group: ClassicGroup) -> asyncio.Future:
        """The group is Dead and forgotten; its metadata gets a tombstone (the future)."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        if group.state is not DEAD:
            group.set_state(DEAD)
        return self.membership.persist(group, tombstone=True)

    def unload(self, group: ClassicGroup, error: int) -> None:
        """Forget a group another broker now coordinates (no tombstone): its waiting joins
        and syncs get ``error``."""
        if group.join_timer:
            group.join_timer.cancel()
        for handle in group.pending.values():
            handle.cancel()
        for m in list(group.members.values()):
            self._drop(group, m, error)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def stop(self) -> None:
        for group in self.groups.values():
            if group.join_timer:
                group.join_timer.cancel()
            for handle in group.pending.values():
                handle.cancel()
            for m in group.members.values():
                if m.timer:
                    m.timer.cancel()

    # join -------------------------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        spec: MemberSpec,
        require_known_member: bool,
    ):
        """A JoinResult, or a future of one when the join waits for the rebalance."""
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_ms <= spec.session_timeout_ms <= self.max_session_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if self.share_group(group_id):  # as Kafka answers, without a member id
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
            if not self.room_for_group():
                return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            group = self.new_group(group_id)
        if group.state is DEAD:
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(spec.protocol_type, spec.protocols):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if not member_id:
            if instance_id is not None and instance_id in group.static:
                return self._rejoin_static(group, instance_id, spec)
            if len(group.members) + len(group.pending) >= self.max_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED)
            new_id = f"{instance_id or spec.client_id}-{uuid.uuid4()}"
            if require_known_member and instance_id is None:
                self._add_pending(group, new_id, spec.session_timeout_ms)
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id)
            return self._add_member(group, new_id, instance_id, spec)
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            return self._add_member(group, member_id, instance_id, spec)
        error = self._check_member(group, member_id, instance_id)
        if error:
            return JoinResult(error, member_id=member_id)
        member = group.members[member_id]
        changed = not member.same_protocols(spec.protocols)
        if group.state is COMPLETING and not changed:
            return self._join_result(group, member)
        if group.state is STABLE and not changed and member_id != group.leader:
            return self._join_result(group, member)
        member.update(spec)
        return self._await_join_phase(group, member, f"member {member_id} rejoined")

    def _check_member(self, group: ClassicGroup, member_id: str, instance_id) -> int:
        if instance_id is not None:
            known = group.static.get(instance_id)
            if known is not None and known != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def _add_pending(self, group: ClassicGroup, member_id: str, session_timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()

        def forget():
            if group.pending.pop(member_id, None) is not None and group.state is PREPARING:
                self._maybe_complete_join(group)

        group.pending[member_id] = loop.call_later(session_timeout_ms / 1000, forget)

    def _add_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, spec: MemberSpec
    ):
        member = Member(member_id, instance_id, spec)
        if not group.members:
            group.protocol_type = spec.protocol_type
        group.members[member_id] = member
        if instance_id is not None:
            group.static[instance_id] = member_id
        group.new_member_added = True
        return self._await_join_phase(group, member, f"member {member_id} joined")

    def _rejoin_static(self, group: ClassicGroup, instance_id: str, spec: MemberSpec):
        old_id = group.static[instance_id]
        old = group.members.pop(old_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(
                    JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id)
                    if waiter is old.join_waiter
                    else (E.FENCED_INSTANCE_ID, b"")
                )
        old.join_waiter = old.sync_waiter = None
        if old.timer:
            old.timer.cancel()
        member = Member(new_id, instance_id, spec)
        member.assignment = old.assignment
        member.is_new = False
        group.members[new_id] = member
        group.static[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        unchanged = old.same_protocols(spec.protocols)
        if group.state is STABLE and (unchanged or group.select_protocol() == group.protocol_name):
            # no rebalance: the member takes its old place and assignment
            self.membership.persist(group)
            result = self._join_result(group, member)
            result.skip_assignment = group.leader == new_id
            return result
        return self._await_join_phase(group, member, f"static member {instance_id} rejoined")

    def _await_join_phase(self, group: ClassicGroup, member: Member, reason: str):
        """Hold the member's JoinGroup until the join phase ends (one starts if none runs)."""
        waiter = self._wait_join(group, member)
        if group.state is PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)
        return waiter

    def _wait_join(self, group: ClassicGroup, member: Member) -> asyncio.Future:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(
                JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        member.join_waiter = asyncio.get_running_loop().create_future()
        return member.join_waiter

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        self.sessions.touch(group, member)
        leader = member.member_id == group.leader
        return JoinResult(
            E.NONE,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            member.member_id,
            [
                (m.member_id, m.instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            ]
            if leader
            else [],
        )

    # rebalancing --------------------------------------------------------------------------------

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state is COMPLETING:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_waiter is not None and not m.sync_waiter.done():
                    m.sync_waiter.set_result((E.REBALANCE_IN_PROGRESS, b""))
                m.sync_waiter = None
        initial = group.state is EMPTY
        group.set_state(PREPARING)
        log.info(
            "group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason
        )
        if group.join_timer:
            group.join_timer.cancel()
        loop = asyncio.get_running_loop()
        if initial and self.initial_delay_ms > 0:
            delay = min(self.initial_delay_ms, group.rebalance_timeout_ms)
            group.initial_delay_left_ms = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            group.join_timer = loop.call_later(delay / 1000, self._initial_delay_over, group)
        else:
            group.initial_delay_left_ms = -1
            group.join_timer = loop.call_later(
                group.rebalance_timeout_ms / 1000, self._complete_join, group
            )
            self._maybe_complete_join(group)

    def _initial_delay_over(self, group: ClassicGroup) -> None:
        left = group.initial_delay_left_ms
        if group.state is not PREPARING or left < 0:
            return
        if group.new_member_added and left > 0:
            group.new_member_added = False
            delay = min(self.initial_delay_ms, left)
            group.initial_delay_left_ms = left - delay
            group.join_timer = asyncio.get_running_loop().call_later(
                delay / 1000, self._initial_delay_over, group
            )
            return
        self._complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        if group.state is PREPARING and group.initial_delay_left_ms < 0 and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if group.state is not PREPARING:
            return
        if group.join_timer:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_left_ms = -1
        for m in [m for m in group.members.values() if m.join_waiter is None]:
            self._drop(group, m, E.UNKNOWN_MEMBER_ID)
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader = None
            group.set_state(EMPTY)
            log.info("group %s is empty (generation %d)", group.group_id, group.generation)
            if group.offsets:
                self.membership.persist(group)
            else:
                self.remove_group(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.set_state(COMPLETING)
        log.info(
            "group %s generation %d: %d members, protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
        )
        for m in group.members.values():
            waiter, m.join_waiter = m.join_waiter, None
            m.is_new = False
            result = self._join_result(group, m)
            if waiter is not None and not waiter.done():
                waiter.set_result(result)

    def _drop(self, group: ClassicGroup, member: Member, error: int) -> None:
        """Take a member out of the group (no state change here)."""
        if member.timer:
            member.timer.cancel()
            member.timer = None
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(error, member_id=member.member_id))
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result((error, b""))
        member.join_waiter = member.sync_waiter = None
        group.members.pop(member.member_id, None)
        if (
            member.instance_id is not None
            and group.static.get(member.instance_id) == member.member_id
        ):
            del group.static[member.instance_id]
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _remove_member(self, group: ClassicGroup, member: Member, reason: str) -> None:
        """A member left or expired: drop it and rebalance as the state requires."""
        self._drop(group, member, E.UNKNOWN_MEMBER_ID)
        if group.state in REBALANCE_ON_CHANGE:
            self._prepare_rebalance(group, reason)
        elif group.state is PREPARING:
            self._maybe_complete_join(group)

    def _session_expired(self, group: ClassicGroup, member: Member) -> None:
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member(group, member, f"member {member.member_id} session expired")

    # sync, heartbeat, leave ---------------------------------------------------------------------

    def sync(
        self,
        group_id,
        generation,
        member_id,
        instance_id,
        protocol_type,
        protocol_name,
        assignments,
    ):
        """(error, assignment), or a future of it."""
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID, b""
        if group is None:
            return E.UNKNOWN_MEMBER_ID, b""
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error, b""
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, b""
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return E.INCONSISTENT_GROUP_PROTOCOL, b""
        answer = SYNC[group.state]
        member = group.members[member_id]
        if answer == ACCEPT:
            self.sessions.touch(group, member)
            return E.NONE, member.assignment
        if answer != "wait":
            return answer, b""
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result((E.REBALANCE_IN_PROGRESS, b""))
        member.sync_waiter = asyncio.get_running_loop().create_future()
        waiter = member.sync_waiter
        if member_id == group.leader:
            given = {a.member_id: bytes(a.assignment) for a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.set_state(STABLE)
            generation = group.generation
            # the waiting members are answered once the group's metadata is stored
            self.membership.persist(group).add_done_callback(
                lambda _: self._answer_syncs(group, generation)
            )
        return waiter

    def _answer_syncs(self, group: ClassicGroup, generation: int) -> None:
        if group.generation != generation:
            return  # a later rebalance has answered or will answer them
        for m in group.members.values():
            if m.sync_waiter is not None:
                w, m.sync_waiter = m.sync_waiter, None
                self.sessions.touch(group, m)
                if not w.done():
                    w.set_result((E.NONE, m.assignment))

    def heartbeat(self, group_id, generation, member_id, instance_id) -> int:
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error
        if group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation != group.generation and group.state is not PREPARING:
            return E.ILLEGAL_GENERATION
        self.sessions.touch(group, group.members[member_id])
        return HEARTBEAT[group.state]

    def leave(self, group_id, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(group error, one error per (member id, instance id) given)."""
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID, [E.INVALID_GROUP_ID] * len(members)
        if group is None or group.state is DEAD:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        errors: list[int] = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = group.static.get(instance_id)
                if known is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and known != member_id:
                    errors.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                errors.append(E.NONE)
                if group.state is PREPARING:
                    self._maybe_complete_join(group)
                continue
            member = group.members.get(member_id)
            if member is None:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, member, f"member {member_id} left")
            errors.append(E.NONE)
        return E.NONE, errors

    # offsets ------------------------------------------------------------------------------------

    def check_commit(
        self,
        group_id,
        generation,
        member_id,
        instance_id,
    ) -> tuple[int, ClassicGroup | None]:
        """May this commit go ahead? (error, the group, created when new for offsets only)."""
        group = self.groups.get(group_id)
        if group is not None and group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, None
        if generation < 0 and not member_id:
            if group is not None and group.members:
                return E.UNKNOWN_MEMBER_ID, None  # an active group only takes its members' commits
            if group is None:
                if not self.room_for_group():
                    return E.COORDINATOR_NOT_AVAILABLE, None
                group = self.new_group(group_id)
            return E.NONE, group
        if group is None:
            if generation >= 0 and not member_id:
                return E.ILLEGAL_GENERATION, None
            return E.UNKNOWN_MEMBER_ID, None
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error, None
        answer = MEMBER_COMMIT[group.state]
        if isinstance(answer, int):  # the state's error
            return answer, None
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, None
        self.sessions.touch(group, group.members[member_id])
        return E.NONE, group
