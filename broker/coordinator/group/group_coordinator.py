"""The group coordinator: classic, KIP-848 consumer, KIP-932 share and KIP-1071 streams
groups, and the committed offsets of all but share groups.

How this works
--------------
A group id belongs to one kind of group at a time: a classic group
(``classic_coordinator``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup), a KIP-848 consumer
group (``consumer_group``: ConsumerGroupHeartbeat), a share group (``share_group``:
ShareGroupHeartbeat) or a streams group (``streams_coordinator``: StreamsGroupHeartbeat).
All but share groups keep their committed offsets in the one ``OffsetStore``
(``offset_store``: ``__consumer_offsets``); a classic group's membership is stored there too
(``group_membership``), and so are consumer, share and streams groups, in Kafka's records
(``modern_records``, ``consumer_records``, ``share_records``, ``streams_records``, written
by ``modern_group_log``). A share group has no committed offsets (its partitions' leaders keep
what it was delivered); the other kinds' APIs refuse its id as Kafka does (OffsetCommit,
OffsetFetch, TxnOffsetCommit and ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND, JoinGroup
INCONSISTENT_GROUP_PROTOCOL), and it refuses theirs. This class builds them, loads them at
start-up and answers what concerns every kind: commits, fetches, deletions, offset expiry
and the purge of a deleted topic's offsets.

``start`` replays ``__consumer_offsets``: groups that only have offsets come back Empty,
classic groups with members come back Stable, consumer, share and streams groups as their
records left them (each member with a fresh session). Offsets of
topics that no longer exist are purged then (a crash between a topic's deletion and the purge
of its offsets would otherwise bring them back). A group left Empty without offsets is removed
(a classic one with a tombstone for its metadata), as Kafka does.

Offsets committed inside a transaction (TxnOffsetCommit) are held here, by producer id then
group (``txn_offsets``), until the transaction's marker reaches the group's partition of
``__consumer_offsets`` (``complete_txn``, called by WriteTxnMarkers before it appends the
marker): a commit writes them again as a plain commit (the replay skips transactional
batches, so it needs no markers), an abort drops them. ``start`` reads back those of
transactions still open, so a transaction decided before a crash commits them at recovery.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from headrace.broker.background import run_every, wall_clock_ms
from headrace.protocol import DecodeError, ErrorCode

from . import consumer_records, modern_records, share_records, streams_records
from .classic_coordinator import ClassicGroupCoordinator
from .classic_group import ClassicGroup, JoinResult
from .consumer_group import ConsumerGroup, ConsumerGroupCoordinator
from .group_configs import GroupConfigs
from .group_membership import MembershipLog
from .group_offsets import OFFSETS_TOPIC, CommittedOffset, partition_for
from .group_state import DEAD, EMPTY
from .modern_group_log import ModernGroupLog
from .offset_store import Entry, OffsetStore, PendingOffsets
from .share_group import ShareGroupCoordinator
from .streams_coordinator import StreamsGroupCoordinator
from .streams_group import StreamsGroup

__all__ = [
    "GroupCoordinator",
    "ClassicGroup",
    "CommittedOffset",
    "JoinResult",
    "OFFSET_METADATA_MAX_BYTES",
]

log = logging.getLogger("headrace.groups")

E = ErrorCode
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes
RECLAIM_EVERY_S = 1.0  # at group.max.groups, how often groups holding nothing are looked for


_RESTORE = {
    "consumer": consumer_records.restore,
    "share": share_records.restore,
    "streams": streams_records.restore,
}


class GroupCoordinator:
    """Built from the TopicManager, the broker's settings (read here, by their Kafka names, and
    handed on as values) and a clock."""

    def __init__(self, node_id: int, topics, config, now_ms=wall_clock_ms) -> None:
        self.node_id = node_id
        self.topics = topics
        self.now_ms = now_ms
        self.retention_check_ms = int(config["offsets.retention.check.interval.ms"])
        self.offsets = OffsetStore(
            topics,
            int(config["offsets.topic.num.partitions"]),
            int(config["offsets.retention.minutes"]) * 60_000,
            now_ms,
            int(config["offsets.commit.timeout.ms"]),
        )
        self.classic = ClassicGroupCoordinator(
            MembershipLog(self.offsets),
            initial_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
            min_session_ms=int(config["group.min.session.timeout.ms"]),
            max_session_ms=int(config["group.max.session.timeout.ms"]),
            max_size=int(config["group.max.size"]),
            now_ms=now_ms,
        )
        self.groups: dict[str, ClassicGroup] = self.classic.groups
        self.configs = GroupConfigs(config)  # group configs (the GROUP config resource)
        group_log = ModernGroupLog(self.offsets)
        self.consumer = ConsumerGroupCoordinator(
            topics,
            self.classic,
            configs=self.configs,
            max_size=int(config["group.consumer.max.size"]),
            group_log=group_log,
            records=consumer_records.records,
            now_ms=now_ms,
        )
        self.max_groups = int(config["group.max.groups"])
        self._reclaimed_at = -RECLAIM_EVERY_S
        self.classic.room_for_group = self.room_for_group
        self.share = ShareGroupCoordinator(
            topics,
            configs=self.configs,
            max_size=int(config["group.share.max.size"]),
            other_kind=lambda group_id: self.group_type(group_id) not in (None, "share"),
            room_for_group=self.room_for_group,
            group_log=group_log,
            records=lambda group, part: share_records.records(group, part, self._topic_name),
            now_ms=now_ms,
        )
        self.streams = StreamsGroupCoordinator(
            topics,
            self.classic,
            configs=self.configs,
            max_size=int(config["group.streams.max.size"]),
            max_topology_bytes=int(config["group.streams.max.topology.bytes"]),
            other_kind=lambda group_id: self.group_type(group_id) in ("consumer", "share"),
            room_for_group=self.room_for_group,
            group_log=group_log,
            records=streams_records.records,
            now_ms=now_ms,
        )
        # a share or streams group's id is not for the classic and consumer groups
        self.classic.share_group = self.consumer.share_group = self._share_or_streams
        self.txn_offsets: PendingOffsets = {}  # producer id -> group id -> offsets
        # partitions of __consumer_offsets held here whose groups are not served (their
        # requests get COORDINATOR_LOAD_IN_PROGRESS): ``loading``, moved here and being
        # loaded (a heartbeat answered from no state would tell its member it is unknown,
        # and the member would give up its partitions); ``unavailable``, their replay failed
        self.loading: set[int] = set()
        self.unavailable: set[int] = set()
        self._tasks: list[asyncio.Task] = []

    def _share_or_streams(self, group_id: str) -> bool:
        return group_id in self.share.groups or group_id in self.streams.groups

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self, load: bool = True) -> None:
        """Load the groups (unless ``load`` is False: in a cluster the partitions this broker
        leads are loaded as it comes to lead them, ``partitions_moved``) and start expiry."""
        if load:
            await self._load(None)
        self._tasks.append(
            asyncio.create_task(
                run_every(self.retention_check_ms / 1000, self.expire_offsets, "offset expiration")
            )
        )

    async def partitions_moved(self, gained: list[int], lost: list[int]) -> None:
        """Partitions of ``__consumer_offsets`` moved here (their groups are loaded from
        them) or away (their groups are forgotten here, without tombstones: the new
        coordinator has them; waiting requests get NOT_COORDINATOR)."""
        self.loading.update(gained)
        self.unavailable.difference_update(lost)
        topic = self.topics.get(OFFSETS_TOPIC)
        if lost and topic is not None:
            doomed = {
                g.group_id
                for g in self._all_groups()
                if partition_for(g.group_id, topic.count) in lost
            }
            for group_id in doomed:
                classic = self.groups.get(group_id)
                if classic is not None:
                    self.classic.unload(classic, E.NOT_COORDINATOR)
                self.consumer.unload(group_id)
                self.streams.unload(group_id)
            for group_id in [g for g in self.share.groups if partition_for(g, topic.count) in lost]:
                self.share.unload(group_id)
            for held in self.txn_offsets.values():
                for group_id in doomed & held.keys():
                    del held[group_id]
            if doomed:
                log.info("unloaded %d groups of partitions %s (moved away)", len(doomed), lost)
        if gained:
            try:
                await self._load(gained)
            finally:
                self.loading.difference_update(gained)

    async def _load(self, indexes: list[int] | None) -> None:
        """Load the groups of ``__consumer_offsets`` (its partitions ``indexes``, or all).
        A partition that cannot be read back whole is not served (``unavailable``): its
        groups answer COORDINATOR_LOAD_IN_PROGRESS rather than with part of their offsets."""
        loaded, stored, modern, failed = await self.offsets.load(indexes)
        for index, error in sorted(failed.items()):
            log.error(
                "cannot load the groups of %s-%d: %s; its groups answer"
                " COORDINATOR_LOAD_IN_PROGRESS until the partition is repaired (headrace"
                " verify names the bad position) and the broker restarted",
                OFFSETS_TOPIC,
                index,
                error,
            )
        self.unavailable |= failed.keys()
        for group_id, offsets in loaded.items():
            self.classic.new_group(group_id).offsets = offsets
        if loaded:
            log.info("loaded committed offsets of %d groups", len(loaded))
        restored = 0
        for group_id, meta in stored.items():
            if not meta.members and group_id not in self.groups:
                continue  # an Empty group without offsets is not kept
            self.classic.restore(group_id, meta)
            restored += bool(meta.members)
        if restored:
            log.info("restored the membership of %d classic groups", restored)
        self._load_modern(modern)
        pending_offsets = await self.offsets.load_pending(indexes, frozenset(failed))
        for producer_id, pending in pending_offsets.items():
            for group_id, offsets in pending.items():
                self.add_txn_offsets(producer_id, group_id, offsets)
        stale: dict[ClassicGroup, list[Entry]] = {}
        for group_id in loaded:
            group = self._offsets_group(group_id)
            if group is None:
                continue
            entries: list[Entry] = [
                (t, p, None) for (t, p), c in group.offsets.items() if self._gone(t, c)
            ]
            if entries:
                for t, p, _ in entries:
                    del group.offsets[(t, p)]
                stale[group] = entries
                self._forget_if_empty(group)
        if stale:
            self._tasks.append(asyncio.create_task(self._purge_loaded(stale)))

    def _load_modern(self, modern: dict[bytes, bytes]) -> None:
        """Bring back the consumer, share and streams groups of the replayed records, each
        member with a fresh session; a classic group with members of the same id (a group
        that changed kinds) keeps the id. The committed offsets replayed for the id become
        the group's."""
        counts: dict[str, int] = {}
        for group_id, (kind, stored) in modern_records.stored_groups(modern).items():
            classic = self.groups.get(group_id)
            if classic is not None and classic.members:
                continue
            restore = _RESTORE.get(kind)
            if restore is None:
                continue
            group: Any
            try:
                group = restore(group_id, stored)
            except (DecodeError, struct.error, AttributeError, ValueError):
                log.warning("%s group %s: its records are malformed; not loaded", kind, group_id)
                continue
            if classic is not None:
                del self.groups[group_id]  # only its offsets were loaded: they are the group's
                if kind != "share":  # (a share group has none)
                    group.offsets = classic.offsets
            getattr(self, kind).loaded(group)
            counts[kind] = counts.get(kind, 0) + 1
        for kind, n in sorted(counts.items()):
            log.info("loaded %d %s groups", n, kind)

    def _topic_name(self, topic_id) -> str:
        t = self.topics.find(None, topic_id)
        return "" if t is None else t.name

    def _offsets_group(self, group_id: str):
        """The group holding ``group_id``'s committed offsets (all but share groups)."""
        return (
            self.groups.get(group_id)
            or self.consumer.groups.get(group_id)
            or self.streams.groups.get(group_id)
        )

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.consumer.stop()
        self.share.stop()
        self.streams.stop()
        self.classic.stop()

    async def coordinator_for(self, group_id: str) -> int:
        """The broker that coordinates ``group_id``: the leader of its partition of
        ``__consumer_offsets`` (made on first use), as in Kafka; -1 when it has none."""
        topic = await self.offsets.topic()
        return self.topics.cluster.leader(OFFSETS_TOPIC, partition_for(group_id, topic.count))

    def owns(self, group_id: str) -> bool:
        """Does this broker coordinate ``group_id`` now? When it holds the group's partition
        of ``__consumer_offsets`` (and is not fenced), or, before that topic is made, when it
        will lead the partition (a broker on its own). Group requests elsewhere get
        NOT_COORDINATOR."""
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return self.topics.cluster.leader(OFFSETS_TOPIC, 0) == self.node_id
        return topic.partition(partition_for(group_id, topic.count)) is not None

    def not_served(self, group_id: str) -> int:
        """Why a request for ``group_id`` cannot be served here: NOT_COORDINATOR (another
        broker's group), COORDINATOR_LOAD_IN_PROGRESS (its partition is being loaded, or
        failed to load), or NONE."""
        if not self.owns(group_id):
            return E.NOT_COORDINATOR
        if self.loading or self.unavailable:
            topic = self.topics.get(OFFSETS_TOPIC)
            index = partition_for(group_id, topic.count) if topic is not None else -1
            if index in self.loading or index in self.unavailable:
                return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    # offsets ------------------------------------------------------------------------------------

    def check_commit(self, group_id, generation, member_id, instance_id, api_version=None):
        """May this commit go ahead? (error, the group, created when new for offsets only).
        ``api_version``: OffsetCommit's (None: TxnOffsetCommit), for streams groups."""
        if not group_id:
            return E.INVALID_GROUP_ID, None
        if group_id in self.share.groups:  # "Group G is not a consumer group."
            return E.GROUP_ID_NOT_FOUND, None
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            error = cgroup.check_commit(member_id, generation)
            return error, None if error else cgroup
        sgroup = self.streams.groups.get(group_id)
        if sgroup is not None:
            error, _ = sgroup.check_commit(member_id, generation, api_version)
            return error, None if error else sgroup
        return self.classic.check_commit(group_id, generation, member_id, instance_id)

    def partition_check(self, group, member_id: str, epoch: int, api_version=None):
        """For a streams group member committing with an older epoch: (topic, partition) ->
        error, as Kafka checks each partition's task against the epoch it was given at; else
        None (every partition is fine)."""
        if not isinstance(group, StreamsGroup):
            return None
        return group.check_commit(member_id, epoch, api_version)[1]

    async def offsets_partition(self, group_id: str):
        """The partition of ``__consumer_offsets`` holding ``group_id``."""
        return await self.offsets.partition(group_id)

    async def offsets_written(self, partition) -> int:
        """Flush a partition of ``__consumer_offsets`` after a write of its own (transactional
        offsets) and wait for its ISR to have it; an error code."""
        return await self.offsets.flush(partition)

    async def write_offsets(self, group, entries) -> int:
        """Store (topic, partition, CommittedOffset or None to delete) for a group checked by
        ``check_commit``; an error code once flushed."""
        return await self.offsets.write(group, entries)

    async def commit_offsets(
        self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> int:
        """Store a committed transaction's offsets for ``group_id`` (an Empty classic group is
        made for a group not known yet). Offsets of topics deleted since they were sent are
        dropped, as their deletion purged the group's others."""
        entries: list[Entry] = [
            (t, p, c) for (t, p), c in offsets.items() if self.topics.get(t) is not None
        ]
        if not entries:
            return E.NONE
        if group_id in self.share.groups:  # became a share group since: it has no offsets
            log.warning("offsets of a transaction for share group %s dropped", group_id)
            return E.NONE
        group = (
            self.groups.get(group_id)
            or self.consumer.groups.get(group_id)
            or self.streams.groups.get(group_id)
        )
        if group is None:
            group = self.classic.new_group(group_id)
        return await self.offsets.write(group, entries)

    def add_txn_offsets(
        self, producer_id: int, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> None:
        """Offsets of ``group_id`` committed in the open transaction of ``producer_id``
        (written to the log as its transactional batch): held until the marker."""
        self.txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def pending_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of ``group_id`` with offsets committed in a transaction that has not
        ended (OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        return {key for held in self.txn_offsets.values() for key in held.get(group_id, ())}

    async def complete_txn(self, producer_id: int, partition: int, commit: bool) -> int:
        """The transaction of ``producer_id`` ends on partition ``partition`` of
        ``__consumer_offsets`` (its marker follows): the offsets it holds for the groups of
        that partition become their committed offsets (commit) or are dropped (abort). An
        error code; on error they stay held, for the marker's next try."""
        held = self.txn_offsets.get(producer_id)
        topic = self.topics.get(OFFSETS_TOPIC)
        if not held or topic is None:
            return E.NONE
        for group_id in [g for g in held if partition_for(g, topic.count) == partition]:
            offsets = held.get(group_id)
            if offsets is None:
                continue  # completed meanwhile (the same marker sent twice)
            if commit:
                error = await self.commit_offsets(group_id, offsets)
                if error:
                    log.warning(
                        "offsets of producer %d for group %s: error %d",
                        producer_id,
                        group_id,
                        error,
                    )
                    return error
            held.pop(group_id, None)
        if not held and self.txn_offsets.get(producer_id) is held:
            del self.txn_offsets[producer_id]
        return E.NONE

    def room_for(self, group_id: str) -> bool:
        """Is ``group_id`` known, or may it be made (``group.max.groups``)?"""
        return self.group_type(group_id) is not None or self.room_for_group()

    def group_type(self, group_id: str) -> str | None:
        """The kind of group ``group_id`` is here: "classic", "consumer", "share", "streams"
        or None."""
        if group_id in self.share.groups:
            return "share"
        if group_id in self.streams.groups:
            return "streams"
        if group_id in self.consumer.groups:
            return "consumer"
        return "classic" if group_id in self.groups else None

    def _count(self) -> int:
        return (
            len(self.groups)
            + len(self.consumer.groups)
            + len(self.share.groups)
            + len(self.streams.groups)
        )

    def room_for_group(self) -> bool:
        """May one more group be made? At ``group.max.groups`` (every kind counted), groups
        that hold nothing (Empty, no members, no offsets: what made-up group ids leave) are
        forgotten first, at most once a second, rather than at the next expiry pass."""
        if self._count() < self.max_groups:
            return True
        now = time.monotonic()
        if now - self._reclaimed_at >= RECLAIM_EVERY_S:
            self._reclaimed_at = now
            for group in self._all_groups():
                if not getattr(group, "pending", None):
                    self._forget_if_empty(group)
            self.share.forget_empty()
        return self._count() < self.max_groups

    def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = (
            self.groups.get(group_id)
            or self.consumer.groups.get(group_id)
            or self.streams.groups.get(group_id)
        )
        return {} if group is None else group.offsets

    # administration -----------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> int:
        if group_id in self.share.groups:
            return await self.share.delete(group_id)
        cgroup = self.consumer.groups.get(group_id) or self.streams.groups.get(group_id)
        if cgroup is not None:
            if cgroup.members:
                return E.NON_EMPTY_GROUP
            error = await self.offsets.delete_all(cgroup)
            kind = self.consumer if isinstance(cgroup, ConsumerGroup) else self.streams
            if not error and not cgroup.members and kind.groups.get(group_id) is cgroup:
                kind.unload(group_id)
                error = await kind.group_log.durable(kind.delete_records(cgroup))
            return error
        group = self.groups.get(group_id)
        if group is None or group.state is DEAD:
            return E.GROUP_ID_NOT_FOUND
        if group.members or group.state is not EMPTY:
            return E.NON_EMPTY_GROUP
        error = await self.offsets.delete_all(group)
        if error:
            return error
        if not group.members and self.groups.get(group_id) is group:
            return await self.classic.remove_group(group)
        return E.NONE

    async def expire_offsets(self, now: int | None = None) -> int:
        """Tombstone offsets past retention in groups without members; returns how many."""
        now = self.now_ms() if now is None else now
        expired = 0
        for group in self._all_groups():
            if group.members or getattr(group, "state", EMPTY) is not EMPTY:
                continue
            doomed = self.offsets.expired(group, now)
            if doomed and not await self.offsets.write(group, doomed):
                expired += len(doomed)
            self._forget_if_empty(group)
        if expired:
            log.info("expired %d committed offsets", expired)
        return expired

    def _gone(self, topic: str, committed: CommittedOffset) -> bool:
        """Offsets loaded for a topic that was deleted meanwhile, or deleted and made again
        (in a cluster, while this broker was down: committed before the namesake was made)."""
        t = self.topics.get(topic)
        return t is None or committed.commit_timestamp < t.created_ms

    async def _purge_loaded(self, stale: dict[ClassicGroup, list[Entry]]) -> None:
        """Tombstones for the offsets dropped at load because their topic is gone (they are
        no longer served). A cluster broker starts fenced: written once it coordinates."""
        count = sum(map(len, stale.values()))
        while stale:
            topic = self.topics.get(OFFSETS_TOPIC)
            for group, entries in list(stale.items()):
                if self.owns(group.group_id):
                    if not await self.offsets.write(group, entries):
                        del stale[group]
                elif topic is None or partition_for(group.group_id, topic.count) not in topic.held:
                    del stale[group]  # moved away: the next coordinator drops them at its load
            if stale:
                await asyncio.sleep(1)
        log.info("purged %d committed offsets of topics deleted while the broker was down", count)

    async def on_topics_deleted(self, names: set[str]) -> None:
        """Topics are gone: every group's offsets for their partitions get tombstones, and
        groups left Empty without offsets are removed (Kafka's onPartitionsDeleted), so a
        topic re-created under the same name is read from the start. Offsets held for open
        transactions go too, so the namesake does not get them when the transaction commits.
        Share groups forget which of the topics' partitions they had state for."""
        self.share.topics_deleted()
        for held in self.txn_offsets.values():
            for offsets in held.values():
                for key in [k for k in offsets if k[0] in names]:
                    del offsets[key]
        purged = 0
        for group in self._all_groups():
            doomed = self.offsets.for_topics(group, names)
            if not doomed:
                continue
            error = await self.offsets.write(group, doomed)
            if error:
                log.warning(
                    "group %s: purging the offsets of deleted topics failed (error %d)",
                    group.group_id,
                    error,
                )
                continue
            purged += len(doomed)
            self._forget_if_empty(group)
        if purged:
            log.info("purged %d committed offsets of deleted topics %s", purged, sorted(names))

    def _all_groups(self) -> list:
        return (
            list(self.groups.values())
            + list(self.consumer.groups.values())
            + list(self.streams.groups.values())
        )

    def _forget_if_empty(self, group: ClassicGroup | ConsumerGroup | StreamsGroup) -> None:
        """Remove a group without members or offsets (a classic one only while Empty)."""
        if group.offsets or group.members:
            return
        group_id = group.group_id
        if isinstance(group, ClassicGroup):
            if group.state is EMPTY:
                self.classic.remove_group(group)
        else:
            for kind in (self.consumer, self.streams):
                if kind.groups.get(group_id) is group:
                    kind.unload(group_id)
                    kind.persist_soon(kind.delete_records(group))
