"""A KIP-1071 streams group and its members, as data: epochs, tasks, the group's state.

How this works
--------------
A member is one stream thread of a Kafka Streams instance; the instance is its *process*
(``process_id``), and tasks, (subtopology id, partition), are placed per process. The group
has a *group epoch*, bumped by whatever changes what the assignment depends on, and an
*assignment epoch*, the group epoch its *target* (member id -> (active, standby) tasks) was
computed at. Each member has its own epoch and the tasks it is given now (``active``, each
with the epoch it was given at, and ``standby``), plus those it is giving back and has not
yet confirmed (``revoking_active``, ``revoking_standby``); its ``state`` says how it stands
towards its target (``streams_assignment``): STABLE, UNREVOKED_TASKS (it must give some back
first) or UNRELEASED_TASKS (some of its target are still another's).

Kafka's group states follow from that (``state_name``): Empty without members, NotReady
while the topology is missing or not matched to the cluster's topics, Assigning while the
group epoch is ahead of the assignment epoch, Reconciling while a member is not STABLE at the
assignment epoch, else Stable.

Task epochs make offset commits safe across a rebalance (``check_commit``, Kafka's
``StreamsGroup.validateOffsetCommit``): a member's commit at its current epoch is accepted;
with an older epoch only for the partitions of active tasks it has held since at most that
epoch (also those it is giving back), else STALE_MEMBER_EPOCH.
"""

from __future__ import annotations

import asyncio

from headrace.protocol import ErrorCode

from .modern_group import ModernGroup, ModernMember
from .streams_topology import ConfiguredTopology, Topology

E = ErrorCode
Task = tuple[str, int]
STABLE, UNREVOKED_TASKS, UNRELEASED_TASKS = "STABLE", "UNREVOKED_TASKS", "UNRELEASED_TASKS"
EMPTY_TASKS: tuple[dict, set] = ({}, set())


class StreamsMember(ModernMember):
    __slots__ = (
        "process_id",
        "user_endpoint",
        "client_tags",
        "topology_epoch",
        "rebalance_timeout_ms",
        "state",
        "active",
        "standby",
        "revoking_active",
        "revoking_standby",
        "task_offsets",
        "task_end_offsets",
    )

    def __init__(self, member_id: str) -> None:
        super().__init__(member_id)
        self.process_id = ""
        self.user_endpoint: tuple[str, int] | None = None
        self.client_tags: dict[str, str] = {}
        self.topology_epoch = -1
        self.rebalance_timeout_ms = -1
        self.state = STABLE
        self.active: dict[Task, int] = {}  # task -> the epoch it was given at
        self.standby: set[Task] = set()
        self.revoking_active: dict[Task, int] = {}  # given back, not yet confirmed
        self.revoking_standby: set[Task] = set()
        self.task_offsets: dict[Task, int] = {}
        self.task_end_offsets: dict[Task, int] = {}

    def metadata(self) -> tuple:
        """What a change of bumps the group epoch."""
        return (
            self.instance_id,
            self.rack_id,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
            self.topology_epoch,
        )

    def assigned(self) -> tuple[frozenset[Task], frozenset[Task]]:
        return frozenset(self.active), frozenset(self.standby)


class StreamsGroup(ModernGroup):
    group_type = "streams"
    protocol_type = "streams"
    members: dict[str, StreamsMember]
    target: dict[str, tuple[set[Task], set[Task]]]

    def __init__(self, group_id: str) -> None:
        # a new group starts at epoch 1 (as Kafka's): a member's epoch 0 means joining
        super().__init__(group_id, epoch=1)
        self.topology: Topology | None = None
        self.configured: ConfiguredTopology | None = None
        self.validated_epoch = -1
        self.standby_replicas = 0  # streams.num.standby.replicas at the last assignment
        self.offsets: dict = {}
        self.shutdown_requested_by: str | None = None
        self.endpoint_epoch = 0
        self.delay: asyncio.TimerHandle | None = None  # the initial rebalance delay

    @property
    def state_name(self) -> str:
        """Kafka's streams group states: Empty, NotReady, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.topology is None or self.topology.epoch != self.validated_epoch:
            return "NotReady"
        if self.epoch > self.assignment_epoch:
            return "Assigning"
        if any(
            m.state != STABLE or m.epoch != self.assignment_epoch for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def remove(self, member: ModernMember, now_ms: int) -> bool:
        if not super().remove(member, now_ms):
            return False
        assert isinstance(member, StreamsMember)
        if member.user_endpoint is not None:
            self.endpoint_epoch += 1
        if not self.members:
            self.assignment_epoch = self.epoch  # nothing to assign
            self.shutdown_requested_by = None
        return True

    def cancel_timers(self) -> None:
        super().cancel_timers()
        if self.delay is not None:
            self.delay.cancel()
            self.delay = None

    def source_subtopology(self, topic: str) -> str | None:
        """The subtopology reading ``topic`` (a source or repartition source topic)."""
        if self.topology is None:
            return None
        for s in self.topology.subtopologies:
            if topic in s.inputs:
                return s.subtopology_id
        return None

    def endpoints(self) -> list:
        """Each member endpoint's partitions: those of the tasks its members run (active) or
        keep (standby), for interactive queries."""
        if self.topology is None:
            return []
        subs = self.topology.by_id()
        out: dict[tuple[str, int], tuple[dict, dict]] = {}
        for m in self.members.values():
            if m.user_endpoint is None:
                continue
            active, standby = out.setdefault(m.user_endpoint, ({}, {}))
            for tasks, into in ((m.active, active), (m.standby, standby)):
                for sub_id, p in tasks:
                    sub = subs.get(sub_id)
                    for topic in sub.inputs if sub is not None else ():
                        into.setdefault(topic, set()).add(p)
        return [
            (
                endpoint,
                [(t, sorted(ps)) for t, ps in sorted(a.items())],
                [(t, sorted(ps)) for t, ps in sorted(s.items())],
            )
            for endpoint, (a, s) in sorted(out.items())
        ]

    def check_commit(self, member_id: str, epoch: int, api_version: int | None = None):
        """(error, per-partition check or None) for an offset commit of a member
        (``api_version`` of OffsetCommit; None for TxnOffsetCommit), as Kafka's
        ``StreamsGroup.validateOffsetCommit``."""
        if epoch < 0 and not self.members:
            return E.NONE, None
        if epoch == -1 and not member_id and api_version is None:
            return E.NONE, None  # a transactional commit without a member
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID, None
        if api_version is not None and api_version < 9:
            return E.UNSUPPORTED_VERSION, None  # "OffsetCommit version 9 or above must be used"
        if epoch == member.epoch:
            return E.NONE, None
        if epoch > member.epoch:
            return E.STALE_MEMBER_EPOCH, None

        def check(topic: str, partition: int) -> int:
            sub = self.source_subtopology(topic)
            if sub is None:
                return E.STALE_MEMBER_EPOCH
            given = member.active.get(
                (sub, partition), member.revoking_active.get((sub, partition))
            )
            if given is None or epoch < given:
                return E.STALE_MEMBER_EPOCH
            return E.NONE

        return E.NONE, check
