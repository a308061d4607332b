"""KIP-1071 streams groups: the broker assigns a Kafka Streams application's tasks.

How this works
--------------
A member (one stream thread of a Kafka Streams instance, the instance named by its process
id) sends StreamsGroupHeartbeat with its epoch: 0 to join, with the application's topology;
-1 to leave; -2 for a static member (``group.instance.id``) leaving for now; otherwise the
epoch it was last given, with the tasks it owns whenever they changed. The first member's
topology becomes the group's; later members must send the same (an older epoch is ignored
with status STALE_TOPOLOGY; a different one of the same or a newer epoch is refused, as
Kafka 4.4 does not support topology updates).

The topology is matched against the cluster's topics (``streams_topology.configure``): while
source topics are missing, or internal topics (repartition, changelog) are being created, the
group is NotReady and its members get no tasks, only a status saying why. The internal topics
to create go back to the API, which creates them (as Kafka's broker does, with CREATE on the
cluster or the topics) and answers MISSING_INTERNAL_TOPICS meanwhile.

Joining, leaving, a member's metadata changing (process id, rack, client tags, endpoint,
topology epoch), the configured topology changing (a topic appears or grows) or the group's
``streams.num.standby.replicas`` changing bumps the *group epoch*; the next heartbeat
computes a new target assignment and the member takes one step towards its own
(``streams_assignment``). A new group's first assignment waits
``streams.initial.rebalance.delay.ms`` (status ASSIGNMENT_DELAYED meanwhile) for more members
to arrive. A member that must give tasks back has to report them gone within its rebalance
timeout, or it is removed from the group.

Errors, with Kafka's messages: FENCED_MEMBER_EPOCH for an epoch the member does not have
(greater, or smaller and not its previous one while owning only what it was given);
UNKNOWN_MEMBER_ID for an unknown member; UNRELEASED_INSTANCE_ID and FENCED_INSTANCE_ID for
static members; GROUP_MAX_SIZE_REACHED at ``group.streams.max.size``. Sessions expire after
``streams.session.timeout.ms`` without a heartbeat. A member may ask the whole application
to shut down (status SHUTDOWN_APPLICATION to every member until the group is empty).

Streams groups are kept in ``__consumer_offsets`` in Kafka's records (``streams_records``):
after a restart or a move of the coordinator the members carry on with their ids, epochs and
tasks; the configured topology is computed again at the next heartbeat, and the group epoch
moves on only when the topics it was configured from changed meanwhile.
Committed offsets are a consumer group's: ``__consumer_offsets`` (``offset_store``), checked
against task epochs (``StreamsGroup.check_commit``). Not built: warm-up tasks
(``streams.num.warmup.replicas`` is 0 here), the assignment interval, rack-aware standby
placement (client tags are kept and described only), regular expressions for source topics
(refused as in Kafka 4.4), topology descriptions (KIP-1331's plugin).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from headrace.broker.background import wall_clock_ms
from headrace.protocol import ErrorCode

from . import streams_topology
from .group_configs import (
    STREAMS_INITIAL_REBALANCE_DELAY,
    STREAMS_NUM_STANDBY_REPLICAS,
    STREAMS_SESSION_TIMEOUT,
    GroupConfigs,
)
from .modern_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ModernGroupCoordinator,
    ModernMember,
    metadata_hash,
    unknown_member,
)
from .modern_group_log import ModernGroupLog
from .streams_assignment import new_target, reconcile
from .streams_group import UNREVOKED_TASKS, StreamsGroup, StreamsMember, Task
from .streams_topology import ASSIGNMENT_DELAYED, SHUTDOWN_APPLICATION, STALE_TOPOLOGY

log = logging.getLogger("headrace.groups")

E = ErrorCode


@dataclass(slots=True)
class HeartbeatAnswer:
    error: int = E.NONE
    message: str | None = None
    member_id: str | None = None
    epoch: int = 0
    status: list[tuple[int, str]] = field(default_factory=list)
    # (active, standby) task lists when the member is to be sent its assignment
    tasks: tuple[list[Task], list[Task]] | None = None
    endpoint_epoch: int = 0
    # [((host, port), active partitions, standby partitions)], each [(topic, [partitions])]
    endpoints: list | None = None
    to_create: dict = field(default_factory=dict)  # name -> TopicInfo: internal topics to make


def _error(code: int, message: str | None) -> HeartbeatAnswer:
    return HeartbeatAnswer(error=code, message=message)


def _tasks(ids) -> set[Task]:
    return {(t.subtopology_id, p) for t in ids or () for p in t.partitions}


class _Fenced(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StreamsGroupCoordinator(ModernGroupCoordinator[StreamsGroup]):
    """The streams groups of this broker's partitions of ``__consumer_offsets``."""

    def __init__(
        self,
        topics,
        classic,
        *,
        configs: GroupConfigs,
        max_size: int,  # group.streams.max.size
        max_topology_bytes: int,  # group.streams.max.topology.bytes (checked by the API)
        other_kind: Callable[[str], bool],  # is this id a consumer or share group's?
        room_for_group: Callable[[], bool],  # group.max.groups
        group_log: ModernGroupLog,  # the groups' records in __consumer_offsets
        records,  # the kind's records module's ``records``
        now_ms=wall_clock_ms,
    ) -> None:
        super().__init__(
            topics, configs, max_size, STREAMS_SESSION_TIMEOUT, group_log, records, now_ms
        )
        self.classic = classic
        self.max_topology_bytes = max_topology_bytes
        self.other_kind = other_kind
        self.room_for_group = room_for_group
        # internal topics being created for the groups (by the API), and why the last
        # creation of one failed: (monotonic time, reason)
        self.creating: set[str] = set()
        self.creation_errors: dict[str, tuple[float, str]] = {}

    # the heartbeat ------------------------------------------------------------------------------

    @staticmethod
    def invalid(request) -> str | None:
        """Why a StreamsGroupHeartbeat is malformed (Kafka's messages, in its order), or None."""
        for value, what in (
            (request.member_id, "MemberId"),
            (request.group_id, "GroupId"),
            (request.instance_id, "InstanceId"),
            (request.rack_id, "RackId"),
        ):
            if value is not None and not value.strip():
                return f"{what} can't be empty."
        epoch = request.member_epoch
        topology = request.topology
        if topology is not None:
            for s in topology.subtopologies:
                if s.source_topic_regex:
                    return "Regular expressions for source topics are not supported yet."
        owned = (request.active_tasks, request.standby_tasks, request.warmup_tasks)
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            for tasks, name in zip(owned, ("ActiveTasks", "StandbyTasks", "WarmupTasks")):
                if tasks:
                    return f"{name} must be empty when (re-)joining."
            if topology is None:
                return "Topology must be non-null when (re-)joining."
            why = streams_topology.invalid(topology)
            if why is not None:
                return why
        elif epoch == STATIC_LEAVE_EPOCH:
            if request.instance_id is None:
                return "InstanceId can't be null."
        elif epoch < STATIC_LEAVE_EPOCH:
            return f"MemberEpoch is {epoch}, but must be greater than or equal to -2."
        if any(t is not None for t in owned) and any(t is None for t in owned):
            return "If one task-type is non-null, all must be non-null."
        if epoch != 0 and topology is not None:
            return "Topology can only be provided when (re-)joining."
        return None

    def heartbeat(self, request, client_id: str, client_host: str = "") -> HeartbeatAnswer:
        why = self.invalid(request)
        if why is not None:
            return _error(E.INVALID_REQUEST, why)
        try:
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request)
            return self._heartbeat(request, client_id, client_host)
        except _Fenced as f:
            return _error(f.code, f.message)

    def _group_for(self, request) -> StreamsGroup:
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic.groups.get(group_id)
        convertible = classic is not None and not classic.members
        if (classic is not None and not convertible) or self.other_kind(group_id):
            raise _Fenced(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if request.member_epoch != 0:  # not kept here (a restart, a move): the member rejoins
            raise _Fenced(E.UNKNOWN_MEMBER_ID, unknown_member(request.member_id, group_id))
        if classic is None and not self.room_for_group():
            raise _Fenced(E.COORDINATOR_NOT_AVAILABLE, "group.max.groups reached")
        group = self.groups[group_id] = StreamsGroup(group_id)
        if classic is not None:  # an empty classic group (offsets only): keep its offsets
            group.offsets = classic.offsets
            self.classic.remove_group(classic)
            log.info("streams group %s: converted the empty classic group", group_id)
        return group

    def _member_for(
        self, group: StreamsGroup, request
    ) -> tuple[StreamsMember, StreamsMember | None]:
        """(the member, the static member it replaces or None); nothing changed yet."""
        member_id, instance_id, epoch = request.member_id, request.instance_id, request.member_epoch
        joining = epoch == 0
        if joining and group.static_member(instance_id) is None:
            if member_id not in group.members and len(group.members) >= self.max_size:
                raise _Fenced(
                    E.GROUP_MAX_SIZE_REACHED,
                    "The streams group has reached its maximum capacity of"
                    f" {self.max_size} members.",
                )
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise _Fenced(E.UNKNOWN_MEMBER_ID, unknown_member(member_id, group.group_id))
                member = StreamsMember(member_id)
            _check_epoch(member, epoch, request)
            return member, None
        static = group.static_member(instance_id)
        if joining:
            if static is None:
                return group.members.get(member_id) or StreamsMember(member_id), None
            if static.epoch != STATIC_LEAVE_EPOCH:
                raise _Fenced(
                    E.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the"
                    f" group because the instance id is owned by {static.member_id} member.",
                )
            member = StreamsMember(member_id)
            for name in (*ModernMember.__slots__, *StreamsMember.__slots__):
                if name not in ("member_id", "timer", "revoke_timer", "deadline"):
                    setattr(member, name, getattr(static, name))
            member.active = dict(static.active)
            member.standby = set(static.standby)
            member.epoch = member.previous_epoch = 0
            return member, static
        static = _static_member(group, member_id, instance_id)
        _check_epoch(static, epoch, request)
        return static, None

    def _heartbeat(self, request, client_id: str, client_host: str) -> HeartbeatAnswer:
        group = self._group_for(request)
        member, replaced = self._member_for(group, request)
        joining = request.member_epoch == 0
        topology, configured, reconfigured = self._configure(group, request)
        # from here on the request is accepted: apply it
        if group.topology is None:
            log.info(
                "streams group %s: member %s initialized the topology with epoch %d",
                group.group_id,
                member.member_id,
                topology.epoch,
            )
        group.topology = topology
        group.configured = configured
        group.metadata_hash = metadata_hash(list(configured.signature))
        was_empty = not group.members
        before = None if member.member_id not in group.members else member.metadata()
        assigned_before = member.assigned() if before is not None else None
        self._join(group, member, replaced)
        self._update(member, request, client_id, client_host, joining)
        recompute = reconfigured
        if replaced is None and (before is None or before != member.metadata()):
            recompute = True
        elif replaced is not None and replaced.metadata() != member.metadata():
            recompute = True
        status: list[tuple[int, str]] = []
        if member.topology_epoch < topology.epoch:
            status.append(
                (
                    STALE_TOPOLOGY,
                    f"The member's topology epoch {member.topology_epoch} is behind the group's"
                    f" topology epoch {topology.epoch}.",
                )
            )
        if request.task_offsets is not None:
            member.task_offsets = {
                (t.subtopology_id, t.partition): t.offset for t in request.task_offsets
            }
        if request.task_end_offsets is not None:
            member.task_end_offsets = {
                (t.subtopology_id, t.partition): t.offset for t in request.task_end_offsets
            }
        validated = topology.epoch if configured.ready else -1
        if validated != group.validated_epoch:
            group.validated_epoch = validated
            recompute = True
        standby = self.configs.value(group.group_id, STREAMS_NUM_STANDBY_REPLICAS)
        if standby != group.standby_replicas:
            recompute = True
        if recompute:
            group.epoch += 1
            log.info("streams group %s: epoch %d", group.group_id, group.epoch)
        delay_ms = self.configs.value(group.group_id, STREAMS_INITIAL_REBALANCE_DELAY)
        if was_empty and delay_ms > 0 and group.delay is None:
            group.delay = asyncio.get_running_loop().call_later(
                delay_ms / 1000, self._delay_over, group
            )
        if group.delay is not None:
            status.append(
                (
                    ASSIGNMENT_DELAYED,
                    "Assignment delayed due to the configured initial rebalance delay.",
                )
            )
        else:
            self._refresh_target(group)
        owned = None
        if request.active_tasks is not None:
            owned = (_tasks(request.active_tasks), _tasks(request.standby_tasks))
        self._reconcile(group, member, owned)
        self.sessions.touch(group, member)
        if request.shutdown_application:
            group.shutdown_requested_by = member.member_id
        answer = HeartbeatAnswer(member_id=member.member_id, epoch=member.epoch)
        if joining or member.assigned() != assigned_before:
            answer.tasks = (sorted(member.active), sorted(member.standby))
            if member.user_endpoint is not None:
                group.endpoint_epoch += 1
        elif before is not None and before[3] != member.user_endpoint:
            group.endpoint_epoch += 1
        answer.endpoint_epoch = group.endpoint_epoch
        if request.endpoint_information_epoch != group.endpoint_epoch:
            answer.endpoints = group.endpoints()
        if configured.status is not None:
            status.append(configured.status)
            answer.to_create = dict(configured.to_create)
        if group.shutdown_requested_by is not None:
            status.append(
                (
                    SHUTDOWN_APPLICATION,
                    f"Streams group member {group.shutdown_requested_by} encountered a fatal error"
                    " and requested a shutdown for the entire application.",
                )
            )
        answer.status = status
        return answer

    def _configure(self, group: StreamsGroup, request):
        """(the topology, configured against the cluster's topics, whether that changed):
        the group's topology, or the first member's; nothing changed yet."""
        topology = group.topology
        if request.topology is not None:
            sent = streams_topology.from_request(request.topology)
            if topology is None:
                topology = sent
            elif topology.epoch <= sent.epoch and topology != sent:
                raise _Fenced(E.INVALID_REQUEST, "Topology updates are not supported yet.")
        assert topology is not None
        configured = group.configured
        reconfigured = False
        sig = streams_topology.signature(topology, self._partitions)
        if configured is None or configured.signature != sig or group.topology is None:
            configured = streams_topology.configure(topology, self._partitions)
            if group.configured is not None:
                reconfigured = group.configured.signature != sig
            else:  # new, or loaded: configured from other topics than those it was stored at?
                reconfigured = metadata_hash(list(sig)) != group.metadata_hash
        if configured.error is not None:
            if not group.members:
                self._forget_if_unused(group)
            raise _Fenced(*configured.error)
        if configured.ready:
            assert configured.tasks is not None
            _check_owned(configured.tasks, request)
        return topology, configured, reconfigured

    def _join(self, group: StreamsGroup, member: StreamsMember, replaced) -> None:
        """``member`` into the group (if not in it), in the place of ``replaced`` if not None."""
        if replaced is not None:
            replaced.cancel_timers()
            del group.members[replaced.member_id]
            if replaced.member_id in group.target:
                group.target[member.member_id] = group.target.pop(replaced.member_id)
            log.info(
                "streams group %s: static member %s (instance %s) rejoined as %s",
                group.group_id,
                replaced.member_id,
                replaced.instance_id,
                member.member_id,
            )
        if member.member_id not in group.members:
            group.members[member.member_id] = member
            group.empty_since_ms = None
            if replaced is None:
                log.info("streams group %s: member %s joined", group.group_id, member.member_id)

    def _partitions(self, name: str) -> int | None:
        t = self.topics.get(name)
        return None if t is None else t.count

    @staticmethod
    def _update(member: StreamsMember, request, client_id: str, client_host: str, joining: bool):
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.topology is not None:
            member.topology_epoch = request.topology.epoch
        member.client_id, member.client_host = client_id, client_host
        if request.process_id is not None:
            member.process_id = request.process_id
        if request.client_tags is not None:
            member.client_tags = {kv.key: kv.value for kv in request.client_tags}
        endpoint = request.user_endpoint
        if joining or endpoint is not None:
            member.user_endpoint = None if endpoint is None else (endpoint.host, endpoint.port)

    # the assignment ---------------------------------------------------------------------------

    def _delay_over(self, group: StreamsGroup) -> None:
        group.delay = None
        if self.groups.get(group.group_id) is group:
            self._refresh_target(group)
            self.persist_soon(self.persist(group))

    def _refresh_target(self, group: StreamsGroup) -> None:
        """A new target assignment when the group epoch moved past the assignment epoch."""
        if group.assignment_epoch < group.epoch:
            new_target(group, self.configs.value(group.group_id, STREAMS_NUM_STANDBY_REPLICAS))

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, owned) -> None:
        """A step of ``member`` towards its target, and the deadline of a revocation."""
        if not reconcile(group, member, owned):
            return
        if member.state == UNREVOKED_TASKS:
            self._revoke_timer(group, member)
        elif member.revoke_timer is not None:
            member.revoke_timer.cancel()
            member.revoke_timer = None

    def _revocation_overdue(self, group: StreamsGroup, member: StreamsMember, epoch: int) -> None:
        member.revoke_timer = None
        if group.members.get(member.member_id) is member and member.epoch == epoch:
            if member.state == UNREVOKED_TASKS:
                self._expire(
                    group,
                    member,
                    f"failed to transition from epoch {epoch} within"
                    f" {member.rebalance_timeout_ms}ms",
                )

    # leaving ------------------------------------------------------------------------------------

    def _leave(self, request) -> HeartbeatAnswer:
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        group = self.groups.get(group_id)
        if group is None:
            if self.other_kind(group_id) or self.classic.groups.get(group_id) is not None:
                return _error(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
            return _error(E.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        if request.shutdown_application:
            group.shutdown_requested_by = member_id
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                return _error(E.UNKNOWN_MEMBER_ID, unknown_member(member_id, group_id))
        else:
            member = _static_member(group, member_id, instance_id)
            if epoch == STATIC_LEAVE_EPOCH:  # keeps its place until its session ends
                if member.revoke_timer is not None:
                    member.revoke_timer.cancel()
                    member.revoke_timer = None
                member.epoch = STATIC_LEAVE_EPOCH
                member.revoking_active, member.revoking_standby = {}, set()
                member.active = {t: 0 for t in member.active}
                log.info(
                    "streams group %s: static member %s (instance %s) left for now",
                    group_id,
                    member_id,
                    instance_id,
                )
                return HeartbeatAnswer(member_id=member_id, epoch=STATIC_LEAVE_EPOCH)
        self._remove(group, member, "left the group")
        return HeartbeatAnswer(member_id=member_id, epoch=epoch)

    def _forget_if_unused(self, group: StreamsGroup) -> None:
        if not group.members and not group.offsets and group.topology is None:
            if self.groups.pop(group.group_id, None) is group:
                self.persist_soon(self.delete_records(group))

    def loaded(self, group: StreamsGroup) -> None:
        """A loaded member still revoking tasks has its rebalance timeout again."""
        super().loaded(group)
        for member in group.members.values():
            if member.state == UNREVOKED_TASKS:
                self._revoke_timer(group, member)

    def _revoke_timer(self, group: StreamsGroup, member: StreamsMember) -> None:
        if member.revoke_timer is None:
            member.revoke_timer = asyncio.get_running_loop().call_later(
                max(member.rebalance_timeout_ms, 0) / 1000,
                self._revocation_overdue,
                group,
                member,
                member.epoch,
            )


def _static_member(group: StreamsGroup, member_id: str, instance_id: str) -> StreamsMember:
    """The static member of ``instance_id``, which must be ``member_id``."""
    static = group.static_member(instance_id)
    if static is None:
        raise _Fenced(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if static.member_id != member_id:
        raise _Fenced(
            E.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member"
            f" {static.member_id}.",
        )
    return static


def _check_epoch(member: StreamsMember, epoch: int, request) -> None:
    """Kafka's fencing of a member's epoch (a joining one's is 0 and always fine)."""
    if epoch == 0:
        return
    if epoch > member.epoch:
        raise _Fenced(
            E.FENCED_MEMBER_EPOCH,
            f"The streams group member has a greater member epoch ({epoch}) than the one known"
            f" by the group coordinator ({member.epoch}). The member must abandon all its"
            " partitions and rejoin.",
        )
    if epoch < member.epoch:
        owned_ok = (
            epoch == member.previous_epoch
            and request.active_tasks is not None
            and _tasks(request.active_tasks) <= set(member.active)
            and _tasks(request.standby_tasks) <= member.standby
            and not _tasks(request.warmup_tasks)
        )
        if not owned_ok:
            raise _Fenced(
                E.FENCED_MEMBER_EPOCH,
                f"The streams group member has a smaller member epoch ({epoch}) than the one"
                f" known by the group coordinator ({member.epoch}). The member must abandon all"
                " its partitions and rejoin.",
            )


def _check_owned(tasks: dict[str, int], request) -> None:
    """The tasks a member says it owns are the topology's (``tasks``: subtopology -> count)."""
    for owned in (request.active_tasks, request.standby_tasks, request.warmup_tasks):
        for t in owned or ():
            n = tasks.get(t.subtopology_id)
            if n is None:
                raise _Fenced(
                    E.INVALID_REQUEST,
                    f"Subtopology {t.subtopology_id} does not exist in the topology.",
                )
            for p in t.partitions:
                if not 0 <= p < n:
                    raise _Fenced(
                        E.INVALID_REQUEST,
                        f"Task {p} for subtopology {t.subtopology_id} is invalid."
                        f" Number of tasks for this subtopology: {n}",
                    )
