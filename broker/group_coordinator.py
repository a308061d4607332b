"""The group coordinator: classic consumer groups (join, sync, heartbeat, leave) and their
committed offsets.

How this works
--------------
Every group lives in ``GroupCoordinator.groups``; everything here runs on the event loop, so
no locks are needed. The allowed state changes and the per-state answers are the tables in
``group_state``; this file carries out the steps between them.

A rebalance: a member joins (or leaves, or its session expires, or changes its metadata) ->
the group goes to PreparingRebalance and every member's JoinGroup is held (a future). The
join phase ends when every known member has rejoined, or when the longest rebalance timeout
of the members runs out (the ones that did not rejoin are removed). A group that was Empty
first waits ``group.initial.rebalance.delay.ms`` (extended while new members keep arriving,
up to the rebalance timeout) so that a fleet of consumers starting together gets one
rebalance. When the phase ends the generation goes up, a protocol every member supports is
chosen, and the held JoinGroups are answered: the leader gets every member's metadata and
computes the assignment on the client (the broker never looks inside it). Members then send
SyncGroup, held until the leader's SyncGroup brings the assignments; the group is then
Stable. Eager and cooperative rebalancing differ only in what the clients do between joins.

New members (JoinGroup v4+) first get MEMBER_ID_REQUIRED with an id, and join with it; the
id is pending until then, and forgotten after a session timeout. Static members
(``group.instance.id``) keep their place across restarts of the client: a rejoin with an
empty member id replaces the old member id, keeps its assignment and, when the group is
Stable and the protocol would not change, causes no rebalance. The old id is fenced.

Sessions: each member has a deadline (now + session timeout), moved by heartbeats and by
every answered join or sync. One timer per member fires at the deadline; if the deadline has
moved since, it re-arms, otherwise the member is removed as if it had left. Members waiting
in a JoinGroup or SyncGroup are not expired meanwhile.

Offsets: ``commit`` appends one record batch to the group's partition of
``__consumer_offsets`` (see ``group_offsets``), updates the cache at once (log order) and
answers after the group commit has flushed that log. ``start`` replays the topic, so groups
that only have offsets come back Empty after a restart.

Membership: as in Kafka, a classic group's metadata (generation, protocol, leader, each
member's id, timeouts, subscription and assignment) is written to the same partition when a
rebalance completes (the leader's SyncGroup is answered once it is flushed), when the group
becomes Empty and when a static member takes over its old place; a deleted group gets a
tombstone. ``start`` brings groups with members back Stable, each member with a fresh session,
so members that keep heartbeating (or static members that rejoin) cause no rebalance; members
that are gone expire after their session timeout. Offsets of groups without members
expire ``offsets.retention.minutes`` after the group emptied (or after the commit, for groups
that never had members); a group without members or offsets is removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from headrace.protocol import ErrorCode, decode_message, messages

from . import group_offsets
from .background import run_every
from .consumer_group import ConsumerGroupCoordinator
from .group_offsets import OFFSETS_TOPIC, CommittedOffset, StoredGroup, StoredMember
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
    GroupState,
    transition,
)
from .placement import rendezvous

log = logging.getLogger("headrace.groups")

E = ErrorCode
MAX_GROUP_ID = 32767
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list = field(default_factory=list)  # (member id, instance id, metadata) for the leader
    skip_assignment: bool = False


class Member:
    __slots__ = (
        "member_id", "instance_id", "client_id", "client_host", "session_timeout_ms",
        "rebalance_timeout_ms", "protocol_type", "protocols", "assignment", "join_waiter",
        "sync_waiter", "deadline", "timer", "is_new",
    )

    def __init__(self, member_id, instance_id, client_id, client_host, session_timeout_ms,
                 rebalance_timeout_ms, protocol_type, protocols):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols: list[tuple[str, bytes]] = protocols
        self.assignment = b""
        self.join_waiter: asyncio.Future | None = None
        self.sync_waiter: asyncio.Future | None = None
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.is_new = True

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


class ClassicGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.state_since_ms = now_ms()
        self.empty_since_ms: int | None = None  # None: not known (e.g. loaded from the log)
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.pending: dict[str, asyncio.TimerHandle] = {}  # ids handed out, not yet used to join
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.join_timer: asyncio.TimerHandle | None = None
        self.initial_delay_left_ms = -1  # >= 0 while in the initial join delay
        self.new_member_added = False

    def set_state(self, target: GroupState) -> None:
        transition(self, target)
        self.state_since_ms = now_ms()
        if target is EMPTY:
            self.empty_since_ms = self.state_since_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None for m in self.members.values())

    def select_protocol(self) -> str | None:
        members = list(self.members.values())
        if not members:
            return None
        common = set(n for n, _ in members[0].protocols)
        for m in members[1:]:
            common &= {n for n, _ in m.protocols}
        votes: dict[str, int] = {}
        for m in members:
            for name, _ in m.protocols:
                if name in common:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        order = [n for n, _ in members[0].protocols]
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def supports(self, protocol_type: str, protocols) -> bool:
        """Can a member with these protocols join? (same type, a protocol in common)"""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        for m in self.members.values():
            names &= {n for n, _ in m.protocols}
        return bool(names)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when it cannot be told."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            meta = m.metadata(self.protocol_name)
            try:
                version = int.from_bytes(meta[:2], "big", signed=True)
                sub = decode_message(messages.ConsumerProtocolSubscription, min(version, 3), meta, 2,
                                     exact=False)
            except Exception:
                return None
            topics.update(sub.topics)
        return topics


class GroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.initial_delay_ms = int(cfg["group.initial.rebalance.delay.ms"])
        self.min_session_ms = int(cfg["group.min.session.timeout.ms"])
        self.max_session_ms = int(cfg["group.max.session.timeout.ms"])
        self.max_size = int(cfg["group.max.size"])
        self.retention_ms = int(cfg["offsets.retention.minutes"]) * 60_000
        self.retention_check_ms = int(cfg["offsets.retention.check.interval.ms"])
        self.offsets_partitions = int(cfg["offsets.topic.num.partitions"])
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer = ConsumerGroupCoordinator(self, cfg)  # KIP-848 groups
        self._topic_ready: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._group_writes: dict[str, asyncio.Future] = {}  # group id -> its latest metadata write

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        topic = self.broker.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            logs = [p.log for p in topic.partitions]
            stored: dict[str, StoredGroup] = {}
            loaded = await asyncio.to_thread(group_offsets.replay, logs, stored)
            for group_id, offsets in loaded.items():
                group = self.groups[group_id] = ClassicGroup(group_id)
                group.offsets = offsets
            if loaded:
                log.info("loaded committed offsets of %d groups", len(loaded))
            restored = 0
            for group_id, meta in stored.items():
                if not meta.members and group_id not in self.groups:
                    continue  # an Empty group without offsets is not kept
                group = self.groups.get(group_id) or self.groups.setdefault(group_id, ClassicGroup(group_id))
                self._restore(group, meta)
                restored += bool(meta.members)
            if restored:
                log.info("restored the membership of %d classic groups", restored)
        self._tasks.append(asyncio.create_task(
            run_every(self.retention_check_ms / 1000, self.expire_offsets, "offset expiration")))

    def _restore(self, group: ClassicGroup, meta: StoredGroup) -> None:
        """A group as its last metadata record left it: Stable with its members, or Empty."""
        group.generation = meta.generation
        group.protocol_type = meta.protocol_type or None
        if not meta.members:
            return
        group.protocol_name = meta.protocol
        for sm in meta.members:
            m = Member(sm.member_id, sm.instance_id, sm.client_id, sm.client_host,
                       sm.session_timeout_ms, sm.rebalance_timeout_ms, meta.protocol_type,
                       [(meta.protocol or "", sm.subscription)])
            m.assignment = sm.assignment
            m.is_new = False
            group.members[m.member_id] = m
            if m.instance_id is not None:
                group.static[m.instance_id] = m.member_id
            self._touch(group, m)
        group.leader = meta.leader if meta.leader in group.members else next(iter(group.members))
        group.state = STABLE  # loaded, not a transition
        group.state_since_ms = meta.state_timestamp if meta.state_timestamp > 0 else now_ms()

    def _stored(self, group: ClassicGroup) -> StoredGroup:
        return StoredGroup(
            group.protocol_type or "", group.generation, group.protocol_name, group.leader,
            group.state_since_ms,
            tuple(StoredMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata(group.protocol_name), m.assignment)
                  for m in group.members.values()))

    def _persist_group(self, group: ClassicGroup, tombstone: bool = False) -> asyncio.Future:
        """Write the group's metadata record (or its tombstone) after the group's earlier ones;
        the future gives an error code once it is flushed."""
        value = None if tombstone else group_offsets.group_value(self._stored(group))
        group_id = group.group_id
        previous = self._group_writes.get(group_id)
        task = asyncio.ensure_future(self._write_group(group_id, value, previous))
        self._group_writes[group_id] = task

        def forget(t):
            if self._group_writes.get(group_id) is t:
                del self._group_writes[group_id]
        task.add_done_callback(forget)
        return task

    async def _write_group(self, group_id: str, value: bytes | None, previous) -> int:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            partition = await self.offsets_partition(group_id)
            batch = group_offsets.build_commit_batch([(group_offsets.group_key(group_id), value)],
                                                     now_ms())
            error, _, _ = partition.append(memoryview(batch), len(batch))
            if error:
                log.warning("group %s: storing its metadata failed (error %d)", group_id, error)
                return error
            await self.broker.topics.flush([partition])
        except Exception:
            log.exception("group %s: storing its metadata failed", group_id)
            return E.KAFKA_STORAGE_ERROR
        return E.NONE

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.consumer.stop()
        for group in self.groups.values():
            if group.join_timer:
                group.join_timer.cancel()
            for handle in group.pending.values():
                handle.cancel()
            for m in group.members.values():
                if m.timer:
                    m.timer.cancel()

    def coordinator_for(self, key: str) -> int:
        """The node that coordinates ``key`` (a group id): rendezvous over the brokers."""
        return rendezvous(key, {self.broker.node_id: 1.0})[0]

    # join -------------------------------------------------------------------------------------

    def join(self, group_id, member_id, instance_id, client_id, client_host, session_timeout_ms,
             rebalance_timeout_ms, protocol_type, protocols, require_known_member: bool):
        """A JoinResult, or a future of one when the join waits for the rebalance."""
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=member_id)
        protocols = [(p.name, bytes(p.metadata)) for p in protocols]
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = ClassicGroup(group_id)
        if group.state is DEAD:
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type,
                protocols)
        if not member_id:
            if instance_id is not None and instance_id in group.static:
                return self._rejoin_static(group, instance_id, *args)
            if len(group.members) + len(group.pending) >= self.max_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED)
            new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
            if require_known_member and instance_id is None:
                self._add_pending(group, new_id, session_timeout_ms)
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id)
            return self._add_member(group, new_id, instance_id, *args)
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            return self._add_member(group, member_id, instance_id, *args)
        error = self._check_member(group, member_id, instance_id)
        if error:
            return JoinResult(error, member_id=member_id)
        member = group.members[member_id]
        changed = not member.same_protocols(protocols)
        if group.state is PREPARING:
            self._update_member(member, *args)
            waiter = self._wait_join(group, member)
            self._maybe_complete_join(group)
            return waiter
        if group.state is COMPLETING and not changed:
            return self._join_result(group, member)
        if group.state is STABLE and not changed and member_id != group.leader:
            return self._join_result(group, member)
        self._update_member(member, *args)
        waiter = self._wait_join(group, member)
        self._prepare_rebalance(group, "member %s rejoined" % member_id)
        return waiter

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

    def _add_member(self, group, member_id, instance_id, client_id, client_host,
                    session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols):
        member = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols)
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if instance_id is not None:
            group.static[instance_id] = member_id
        group.new_member_added = True
        waiter = self._wait_join(group, member)
        if group.state is PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, "member %s joined" % member_id)
        return waiter

    def _update_member(self, member, client_id, client_host, session_timeout_ms,
                       rebalance_timeout_ms, protocol_type, protocols) -> None:
        member.client_id = client_id
        member.client_host = client_host
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = protocols

    def _rejoin_static(self, group, instance_id, client_id, client_host, session_timeout_ms,
                       rebalance_timeout_ms, protocol_type, protocols):
        old_id = group.static[instance_id]
        old = group.members.pop(old_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id)
                                  if waiter is old.join_waiter else (E.FENCED_INSTANCE_ID, b""))
        old.join_waiter = old.sync_waiter = None
        if old.timer:
            old.timer.cancel()
        member = Member(new_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, old.protocols)
        member.assignment = old.assignment
        member.is_new = False
        group.members[new_id] = member
        group.static[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        unchanged = member.same_protocols(protocols)
        member.protocols = protocols
        if group.state is STABLE and (unchanged or group.select_protocol() == group.protocol_name):
            # no rebalance: the member takes its old place and assignment
            self._persist_group(group)
            result = self._join_result(group, member)
            result.skip_assignment = group.leader == new_id
            return result
        waiter = self._wait_join(group, member)
        if group.state is PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, "static member %s rejoined" % instance_id)
        return waiter

    def _wait_join(self, group: ClassicGroup, member: Member) -> asyncio.Future:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_waiter = asyncio.get_running_loop().create_future()
        return member.join_waiter

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        self._touch(group, member)
        leader = member.member_id == group.leader
        return JoinResult(
            E.NONE, group.generation, group.protocol_type, group.protocol_name, group.leader or "",
            member.member_id,
            [(m.member_id, m.instance_id, m.metadata(group.protocol_name)) for m in group.members.values()]
            if leader else [],
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
        log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason)
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
            group.join_timer = loop.call_later(group.rebalance_timeout_ms / 1000,
                                               self._complete_join, group)
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
                delay / 1000, self._initial_delay_over, group)
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
            if not group.offsets:
                self._remove_group(group)
            self._persist_group(group, tombstone=not group.offsets)
            return
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.set_state(COMPLETING)
        log.info("group %s generation %d: %d members, protocol %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name)
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
        if member.instance_id is not None and group.static.get(member.instance_id) == member.member_id:
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

    def _remove_group(self, group: ClassicGroup) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        if group.state is not DEAD:
            group.set_state(DEAD)

    # sessions -----------------------------------------------------------------------------------

    def _touch(self, group: ClassicGroup, member: Member) -> None:
        loop = asyncio.get_running_loop()
        member.deadline = loop.time() + member.session_timeout_ms / 1000
        if member.timer is None:
            member.timer = loop.call_at(member.deadline, self._session_check, group, member)

    def _session_check(self, group: ClassicGroup, member: Member) -> None:
        member.timer = None
        if group.members.get(member.member_id) is not member:
            return
        loop = asyncio.get_running_loop()
        waiting = member.join_waiter is not None or member.sync_waiter is not None
        if waiting or member.deadline > loop.time():
            at = max(member.deadline, loop.time() + member.session_timeout_ms / 1000 if waiting else 0)
            member.timer = loop.call_at(at, self._session_check, group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member(group, member, "member %s session expired" % member.member_id)

    # sync, heartbeat, leave ---------------------------------------------------------------------

    def sync(self, group_id, generation, member_id, instance_id, protocol_type, protocol_name,
             assignments):
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
                protocol_name is not None and protocol_name != group.protocol_name):
            return E.INCONSISTENT_GROUP_PROTOCOL, b""
        answer = SYNC[group.state]
        member = group.members[member_id]
        if answer == ACCEPT:
            self._touch(group, member)
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
            self._persist_group(group).add_done_callback(
                lambda _: self._answer_syncs(group, generation))
        return waiter

    def _answer_syncs(self, group: ClassicGroup, generation: int) -> None:
        if group.generation != generation:
            return  # a later rebalance has answered or will answer them
        for m in group.members.values():
            if m.sync_waiter is not None:
                w, m.sync_waiter = m.sync_waiter, None
                self._touch(group, m)
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
        self._touch(group, group.members[member_id])
        return HEARTBEAT[group.state]

    def leave(self, group_id, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(group error, one error per (member id, instance id) given)."""
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID, [E.INVALID_GROUP_ID] * len(members)
        if group is None or group.state is DEAD:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        errors = []
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
            self._remove_member(group, member, "member %s left" % member_id)
            errors.append(E.NONE)
        return E.NONE, errors

    # offsets ------------------------------------------------------------------------------------

    def check_commit(self, group_id, generation, member_id, instance_id) -> tuple[int, ClassicGroup | None]:
        """May this commit go ahead? (error, the group, created when new for offsets only)."""
        if not group_id:
            return E.INVALID_GROUP_ID, None
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            error = self.consumer.check_commit(cgroup, member_id, generation)
            return error, None if error else cgroup
        group = self.groups.get(group_id)
        if group is not None and group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, None
        if generation < 0 and not member_id:
            if group is not None and group.members:
                return E.UNKNOWN_MEMBER_ID, None  # an active group only takes its members' commits
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id)
            return E.NONE, group
        if group is None:
            return E.ILLEGAL_GENERATION if generation >= 0 and not member_id else E.UNKNOWN_MEMBER_ID, None
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error, None
        answer = MEMBER_COMMIT[group.state]
        if answer != ACCEPT:
            return answer, None
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, None
        self._touch(group, group.members[member_id])
        return E.NONE, group

    async def offsets_partition(self, group_id: str):
        """The partition of ``__consumer_offsets`` holding ``group_id`` (the topic is made on
        first use, with ``offsets.topic.num.partitions`` partitions)."""
        topics = self.broker.topics
        topic = topics.get(OFFSETS_TOPIC)
        if topic is None:
            if self._topic_ready is None:
                self._topic_ready = asyncio.ensure_future(
                    topics.create(OFFSETS_TOPIC, self.offsets_partitions,
                                  {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}))
            try:
                topic = await asyncio.shield(self._topic_ready)
            except FileExistsError:
                topic = topics.get(OFFSETS_TOPIC)
        return topic.partitions[group_offsets.partition_for(group_id, len(topic.partitions))]

    async def write_offsets(self, group: ClassicGroup,
                            entries: list[tuple[str, int, CommittedOffset | None]]) -> int:
        """Append and flush; update the cache in log order. Returns an error code."""
        if not entries:
            return E.NONE
        partition = await self.offsets_partition(group.group_id)
        records = [
            (group_offsets.offset_key(group.group_id, t, p),
             None if c is None else group_offsets.offset_value(c))
            for t, p, c in entries
        ]
        batch = group_offsets.build_commit_batch(records, now_ms())
        error, _, _ = partition.append(memoryview(batch), len(batch))
        if error:
            return error
        for t, p, c in entries:
            if c is None:
                group.offsets.pop((t, p), None)
            else:
                group.offsets[(t, p)] = c
        try:
            await self.broker.topics.flush([partition])
        except Exception:
            log.exception("flushing %s failed", OFFSETS_TOPIC)
            return E.KAFKA_STORAGE_ERROR
        return E.NONE

    def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id) or self.consumer.groups.get(group_id)
        return {} if group is None else group.offsets

    # administration -----------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> int:
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            if cgroup.members:
                return E.NON_EMPTY_GROUP
            error = await self.write_offsets(cgroup, [(t, p, None) for t, p in list(cgroup.offsets)])
            if not error and not cgroup.members:
                self.consumer.groups.pop(group_id, None)
            return error
        group = self.groups.get(group_id)
        if group is None or group.state is DEAD:
            return E.GROUP_ID_NOT_FOUND
        if group.members or group.state is not EMPTY:
            return E.NON_EMPTY_GROUP
        error = await self.write_offsets(group, [(t, p, None) for t, p in list(group.offsets)])
        if error:
            return error
        if not group.members and self.groups.get(group_id) is group:
            self._remove_group(group)
            return await self._persist_group(group, tombstone=True)
        return E.NONE

    async def expire_offsets(self, now: int | None = None) -> int:
        """Tombstone offsets past retention in groups without members; returns how many."""
        now = now_ms() if now is None else now
        expired = 0
        for group in list(self.groups.values()) + list(self.consumer.groups.values()):
            if group.members or getattr(group, "state", EMPTY) is not EMPTY:
                continue
            doomed = []
            for (t, p), c in group.offsets.items():
                if c.expire_timestamp >= 0:
                    deadline = c.expire_timestamp
                else:
                    base = c.commit_timestamp
                    if group.protocol_type is not None and group.empty_since_ms is not None:
                        base = group.empty_since_ms
                    deadline = base + self.retention_ms
                if now >= deadline:
                    doomed.append((t, p, None))
            if doomed and not await self.write_offsets(group, doomed):
                expired += len(doomed)
            if not group.offsets and not group.members:
                if isinstance(group, ClassicGroup):
                    self._remove_group(group)
                    self._persist_group(group, tombstone=True)
                else:
                    self.consumer.groups.pop(group.group_id, None)
        if expired:
            log.info("expired %d committed offsets", expired)
        return expired
