"""Topic changes in cluster mode, written to ZooKeeper by whichever broker they arrive at:
CreateTopics, CreatePartitions, AlterConfigs, DeleteTopics, reassignments (by hand or the
controller's), and the last write of a move (as Kafka's ``AdminZkClient`` and its controller
write them).

How this works
--------------
Each change writes the topic's znode (create; compare-and-set on its version through
``ZkClient.update``; delete) and then applies the result to this broker's view at once
(``Cluster.written``), so the client's answer comes once this broker serves the new metadata;
the others follow through their watches. A new topic's partitions are placed by
``placement.assign_replicas`` over the live brokers (not those being removed), beside the
topics there are (new partitions of a topic, ``placement.rebalance``: beside its others), with
the topic's replication factor (the first replica the preferred leader); its partitions' states
(the first replica leads, every replica in sync) are made in the same ZooKeeper transaction.
Partitions placed by hand (CreateTopics assignments, reassignments) are ``manual``: the
controller leaves them where they are. ``max.broker.partitions`` is checked over the whole
cluster as this broker sees it.

Moves: ``reassign`` starts or cancels them; ``finish_reassignment`` is a move's end, written
by the partition's leader (replica_manager.py): it changes the topic and the partition's state
in one transaction, by compare-and-set on both (``ZkClient.update_topic_and_state``).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from . import partition_state
from .partition_state import PartitionState
from .placement import BrokerInfo, assign_replicas, extras_held, rebalance
from .znodes import TOPICS, TopicRecord

if TYPE_CHECKING:
    from .cluster import Cluster


class TopicChangeError(Exception):
    """A topic change the cluster refused; ``error_code`` is Kafka's answer for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class TopicAdmin:
    """The topic changes this broker writes (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.zk_client = cluster.zk_client

    def _live(self) -> dict[int, BrokerInfo]:
        """The live brokers new partitions may go to: not those being removed (drained)."""
        return {
            b: BrokerInfo(rack=e.rack)
            for b, e in self.cluster.brokers.items()
            if b not in self.cluster.removed
        }

    async def create_topic(
        self,
        name: str,
        count: int,
        configs: dict[str, Any],
        replicas: list[list[int]] | None = None,
        replication_factor: int = 1,
    ) -> None:
        """Write a new topic (placed over the live brokers with ``replication_factor``
        replicas each unless ``replicas`` says where) and its partitions' states (the first
        replica leads, every replica in sync) in one ZooKeeper transaction, then open its
        partitions here. FileExistsError when the name is taken."""
        manual: set[int] = set()
        if replicas is None:
            live = self._live()
            if replication_factor > len(live):
                # a broker that has just registered may not have reached this view yet (its
                # watch event is on the way): read the registrations before refusing
                found = await self.cluster.registered_now()
                live = {
                    b: BrokerInfo(rack=e.rack)
                    for b, e in found.items()
                    if b not in self.cluster.removed
                }
            if not live:
                raise TopicChangeError(38, "no broker is registered")  # INVALID_REPLICATION_FACTOR
            if not 1 <= replication_factor <= len(live):
                raise TopicChangeError(
                    38,  # INVALID_REPLICATION_FACTOR
                    f"Replication factor: {replication_factor} larger than available brokers:"
                    f" {len(live)}.",
                )
            held = extras_held((r.placing() for r in self.cluster.topics.values()), live)
            placed = await asyncio.to_thread(
                assign_replicas, [(name, i) for i in range(count)], live, replication_factor, held
            )
            replicas = [placed[(name, i)] for i in range(count)]
        else:
            manual = set(range(len(replicas)))
        self._check_room(name, replicas)
        record = TopicRecord(uuid.uuid4(), replicas, [0] * len(replicas), dict(configs))
        if manual:
            record.manual = manual
        states = {i: partition_state.initial(r) for i, r in enumerate(replicas)}

        try:
            stat = await asyncio.to_thread(self.zk_client.create_topic, name, record, states)
        except NodeExistsError:
            # made by another broker: serve it here before saying so (its watch may lag)
            try:
                data, stat = await asyncio.to_thread(self.zk_client.zk.get, f"{TOPICS}/{name}")
            except NoNodeError:
                pass
            else:
                await self.cluster.written(name, TopicRecord.decode(data, stat), stat)
            raise FileExistsError(name) from None
        if stat is None:
            raise TopicChangeError(3, f"topic {name} was deleted as it was made")
        for i, st in states.items():
            self.cluster.learned(name, i, replace(st, version=0))
        await self.cluster.written(name, record, stat)

    def _check_room(self, name: str, replicas: list[list[int]]) -> None:
        """Refuse (POLICY_VIOLATION) new partitions that would put a broker over
        ``max.broker.partitions`` (every broker's own setting applies to the partitions it
        opens; this is the creating broker's view, as the whole topic is refused here)."""
        load: dict[int, int] = {}
        for record in self.cluster.topics.values():
            for r in record.replicas:
                for b in r:
                    load[b] = load.get(b, 0) + 1
        for r in replicas:
            for b in r:
                load[b] = load.get(b, 0) + 1
                if load[b] > self.cluster.max_broker_partitions:
                    raise TopicChangeError(
                        44,  # POLICY_VIOLATION
                        f"Cannot add the partitions of topic '{name}': broker {b} would hold more"
                        f" than max.broker.partitions ({self.cluster.max_broker_partitions}).",
                    )

    async def add_partitions(
        self, name: str, total: int, replicas: list[list[int]] | None = None
    ) -> None:
        """Grow a topic to ``total`` partitions, the new ones placed over the live brokers
        (with the topic's replication factor) unless ``replicas`` says where; then their
        states (the first replica leads, all in sync)."""

        def grow(record: TopicRecord) -> TopicRecord:
            new = range(len(record.replicas), total)
            extra = replicas
            if extra is None:  # placed beside the partitions there are, as the controller would
                rf = max(1, len(record.replicas[0]) if record.replicas else 1)
                live = self._live()
                others = (r.placing() for n, r in self.cluster.topics.items() if n != name)
                current = {(name, i): r for i, r in enumerate(record.placing())}
                current.update({(name, i): [] for i in new})
                placed = rebalance(current, live, rf, extras_held(others, live))
                extra = [placed[(name, i)] for i in new]
            else:
                record.manual |= set(new)
            self._check_room(name, extra)
            record.replicas = record.replicas + extra
            record.leader_epochs = record.leader_epochs + [0] * len(extra)
            return record

        before = len(self.cluster.topics[name].replicas) if name in self.cluster.topics else 0
        await self._change(name, grow)
        record = self.cluster.topics.get(name)
        if record is not None:
            for i in range(before, len(record.replicas)):
                await self.cluster.ensure_state(
                    name, i, partition_state.initial(record.replicas[i])
                )

    async def reassign(
        self, name: str, targets: dict[int, list[int] | None], *, by_hand: bool = True
    ) -> dict[int, str]:
        """Start (a list of brokers) or cancel (None) moves of partitions of ``name``, in one
        compare-and-set; ``by_hand``, the partitions are placed by hand from then on (the
        controller leaves them alone); otherwise (the controller's moves) a partition placed
        by hand or already moving meanwhile is skipped. A target equal to where the partition
        is ends its move (if any). Returns an error message per partition that the caller has
        not validated and that cannot be changed now (none: all were done)."""
        refused: dict[int, str] = {}

        def change(record: TopicRecord) -> TopicRecord:
            refused.clear()
            for index, target in targets.items():
                if not 0 <= index < len(record.replicas):
                    refused[index] = f"partition {index} of {name} does not exist"
                    continue
                if not by_hand:
                    if self.cluster.fenced:
                        raise TopicChangeError(41, "this broker is fenced")  # NOT_CONTROLLER
                    if index in record.manual or index in record.reassigning:
                        continue
                if target is None:
                    if index not in record.reassigning:
                        refused[index] = f"no reassignment of {name}-{index} is in progress"
                    record.reassigning.pop(index, None)
                    continue
                if by_hand:
                    record.manual.add(index)
                current = record.replicas[index]
                if list(target) == current:
                    record.reassigning.pop(index, None)
                    continue
                record.reassigning[index] = {
                    "target": list(target),
                    "adding": [b for b in target if b not in current],
                    "removing": [b for b in current if b not in target],
                }
            return record

        await self._change(name, change)
        return refused

    async def finish_reassignment(
        self, name: str, index: int, leader: int, epoch: int, target: list[int]
    ) -> bool:
        """The end of a move, written by the partition's leader once every target replica is
        in the ISR: ``replicas`` = ``target`` and the move cleared in the topic's znode, and in
        the same ZooKeeper transaction the state: the ISR without the removed replicas, and
        when the leader itself is removed, the first target replica in the ISR that is live
        leads at the leader epoch + 1. Both by compare-and-set. False when the move or the
        state is no longer what the leader saw; the replica manager hears of the new state at
        once."""
        if self.cluster.fenced:
            return False
        live = set(self.cluster.brokers)

        def end(record: TopicRecord, state: PartitionState | None):
            move = record.reassigning.get(index)
            if (
                move is None
                or move["target"] != target
                or state is None
                or state.leader != leader
                or state.leader_epoch != epoch
                or not set(target) <= set(state.isr)
            ):
                return None
            isr = tuple(b for b in state.isr if b in target)
            if leader in target:
                new_state = replace(state, isr=isr)
            else:
                candidates = [b for b in target if b in isr and b in live]
                if not candidates:
                    return None
                new_state = replace(state, leader=candidates[0], leader_epoch=epoch + 1, isr=isr)
            record.replicas[index] = list(target)
            record.leader_epochs[index] = new_state.leader_epoch
            del record.reassigning[index]
            return record, new_state

        done = await asyncio.to_thread(self.zk_client.update_topic_and_state, name, index, end)
        if done is None:
            return False
        record, stat, written = done
        if written is not None:
            self.cluster.learned(name, index, written)
        await self.cluster.written(name, record, stat)
        if self.cluster.replicas is not None:  # the new state at once, not by the watch
            self.cluster.replicas.state_changed(name, index)
        return True

    async def set_configs(self, name: str, configs: dict[str, Any]) -> None:
        def set_them(record: TopicRecord) -> TopicRecord:
            record.configs = dict(configs)
            return record

        await self._change(name, set_them)

    async def delete_topic(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.zk_client.zk.delete, f"{TOPICS}/{name}", recursive=True)
        except NoNodeError:
            pass
        await self.cluster.forget_topic(name)

    async def _change(self, name: str, change) -> None:
        """Read, change and compare-and-set a topic's znode until no one else wrote between
        (``change`` returns the record to write, or None to write nothing)."""
        changed: TopicRecord | None = None

        def encode(data: bytes, stat) -> bytes | None:
            nonlocal changed
            changed = change(TopicRecord.decode(data, stat))
            return changed.encode() if changed is not None else None

        try:
            _, stat = await self.zk_client.update(f"{TOPICS}/{name}", encode)
        except NoNodeError:
            raise TopicChangeError(3, f"topic {name} does not exist") from None
        if changed is not None:
            await self.cluster.written(name, changed, stat)
