"""The "sticky" task assignor of streams groups (Kafka's default, and its only built-in one).

How this works
--------------
A task is (subtopology id, partition). Members belong to *processes* (a Kafka Streams
instance runs one member per stream thread, all with its process id); load is counted per
process (tasks / members of the process) and per member.

Active tasks: each member may hold at most ceil(tasks / members) of them (the quota is
recomputed as members fill up, so counts differ by at most one). First every task goes back
to the member that held it as an active task, if that member is under its quota; then to a
member that held it as a standby (the least loaded one); the rest, in subtopology and
partition order, each to the least loaded member of the least loaded process.

Standby tasks (``num_standby``, only for stateful subtopologies): each replica of a task goes
to a process that does not hold the task yet, preferring the member that held it as an
active task, then one that held it as a standby, then the least loaded process; a replica
with no process left to take it is not assigned (Kafka logs the same warning).

Kafka also ranks standby candidates by the changelog offsets members report
(``TaskOffsets``); they are not used here, so a previous standby counts regardless of how far
behind it is.
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass

log = logging.getLogger("headrace.groups")

NAME = "sticky"
Task = tuple[str, int]


@dataclass(slots=True)
class AssignmentMember:
    """What the assignor knows of a member: its process and what it holds now."""

    process_id: str
    active: frozenset[Task]
    standby: frozenset[Task]


class _Process:
    __slots__ = ("process_id", "capacity", "task_count", "counts", "active", "standby", "tasks")

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.capacity = 0
        self.task_count = 0
        self.counts: dict[str, int] = {}
        self.active: dict[str, set[Task]] = {}
        self.standby: dict[str, set[Task]] = {}
        self.tasks: set[Task] = set()

    @property
    def load(self) -> float:
        return self.task_count / self.capacity if self.capacity else -1.0

    def add_member(self, member_id: str) -> None:
        self.counts[member_id] = 0
        self.capacity += 1

    def add(self, member_id: str, task: Task, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.counts[member_id] += 1
        return self.counts[member_id]

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        member_id = min(self.counts, key=lambda m: (self.counts[m], m))
        return self.add(member_id, task, active)


class _State:
    def __init__(self, total_active: int, total: int, members: int) -> None:
        self.active_left = total_active
        self.total_left = total
        self.active_members = members
        self.total_members = members
        self.active_quota = _per(total_active, members)
        self.total_quota = _per(total, members)

    def took_active(self, count: int) -> None:
        if count == self.active_quota:
            self.active_members -= 1
            self.active_left -= count
            self.active_quota = _per(self.active_left, self.active_members)

    def took(self, count: int) -> None:
        if count == self.total_quota:
            self.total_members -= 1
            self.total_left -= count
            self.total_quota = _per(self.total_left, self.total_members)


def _per(tasks: int, members: int) -> int:
    return math.ceil(tasks / members) if members > 0 else 0


def assign(
    members: dict[str, AssignmentMember],
    tasks: dict[str, int],
    stateful: set[str],
    num_standby: int,
) -> dict[str, tuple[set[Task], set[Task]]]:
    """member id -> (active tasks, standby tasks), from the members (what each holds now), the
    tasks of each subtopology and which subtopologies are stateful."""
    total_active = sum(tasks.values())
    total = total_active + sum(n * num_standby for s, n in tasks.items() if s in stateful)
    state = _State(total_active, total, len(members))
    processes: dict[str, _Process] = {}
    prev_active: dict[Task, tuple[str, str]] = {}  # task -> (process, member)
    prev_standby: dict[Task, list[tuple[str, str]]] = {}
    for member_id in sorted(members):
        m = members[member_id]
        processes.setdefault(m.process_id, _Process(m.process_id)).add_member(member_id)
        for task in m.active:
            prev_active[task] = (m.process_id, member_id)
        for task in m.standby:
            prev_standby.setdefault(task, []).append((m.process_id, member_id))
    active = [(s, p) for s in sorted(tasks) for p in range(tasks[s])]
    if processes:
        _assign_active(state, processes, active, prev_active, prev_standby)
        if num_standby > 0:
            standby = [(s, p) for s in sorted(tasks) if s in stateful for p in range(tasks[s])]
            _assign_standby(state, processes, standby, num_standby, prev_active, prev_standby)
    out: dict[str, tuple[set[Task], set[Task]]] = {m: (set(), set()) for m in members}
    for proc in processes.values():
        for member_id, owned in proc.active.items():
            out[member_id][0].update(owned)
        for member_id, owned in proc.standby.items():
            out[member_id][1].update(owned)
    return out


def _least_loaded_previous(processes, candidates, standby_task: Task | None):
    best = None
    best_loads = (math.inf, math.inf)
    for process_id, member_id in candidates or ():
        proc = processes[process_id]
        if standby_task is not None and standby_task in proc.tasks:
            continue
        loads = (proc.load, proc.counts[member_id])
        if best is None or (loads[0] < best_loads[0] and loads[1] < best_loads[1]):
            best, best_loads = (process_id, member_id), loads
    return best


def _assign_active(state, processes, active, prev_active, prev_standby) -> None:
    left = []
    for task in sorted(active, key=lambda t: (t[1], t[0])):
        prev = prev_active.get(task)
        if prev is not None:
            proc = processes[prev[0]]
            if proc.counts[prev[1]] < state.active_quota:
                n = proc.add(prev[1], task, True)
                state.took_active(n)
                state.took(n)
                continue
        left.append(task)
    rest = []
    for task in left:
        prev = _least_loaded_previous(processes, prev_standby.get(task), None)
        if prev is not None:
            proc = processes[prev[0]]
            if proc.counts[prev[1]] < state.active_quota:
                n = proc.add(prev[1], task, True)
                state.took_active(n)
                state.took(n)
                continue
        rest.append(task)
    for task in sorted(rest):
        proc = min(processes.values(), key=lambda p: (p.load, p.process_id))
        n = proc.add_to_least_loaded(task, True)
        state.took_active(n)
        state.took(n)


def _assign_standby(state, processes, standby, replicas, prev_active, prev_standby) -> None:
    to_least_loaded: list[tuple[Task, int]] = []
    for task in sorted(standby, key=lambda t: (t[1], t[0]), reverse=True):
        for i in range(replicas):
            prev = prev_active.get(task)
            if prev is not None:
                proc = processes[prev[0]]
                if task not in proc.tasks and proc.counts[prev[1]] < state.total_quota:
                    state.took(proc.add(prev[1], task, False))
                    continue
            cand = _least_loaded_previous(processes, prev_standby.get(task), task)
            if cand is not None:
                proc = processes[cand[0]]
                if proc.counts[cand[1]] < state.total_quota:
                    state.took(proc.add(cand[1], task, False))
                    continue
            to_least_loaded.append((task, replicas - i))
            break
    for task, remaining in sorted(to_least_loaded, reverse=True):
        for i in range(remaining):
            heap = [(p.load, p.process_id) for p in processes.values() if task not in p.tasks]
            if not heap:
                log.warning(
                    "Unable to assign %d of %d standby tasks for task [%s_%d]. There is not"
                    " enough available capacity. You should increase the number of threads"
                    " and/or application instances to maintain the requested number of standby"
                    " replicas.",
                    remaining - i,
                    replicas,
                    task[0],
                    task[1],
                )
                break
            _, process_id = heapq.nsmallest(1, heap)[0]
            state.took(processes[process_id].add_to_least_loaded(task, False))
