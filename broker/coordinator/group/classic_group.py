"""The classic group model: a group, its members and the answer to a JoinGroup.

A ``ClassicGroup`` is plain data plus the questions the rebalance asks of it (which protocol
the members agree on, can a member with these protocols join, what do the members subscribe
to); ``classic_coordinator`` changes it. Its ``state`` moves only as ``group_state`` allows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from headrace.broker.background import wall_clock_ms
from headrace.protocol import decode_message, messages

from .group_offsets import CommittedOffset
from .group_state import EMPTY, GroupState, transition


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


@dataclass(slots=True)
class MemberSpec:
    """What a JoinGroup says about its member."""

    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str | None
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference


class Member:
    __slots__ = (
        "member_id",
        "instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "join_waiter",
        "sync_waiter",
        "deadline",
        "timer",
        "is_new",
    )

    def __init__(self, member_id: str, instance_id: str | None, spec: MemberSpec) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.protocol_type = spec.protocol_type
        self.update(spec)
        self.assignment = b""
        self.join_waiter: asyncio.Future | None = None
        self.sync_waiter: asyncio.Future | None = None
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.is_new = True

    def update(self, spec: MemberSpec) -> None:
        """Take what the member's latest JoinGroup says (its protocol type stays)."""
        self.client_id = spec.client_id
        self.client_host = spec.client_host
        self.session_timeout_ms = spec.session_timeout_ms
        self.rebalance_timeout_ms = spec.rebalance_timeout_ms
        self.protocols: list[tuple[str, bytes]] = spec.protocols

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


class ClassicGroup:
    def __init__(self, group_id: str, clock=wall_clock_ms) -> None:
        self.group_id = group_id
        self.clock = clock
        self.state = EMPTY
        self.state_since_ms = clock()
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
        self.state_since_ms = self.clock()
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

    def supports(self, protocol_type: str | None, protocols) -> bool:
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
                sub = decode_message(
                    messages.ConsumerProtocolSubscription, min(version, 3), meta, 2, exact=False
                )
            except Exception:
                return None
            topics.update(sub.topics)
        return topics
