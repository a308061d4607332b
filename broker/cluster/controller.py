"""The controller's job (cluster mode): the member brokers, and the partitions that follow them.

How this works
--------------
The member brokers are kept in ZooKeeper (``/cluster/members``: ``{"members": {id: {"rack"}},
"removed": [ids]}``, written by compare-and-set). A broker becomes a member when it first
registers; it stays one while it is down or restarting (so a restart moves nothing); it stops
being one when it is removed for good (UnregisterBroker, ``remove_member``). A removed
broker that is still registered is listed in ``removed`` until it stops, so that it is not
taken for a new member meanwhile; once it has stopped, a later start makes it a member again.

Every broker contends for the role (kazoo's election recipe, ``contend``); only the elected one
decides, and only while it is not fenced (a controller whose ZooKeeper session is lost or
suspended gives the role up at once: ``resign``). As it starts it bumps the
controller epoch (``/controller_epoch``); each of its partition-state writes checks that
epoch's znode version in the same transaction, so a replaced controller writes nothing.

At every change of the registered brokers (or of those in a controlled shutdown), and every
``controller.rebalance.interval.ms``, it updates the members, then elects leaders
(elections.py) for the partitions whose leader is down, was restarted or is in a controlled
shutdown (``Cluster.controlled_shutdown``: it is taken for gone while another ISR member can
lead, and leaves the ISRs it is in), moves leadership back to the preferred (first) replica
once it is in the ISR again (``auto.leader.rebalance.enable``), and removes brokers that are
down from ISRs (compare-and-set on each partition's state znode; the brokers follow through
their watches), then confirms every registration it has not confirmed yet (a broker back
from a lost session serves only once confirmed: ``confirm``), then rebalances every topic
over the members from where its partitions are (``placement.rebalance_topics``: each holds its
share of a topic's replicas and leaderships, and only what that asks moves), and starts a move
(``Cluster.reassign``, run by replica_manager.py) for each automatically placed partition whose
brokers or preferred leader (the first replica) are not the ones it gives (the followers in
another order move nothing): when a broker joins it takes its share, and a removed broker's
replicas go to the brokers holding the fewest (it is *drained*, and may then stop). Partitions
placed by hand (CreateTopics assignments, AlterPartitionReassignments) and partitions already
moving are left alone, and so is a partition without a live leader or with a target broker down
(a move needs them: it goes on once they are back), and a partition when the members are fewer
than its replicas (placement never shrinks a replication factor).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from . import partition_state
from .elections import elect, preferred
from .placement import BrokerInfo, rebalance_topics
from .znodes import CONTROLLER, MEMBERS, NO_MEMBERS, SHUTTING_DOWN

if TYPE_CHECKING:
    from .cluster import Cluster

log = logging.getLogger("headrace.controller")


class Controller:
    def __init__(self, cluster: Cluster, interval_ms: int) -> None:
        self.cluster = cluster
        self.election = cluster.zk.Election(CONTROLLER, identifier=str(cluster.node_id))
        self.elected = False
        self._not_leading = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.interval_s = max(interval_ms, 10) / 1000
        self.active = False
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self.epoch = 0  # the controller epoch of this term
        self.epoch_version = -1  # its znode's version (checked by every state write)
        self._confirmed: dict[int, bytes] = {}  # the registrations confirmed

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

    # the election ---------------------------------------------------------------------------

    def contend(self) -> None:
        """(On the loop, once registered.) Contend for the role for as long as the broker
        runs, in a thread of its own; it decides while elected and not fenced."""
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._elect, name="headrace-election", daemon=True).start()

    def resign(self) -> None:
        """(The broker is fenced, or stops.) Decide nothing more, and give the role up (a
        fenced broker contends again once its session is back)."""
        self._not_leading.set()
        self.stop()

    def resume(self) -> None:
        """(The broker serves again.) Decide again if still elected."""
        if self.elected and not self.cluster.stopping.is_set():
            self.start()

    def _elect(self) -> None:
        """(A thread.) Contend for the controller role for as long as the broker runs; the
        role ends when this broker's session does."""
        stopping = self.cluster.stopping
        while not stopping.is_set():
            try:
                self.election.run(self._lead)
            except KazooException:
                if not stopping.is_set():  # a stop closes the session under it
                    log.exception("controller election")
            stopping.wait(1.0)

    def _lead(self) -> None:
        log.info("broker %d is the controller", self.cluster.node_id)
        self._not_leading.clear()
        loop, stopping = self._loop, self.cluster.stopping
        if loop is not None and not stopping.is_set():
            loop.call_soon_threadsafe(self._controlling, True)
        self._not_leading.wait()
        if loop is not None and not stopping.is_set():
            loop.call_soon_threadsafe(self._controlling, False)

    def _controlling(self, elected: bool) -> None:
        """(On the loop.) The election's outcome: decide while this broker is elected and not
        fenced (``Cluster._rejoin`` resumes after a lost session)."""
        self.elected = elected
        if elected and not self.cluster.fenced and not self.cluster.stopping.is_set():
            self.start()
        else:
            self.stop()

    def changed(self) -> None:
        """The registered brokers (or the members) changed: look again now."""
        self._wake.set()

    async def _run(self) -> None:
        while self.active and self.epoch_version < 0:
            try:
                self.epoch, self.epoch_version = await self.bump_controller_epoch()
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
        members = await self.update_members()
        if not self._deciding():
            return
        await self.elect_leaders()  # before the confirmations: a restarted leader is replaced
        if not self._deciding():
            return
        await self.confirm(list(cluster.brokers))  # after the members, before any move
        if not members or not self._deciding():
            return
        infos = {b: BrokerInfo(rack=rack) for b, rack in members.items()}
        live = set(cluster.brokers)
        records = dict(cluster.topics)
        topics = {name: record.placing() for name, record in records.items()}
        for name, placed_list in (await asyncio.to_thread(rebalance_topics, topics, infos)).items():
            record = records[name]
            moves: dict[int, list[int] | None] = {}
            for i, target in enumerate(placed_list):
                current = record.replicas[i] if i < len(record.replicas) else []
                if i in record.manual or i in record.reassigning or len(target) != len(current):
                    continue
                if set(target) == set(current) and target[0] == current[0]:
                    continue  # (followers in another order: nothing to move)
                if cluster.leader(name, i) < 0 or not all(b in live for b in target):
                    continue  # a move needs its leader and its target brokers up
                moves[i] = target
            if moves and self._deciding():
                log.info(
                    "moving %d partitions of %s to where placement puts them", len(moves), name
                )
                await cluster.admin.reassign(name, moves, by_hand=False)

    async def elect_leaders(self) -> None:
        """Elect a leader for every partition whose leader is down or restarted, and drop
        brokers that are down from ISRs; make the state of partitions that have none."""
        cluster = self.cluster
        live = set(cluster.brokers)
        leaving = cluster.shutting_down & live  # in a controlled shutdown: lead nothing
        restarted = await self.restarted(live)
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

    # a broker stopping cleanly ------------------------------------------------------------

    async def controlled_shutdown(self, timeout_s: float) -> int:
        """(Any broker, of itself.) Kafka's controlled shutdown, before a clean stop: ask the
        controller (an ephemeral
        ``/brokers/shutting_down/<id>``) to hand every partition this broker leads to another
        live ISR member and to take it out of the ISRs it is in, then wait (at most
        ``timeout_s``) until it leads nothing that another ISR member could lead. Returns how
        many partitions it still leads."""
        started = time.monotonic()
        left = await self._hand_over(timeout_s)
        log.info(
            "controlled shutdown in %.0f ms (%d partitions still led or in sync)",
            (time.monotonic() - started) * 1000,
            max(left, 0),
        )
        return left

    async def _hand_over(self, timeout_s: float) -> int:
        cluster = self.cluster
        if cluster.fenced:
            return 0
        path = f"{SHUTTING_DOWN}/{cluster.node_id}"
        try:
            await asyncio.to_thread(cluster.zk.create, path, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            pass
        except KazooException as e:
            log.warning("controlled shutdown: cannot ask the controller: %s", e)
            return -1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = self._still_led()
            if not left or loop.time() >= deadline or cluster.fenced:
                return len(left)
            await asyncio.sleep(0.1)

    def _still_led(self) -> list[tuple[str, int]]:
        """The partitions this broker leads that another live ISR member could lead, and
        those where it is in the ISR with others (the controller takes it out)."""
        cluster = self.cluster
        me = cluster.node_id
        live = set(cluster.brokers) - cluster.shutting_down - {me}  # (all stopping: none waits)
        return [
            key
            for key, state in cluster.states.items()
            if me in state.isr
            and any(b in live for b in state.isr if b != me)
            and key[0] in cluster.topics
        ]

    # in ZooKeeper ------------------------------------------------------------------------

    async def bump_controller_epoch(self) -> tuple[int, int]:
        """(The controller, as it starts.) The controller epoch + 1, by compare-and-set on
        ``/controller_epoch``: (the new epoch, the znode's version), which every state write
        of this controller checks (a controller elected later bumps it, fencing this one)."""
        data, stat = await self.cluster.zk_client.update(
            partition_state.CONTROLLER_EPOCH,
            lambda data, _: str(int(data or b"0") + 1).encode(),
            initial=b"0",
        )
        return int(data), stat.version

    async def restarted(self, nodes) -> set[int]:
        """(The controller.) Those of ``nodes`` registered by a session the controller has not
        confirmed yet: they were down (or their session ended) since, however briefly."""
        return await asyncio.to_thread(self.cluster.zk_client.restarted, nodes)

    async def confirm(self, nodes) -> None:
        """(The controller.) Confirm the current registration of each of ``nodes``."""
        await asyncio.to_thread(self.cluster.zk_client.confirm, nodes, self._confirmed)

    async def _change_members(self, change) -> dict:
        """Read, change (``change(d)`` returns True when it changed ``d``) and compare-and-set
        the members znode (made empty if missing); the content written (or read)."""

        def changed(data: bytes, _) -> bytes | None:
            d = json.loads(data)
            return json.dumps(d, sort_keys=True).encode() if change(d) else None

        data, _ = await self.cluster.zk_client.update(MEMBERS, changed, initial=NO_MEMBERS)
        return json.loads(data)

    async def update_members(self) -> dict[int, str | None]:
        """Registered brokers not yet members become members; removed
        brokers that have stopped are forgotten. The members: id -> rack."""
        live = dict(self.cluster.brokers)

        def change(d: dict) -> bool:
            members, removed = d["members"], d["removed"]
            changed = False
            for b, e in live.items():
                if str(b) not in members and b not in removed:
                    members[str(b)] = {"rack": e.rack}
                    log.info("broker %d is a member of the cluster", b)
                    changed = True
            kept = [b for b in removed if b in live]
            if kept != removed:
                d["removed"] = kept
                changed = True
            return changed

        d = await self._change_members(change)
        return {int(b): m.get("rack") for b, m in d["members"].items()}

    async def remove_member(self, node: int) -> bool:
        """Remove a member for good (UnregisterBroker): its partitions move to the others
        while it runs (it is drained), and a later start makes it a member again. False when
        it is not a member."""
        live = set(self.cluster.brokers)
        found = False

        def change(d: dict) -> bool:
            nonlocal found
            found = d["members"].pop(str(node), None) is not None
            if found and node in live and node not in d["removed"]:
                d["removed"].append(node)
            return found

        await self._change_members(change)
        if found:
            log.info("broker %d was removed from the cluster", node)
            if self.active:
                self.changed()
        return found

    async def members(self) -> dict[int, str | None]:
        d = await self._change_members(lambda _: False)
        return {int(b): m.get("rack") for b, m in d["members"].items()}
