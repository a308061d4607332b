"""A streams group's topology, and what the cluster's topics make of it.

How this works
--------------
The first member to join a streams group sends the application's topology (its
*subtopologies*: each one's source topics, the repartition topics it reads and writes, its
state changelog topics and its copartition groups); the group keeps it (``Topology``) and
later members must send the same one (or an older epoch, which the group ignores).

``configure`` matches the topology against the topics that exist, as Kafka's
InternalTopicManager does, and gives a ``ConfiguredTopology``:

1. every source topic must exist, else status MISSING_SOURCE_TOPICS ("Source topics t are
   missing.") and no tasks;
2. a repartition topic without a fixed partition count takes the largest partition count
   among the inputs of the subtopology that writes to it, repeated until every one is known
   (a loop that never resolves is STREAMS_INVALID_TOPOLOGY);
3. each copartition group must agree: its external topics the same partition count (else
   INCORRECTLY_PARTITIONED_TOPICS), its repartition topics take theirs;
4. a changelog topic has as many partitions as its subtopology has tasks: the largest
   partition count among the subtopology's inputs;
5. internal topics (repartition and changelog) that do not exist yet are to be created, with
   those partition counts and the topic configs the client sent; meanwhile the status is
   MISSING_INTERNAL_TOPICS ("Internal topics are missing: a, b") and there are no tasks yet.
   An existing internal topic with another partition count is INCORRECTLY_PARTITIONED_TOPICS.

When ready, each subtopology has ``tasks[subtopology]`` tasks, numbered 0..n-1; task (s, p)
reads partition p of each of s's inputs. ``signature`` names the partition counts the result
was computed from, so the group sees when a topic appears, goes or grows and configures again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from headrace.protocol import ErrorCode

E = ErrorCode

# StreamsGroupHeartbeatResponse's status codes (Kafka's StreamsGroupHeartbeatResponse.Status)
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic: its partitions (0: decided here), replication factor (0: the
    broker's default) and topic configs."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    repartition_source_topics: tuple[TopicInfo, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    copartition_groups: tuple[frozenset[str], ...]  # each: topic names

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.source_topics + tuple(t.name for t in self.repartition_source_topics)

    @property
    def stateful(self) -> bool:
        return bool(self.state_changelog_topics)


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]  # by id

    def by_id(self) -> dict[str, Subtopology]:
        return {s.subtopology_id: s for s in self.subtopologies}

    def required_topics(self) -> set[str]:
        """Every topic the topology reads or keeps state in."""
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.inputs)
            out.update(t.name for t in s.state_changelog_topics)
        return out

    def all_topics(self) -> set[str]:
        """Every topic the topology names (what a member must be allowed to DESCRIBE)."""
        out = self.required_topics()
        for s in self.subtopologies:
            out.update(s.repartition_sink_topics)
        return out


def _info(t) -> TopicInfo:
    return TopicInfo(
        t.name,
        t.partitions,
        t.replication_factor,
        tuple(sorted((c.key, c.value) for c in (t.topic_configs or ()))),
    )


def from_request(topology) -> Topology:
    """The Topology of a StreamsGroupHeartbeat's ``topology`` field."""
    subs = []
    for s in topology.subtopologies:
        sources = tuple(s.source_topics)
        repartition = tuple(_info(t) for t in s.repartition_source_topics)
        groups = []
        for g in s.copartition_groups:
            names = {sources[i] for i in g.source_topics if 0 <= i < len(sources)}
            names |= {
                repartition[i].name
                for i in g.repartition_source_topics
                if 0 <= i < len(repartition)
            }
            groups.append(frozenset(names))
        subs.append(
            Subtopology(
                s.subtopology_id,
                sources,
                tuple(s.repartition_sink_topics),
                repartition,
                tuple(_info(t) for t in s.state_changelog_topics),
                tuple(groups),
            )
        )
    return Topology(topology.epoch, tuple(sorted(subs, key=lambda s: s.subtopology_id)))


