"""The controller's job (cluster mode): the member brokers, and the partitions that follow them.

How this works
--------------
The member brokers are kept in ZooKeeper (``/cluster/members``: ``{"members": {id: {"rack"}},
"removed": [ids]}``, written by compare-and-set). A broker becomes a member when it first
registers; it stays one while it is down or restarting (so a restart moves nothing); it stops
being one when it is removed for good (UnregisterBroker, ``Cluster.remove_member``). A removed
broker that is still registered is listed in ``removed`` until it stops, so that it is not
taken for a new member meanwhile; once it has stopped, a later start makes it a member again.

Only the elected controller decides (``Cluster._lead`` starts and stops it; a controller whose
ZooKeeper session is lost or suspended is fenced and stops at once). As it starts it bumps the
controller epoch (``/controller_epoch``); each of its partition-state writes checks that
epoch's znode version in the same transaction, so a replaced controller writes nothing.

At every change of the registered brokers (or of those in a controlled shutdown), and every
``controller.rebalance.interval.ms``, it updates the members, then elects leaders
(elections.py) for the partitions whose leader is down, was restarted or is in a controlled
shutdown (``Cluster.controlled_shutdown``: it is taken for gone while another ISR member can
lead, and leaves the ISRs it is in), moves leadership back to the preferred (first) replica
once it is in the ISR again (``auto.leader.rebalance.enable``), and removes brokers that are
down from ISRs (compare-and-set on each partition's state znode; the brokers follow through
their watches), then confirms every
registration it has not confirmed yet (a broker back from a lost session serves
only once confirmed: ``Cluster.confirm``), then places each topic's partitions over the
members with ``placement.assign_replicas`` and the topic's replication factor, as topic
creation does (weighted rendezvous, per topic), and starts a move (``Cluster.reassign``;
moves.py for a single replica, replica_manager.py for more) for each partition placed
automatically whose brokers are not the ones placement gives it (the same brokers in another
order move nothing):
when a broker joins only the partitions it now wins move to it, and a removed broker's
partitions move to their new winners (it is *drained*, and may then stop). Partitions placed
by hand (CreateTopics assignments, AlterPartitionReassignments) and partitions already moving
are left alone, and so is a partition without a live leader or with a target broker down (a
move needs them: it goes on once they are back), and a partition when the members are fewer
than its replicas (placement never shrinks a replication factor).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NoNodeError

from . import partition_state
from .elections import elect, preferred
from .placement import BrokerInfo, assign_replicas

if TYPE_CHECKING:
    from .cluster import Cluster

log = logging.getLogger("headrace.controller")


class Controller:
    def __init__(self, cluster: Cluster, interval_ms: int) -> None:
        self.cluster = cluster
        self.interval_s = max(interval_ms, 10) / 1000
        self.active = False
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self.epoch = 0  # the controller epoch of this term
        self.epoch_version = -1  # its znode's version (checked by every state write)

    def start(self) -> None:
        """This broker was elected: decide from now on."""
        self.active = True
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="controller")
        self.changed()

    def stop(self) -> None:
        """No longer the controller (or the broker stops): decide nothing more."""
        self.active = False
        self.epoch_version = -1  # a new term bumps the epoch again
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def changed(self) -> None:
        """The registered brokers (or the members) changed: look again now."""
        self._wake.set()

    async def _run(self) -> None:
        while self.active and self.epoch_version < 0:
            try:
                self.epoch, self.epoch_version = await self.cluster.bump_controller_epoch()
                log.info("controller epoch %d", self.epoch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot bump the controller epoch")
                await asyncio.sleep(1)
        while self.active:
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the controller's check failed")
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _deciding(self) -> bool:
        return self.active and not self.cluster.fenced

    async def check(self) -> None:
        """Update the members, then start the moves placement asks for."""
        cluster = self.cluster
        if not self._deciding():
            return
        members = await cluster.update_members()
        if not self._deciding():
            return
        await self.elect_leaders()  # before the confirmations: a restarted leader is replaced
        if not self._deciding():
            return
        await cluster.confirm(list(cluster.brokers))  # after the members, before any move
        if not members or not self._deciding():
            return
        infos = {b: BrokerInfo(rack=rack) for b, rack in members.items()}
        live = set(cluster.brokers)
        for name, record in list(cluster.topics.items()):
            auto = [
                i
                for i in range(len(record.replicas))
                if i not in record.manual and i not in record.reassigning
            ]
            if not auto:
                continue
            count = len(record.replicas)
            rf = max(1, len(record.replicas[0]) if record.replicas else 1)
            placed = await asyncio.to_thread(
                assign_replicas, [(name, i) for i in range(count)], infos, min(rf, len(infos))
            )
            moves: dict[int, list[int] | None] = {}
            for i in auto:
                target, current = placed[(name, i)], record.replicas[i]
                if len(target) != len(current) or set(target) == set(current):
                    continue  # (the same brokers in another order: nothing to move)
                if cluster.leader(name, i) < 0 or not all(b in live for b in target):
                    continue  # a move needs its leader and its target brokers up
                moves[i] = target
            if moves and self._deciding():
                log.info(
                    "moving %d partitions of %s to where placement puts them", len(moves), name
                )
                await cluster.reassign(name, moves, by_hand=False)

    async def elect_leaders(self) -> None:
        """Elect a leader for every partition whose leader is down or restarted, and drop
        brokers that are down from ISRs; make the state of partitions that have none."""
        cluster = self.cluster
        live = set(cluster.brokers)
        leaving = cluster.shutting_down & live  # in a controlled shutdown: lead nothing
        restarted = await cluster.restarted(live)
        unclean_default = bool(cluster.unclean_default)
        changed = 0
        for name, record in list(cluster.topics.items()):
            unclean = record.configs.get("unclean.leader.election.enable", unclean_default)
            for index in range(len(record.replicas)):
                replicas = record.assigned(index)
                if not self._deciding():
                    return
                state = cluster.states.get((name, index))
                if state is None:
                    first = replicas[:1] if len(replicas) == 1 else replicas
                    state = await cluster.ensure_state(
                        name,
                        index,
                        partition_state.PartitionState(
                            replicas[0] if replicas else -1,
                            record.leader_epochs[index] if index < len(record.leader_epochs) else 0,
                            tuple(first),
                            self.epoch,
                        ),
                    )
                    if state is None:
                        continue
                if leaving:
                    new = elect(state, replicas, live - leaving, restarted, False, self.epoch)
                    if new is not None and new.leader < 0:  # no one else can lead it yet
                        new = elect(state, replicas, live, restarted, bool(unclean), self.epoch)
                else:
                    new = elect(state, replicas, live, restarted, bool(unclean), self.epoch)
                if new is None and cluster.auto_rebalance and replicas[:1] != [state.leader]:
                    if state.leader >= 0 and replicas and replicas[0] not in restarted:
                        new = preferred(state, replicas, live - leaving, self.epoch)
                if new is None:
                    continue
                try:
                    await cluster.write_state(name, index, new, state.version, self.epoch_version)
                except (BadVersionError, NoNodeError):
                    await cluster.read_state(name, index)
                    self.changed()  # look again (unless this controller was replaced)
                    continue
                changed += 1
                if new.leader != state.leader:
                    log.info(
                        "%s-%d: leader %d -> %d at epoch %d (ISR %s)",
                        name,
                        index,
                        state.leader,
                        new.leader,
                        new.leader_epoch,
                        list(new.isr),
                    )
        if changed:
            log.info("controller wrote %d partition states", changed)
