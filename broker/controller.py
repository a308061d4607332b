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
ZooKeeper session is lost or suspended is fenced and stops at once). At every change of the
registered brokers, and every ``controller.rebalance.interval.ms``, it updates the members,
confirms every registration it has not confirmed yet (a broker back from a lost session serves
only once confirmed: ``Cluster.confirm``), then places each topic's partitions over the
members with ``placement.assign_replicas``, as topic creation does (weighted rendezvous, per
topic), and starts a move
(``Cluster.reassign``, moves.py) for each partition placed automatically that is elsewhere:
when a broker joins only the partitions it now wins move to it, and a removed broker's
partitions move to their new winners (it is *drained*, and may then stop). Partitions placed
by hand (CreateTopics assignments, AlterPartitionReassignments) and partitions already moving
are left alone, and so is a partition whose current broker or target broker is down (a move
needs both: it goes on once they are back).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

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

    def start(self) -> None:
        """This broker was elected: decide from now on."""
        self.active = True
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="controller")
        self.changed()

    def stop(self) -> None:
        """No longer the controller (or the broker stops): decide nothing more."""
        self.active = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def changed(self) -> None:
        """The registered brokers (or the members) changed: look again now."""
        self._wake.set()

    async def _run(self) -> None:
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
            placed = await asyncio.to_thread(
                assign_replicas, [(name, i) for i in range(count)], infos, 1
            )
            moves: dict[int, list[int] | None] = {}
            for i in auto:
                target, current = placed[(name, i)], record.replicas[i]
                if target != current and current and current[0] in live and target[0] in live:
                    moves[i] = target
            if moves and self._deciding():
                log.info(
                    "moving %d partitions of %s to where placement puts them", len(moves), name
                )
                await cluster.reassign(name, moves, by_hand=False)