def invalid(topology) -> str | None:
    """Why a topology sent by a member is malformed (Kafka's messages), or None."""
    seen: set[str] = set()
    for s in topology.subtopologies:
        if s.subtopology_id in seen:
            return f"Duplicate subtopology ID {s.subtopology_id}"
        seen.add(s.subtopology_id)
        for g in s.copartition_groups:
            for i in g.source_topics:
                if not 0 <= i < len(s.source_topics):
                    return (
                        f"Source topic index {i} in copartition group of subtopology"
                        f" {s.subtopology_id} is out of bounds"
                    )
            for i in g.repartition_source_topics:
                if not 0 <= i < len(s.repartition_source_topics):
                    return (
                        f"Repartition source topic index {i} in copartition group of"
                        f" subtopology {s.subtopology_id} is out of bounds"
                    )
    return None


def size(topology) -> int:
    """About how many bytes a topology takes: its names and configs (``max.topology.bytes``)."""
    n = 0
    for s in topology.subtopologies:
        n += (
            len(s.subtopology_id)
            + sum(map(len, s.source_topics))
            + sum(map(len, s.source_topic_regex))
        )
        n += sum(map(len, s.repartition_sink_topics)) + 8 * len(s.copartition_groups)
        for g in s.copartition_groups:
            n += 2 * (
                len(g.source_topics) + len(g.repartition_source_topics) + len(g.source_topic_regex)
            )
        for t in (*s.repartition_source_topics, *s.state_changelog_topics):
            n += len(t.name) + 8 + sum(len(c.key) + len(c.value) for c in (t.topic_configs or ()))
    return n


@dataclass(slots=True)
class ConfiguredTopology:
    epoch: int
    signature: tuple  # ((topic, partitions or -1), ...) of the topics it was computed from
    tasks: dict[str, int] | None = None  # subtopology -> tasks; None: not ready
    to_create: dict[str, TopicInfo] = field(default_factory=dict)  # with decided partitions
    status: tuple[int, str] | None = None  # (status code, detail) while not ready
    error: tuple[int, str] | None = None  # (error code, message): the topology is invalid

    @property
    def ready(self) -> bool:
        return self.tasks is not None and not self.to_create and self.error is None


class _Problem(Exception):
    def __init__(self, status: int | None, message: str, error: int = E.NONE) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


def _summary(topics) -> str:
    names = sorted(topics)
    if not names:
        return "<none>"
    more = f" and {len(names) - 3} additional topics" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def signature(topology: Topology, partitions: Callable[[str], int | None]) -> tuple:
    names = sorted(topology.all_topics())
    return tuple((n, partitions(n) or -1) for n in names)


def configure(topology: Topology, partitions: Callable[[str], int | None]) -> ConfiguredTopology:
    """Match ``topology`` against the existing topics (``partitions(name)``: its partition
    count, None when it does not exist)."""
    out = ConfiguredTopology(topology.epoch, signature(topology, partitions))
    try:
        missing = sorted(
            {t for s in topology.subtopologies for t in s.source_topics if partitions(t) is None}
        )
        if missing:
            raise _Problem(MISSING_SOURCE_TOPICS, f"Source topics {_summary(missing)} are missing.")
        decided = _repartition_counts(topology, partitions)

        def count(name: str) -> int | None:
            n = partitions(name)
            return n if n is not None else decided.get(name)

        _copartition(topology, count, decided)
        tasks: dict[str, int] = {}
        for s in topology.subtopologies:
            counts = [count(t) for t in s.inputs]
            if not counts or any(c is None for c in counts):
                raise _Problem(
                    None,
                    f"No source topics found for subtopology {s.subtopology_id}",
                    E.STREAMS_INVALID_TOPOLOGY,
                )
            tasks[s.subtopology_id] = max(c for c in counts if c is not None)
            for t in s.state_changelog_topics:
                decided[t.name] = tasks[s.subtopology_id]
        wanted: dict[str, TopicInfo] = {}
        for s in topology.subtopologies:
            for t in (*s.repartition_source_topics, *s.state_changelog_topics):
                n = t.partitions if t.partitions else decided[t.name]
                wanted[t.name] = TopicInfo(t.name, n, t.replication_factor, t.configs)
        for name, info in list(wanted.items()):
            have = partitions(name)
            if have is None:
                continue
            del wanted[name]
            if have != info.partitions:
                raise _Problem(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    f"Existing topic {name} has different number of partitions: expected"
                    f" {info.partitions}, found {have}",
                )
        out.tasks = tasks
        out.to_create = wanted
        if wanted:
            out.status = (
                MISSING_INTERNAL_TOPICS,
                f"Internal topics are missing: {_summary(wanted)}",
            )
    except _Problem as p:
        out.tasks = None
        if p.status is not None:
            out.status = (p.status, p.message)
        else:
            out.error = (p.error, p.message)
    return out


def _repartition_counts(topology: Topology, partitions: Callable[[str], int | None]) -> dict:
    counts: dict[str, int] = {}
    for s in topology.subtopologies:
        for t in s.repartition_source_topics:
            if t.partitions:
                counts[t.name] = t.partitions

    def known(name: str) -> int | None:
        n = partitions(name)
        return n if n is not None else counts.get(name)

    while True:
        needed = progress = False
        for s in topology.subtopologies:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                inputs = [known(t) for t in s.inputs]
                best = max((n for n in inputs if n is not None), default=None)
                if best is None:
                    needed = True
                    continue
                counts[sink] = best
                progress = True
        if not needed:
            break
        if not progress:
            raise _Problem(
                None,
                "Failed to compute number of partitions for all repartition topics. There may be"
                " loops in the topology that cannot be resolved.",
                E.STREAMS_INVALID_TOPOLOGY,
            )
    for s in topology.subtopologies:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise _Problem(
                None,
                "Failed to compute number of partitions for all repartition topics, because a"
                " repartition source topic is never used as a sink topic.",
                E.STREAMS_INVALID_TOPOLOGY,
            )
    return counts


def _copartition(topology: Topology, count: Callable[[str], int | None], decided: dict) -> None:
    fixed = {
        t.name for s in topology.subtopologies for t in s.repartition_source_topics if t.partitions
    }
    flexible = {
        t.name
        for s in topology.subtopologies
        for t in s.repartition_source_topics
        if not t.partitions
    }
    for s in topology.subtopologies:
        for group in s.copartition_groups:
            if not group:
                continue
            repartition = {t: count(t) or 0 for t in group if t in fixed or t in flexible}
            external = {t: count(t) or 0 for t in group if t not in repartition}
            if set(repartition) == set(group):
                if fixed & set(group):
                    values = {repartition[t] for t in fixed & set(group)}
                    if len(values) > 1:
                        raise _Problem(
                            INCORRECTLY_PARTITIONED_TOPICS,
                            "Following topics do not have the same number of partitions:"
                            f" [{_sorted_map(repartition)}]",
                        )
                    n = values.pop()
                else:
                    n = max(repartition.values())
                    if n == 0:
                        raise _Problem(
                            None,
                            "All topics in the copartition group had undefined partition"
                            f" number: {sorted(repartition)}",
                            E.STREAMS_INVALID_TOPOLOGY,
                        )
            else:
                values = set(external.values())
                if len(values) > 1:
                    raise _Problem(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        "Following topics do not have the same number of partitions:"
                        f" [{_sorted_map(external)}]",
                    )
                n = values.pop()
            for t, have in repartition.items():
                decided[t] = n
                if t in fixed and have != n:
                    raise _Problem(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Number of partitions [{have}] of repartition topic [{t}] doesn't match"
                        f" number of partitions [{n}] of the source topic.",
                    )


def _sorted_map(counts: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) + "}"
