"""Cluster mode (``zookeeper.connect``): membership and topic metadata in ZooKeeper.

How this works
--------------
The znodes, their paths and their contents are znodes.py's.

Reading: kazoo's watches run on kazoo's threads; they only hand the new value to the event
loop, where ``brokers``, ``topics`` and ``controller_id`` change. A topic event older than what
is known (by the znode's modification zxid) is dropped. Every topic change is passed on to
``TopicManager.apply``, which opens the partitions placed on this broker, follows settings and
partition counts, and forgets deleted topics (files, and the coordinators' state about them).

Writing: CreateTopics, CreatePartitions, AlterConfigs and DeleteTopics, at whichever broker
they arrive, write the topic's znode (create; compare-and-set on its version; delete), then
apply the result here at once, so the client's answer comes once this broker serves the new
metadata; the others follow through their watches. A new topic's partitions are placed by
``placement.assign_replicas`` over the live brokers, with the topic's replication factor (the
first replica the preferred leader). Each partition's leader, leader epoch and ISR live in its
own state znode, ``/brokers/topics/<name>/partitions/<p>/state`` (partition_state.py), made
with the topic in one ZooKeeper transaction, written only by compare-and-set (the controller's
elections, the leader's ISR changes), watched by every broker (``states``; replica_manager.py
turns them into this broker's roles).

Moves: ``reassign`` writes a partition's move (AlterPartitionReassignments, or the controller)
and ``finish_move`` its switch, both by compare-and-set; moves.py says how a move runs. The
elected controller (controller.py; ``_lead`` starts it, fencing stops it) keeps the member
brokers in ``/cluster/members`` (``update_members``, ``remove_member``) and moves the
partitions placed automatically to where placement over the members puts them.

Producer ids: every broker takes blocks of ids from ``/latest_producer_id_block`` by
compare-and-set, so no id is handed out twice in the cluster.

Sessions: registration is an ephemeral znode. A restarted broker whose previous session has
not expired yet waits for it (up to the session timeout); a live broker with the same id is a
start-up error. When this broker loses its session (kazoo's LOST), or its connection stays
suspended for two thirds of the session timeout (the cluster may have given it up), it is
*fenced*: every partition answers NOT_LEADER_OR_FOLLOWER and every coordinator
NOT_COORDINATOR (``Topic.partition`` returns None), and the server (``on_fenced``) answers the
acks=all writes waiting there, closes every connection and closes new ones at once, so that
clients ask the other brokers, whose view is current; until it has a session again, has
registered again, has re-read every topic and the controller has confirmed the new
registration: the controller confirms each registration it sees (``confirm``, at every check,
after updating the members and before deciding anything) by writing the registering session
under ``/brokers/confirmed/<id>``, so a broker coming back takes up its partitions only once
the controller knows it is back and any decision made meanwhile is in the topics it re-read.
A broker that is itself the controller confirms itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError

from . import partition_state
from .partition_state import PartitionState
from .placement import BrokerInfo, assign_replicas
from .zk_client import ZkClient
from .znodes import (
    BROKERS,
    CONTROLLER,
    MEMBERS,
    NO_MEMBERS,
    PRODUCER_IDS,
    SHUTTING_DOWN,
    TOPICS,
    Endpoint,
    TopicRecord,
)

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger("headrace.cluster")


class TopicTable(Protocol):
    """The topics this broker holds (log/topics.py's ``TopicManager``): told of every topic
    change, it opens, follows and forgets partitions."""

    @property
    def topics(self) -> Mapping[str, object]: ...

    async def apply(self, name: str) -> None: ...


class PartitionRoles(Protocol):
    """This broker's role for each partition (replication/replica_manager.py): told when a
    partition's state (leader, epoch, ISR) changes."""

    def state_changed(self, name: str, index: int) -> None: ...


class ClusterError(Exception):
    """Cluster mode cannot start (ZooKeeper unreachable, broker id taken...)."""


class TopicChangeError(Exception):
    """A topic change the cluster refused; ``error_code`` is Kafka's answer for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class Cluster:
    """This broker's view of the cluster, and its writes to it. ``start`` connects, registers
    and reads everything; the watches keep the view current from then on."""

    def __init__(self, config, node_id: int) -> None:
        self.node_id = node_id
        self.endpoint = Endpoint("", 0)  # known once the broker listens
        # the listener brokers reach each other through (inter.broker.listener.name)
        self.inter_broker_listener = "PLAINTEXT"
        self.connect = str(config["zookeeper.connect"])
        self.max_broker_partitions = int(config["max.broker.partitions"])
        self.unclean_default = bool(config["unclean.leader.election.enable"])
        self.auto_rebalance = bool(config["auto.leader.rebalance.enable"])
        self.session_s = int(config["zookeeper.session.timeout.ms"]) / 1000
        connection_ms = int(config["zookeeper.connection.timeout.ms"])
        self.connection_s = connection_ms / 1000 if connection_ms > 0 else self.session_s
        self.zk = KazooClient(
            hosts=self.connect,
            timeout=self.session_s,
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "max_delay": 1.0},
        )
        self.zk_client = ZkClient(self.zk)
        self.brokers: dict[int, Endpoint] = {}
        self._brokers_reads = 0  # reads of the registered brokers started (the newest wins)
        self.topics: dict[str, TopicRecord] = {}
        self.controller_id = -1
        self._controller_seen = asyncio.Event()  # a controller has been named since the start
        self.cluster_id = ""
        self.fenced = True
        self.serving = False  # until ``serve``: a reconnection before it must not unfence
        self.topic_manager: TopicTable | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._suspended: asyncio.TimerHandle | None = None
        self._lost = False
        self._stopping = threading.Event()
        self._not_leading = threading.Event()
        self._election = self.zk.Election(CONTROLLER, identifier=str(node_id))
        self.controller: Controller | None = None  # the controller's job, while elected
        self._confirmed: dict[int, bytes] = {}  # the registrations confirmed (as controller)
        self.removed: set[int] = set()  # brokers removed while running (being drained)
        self._elected = False
        self._watched: set[str] = set()
        # partition -> its leader, leader epoch and ISR (partition_state.py), newest seen
        self.states: dict[tuple[str, int], PartitionState] = {}
        self._states_watched: set[tuple[str, int]] = set()
        self.replicas: PartitionRoles | None = None  # this broker's roles (set by the server)
        self.on_fenced: Callable[[], None] | None = None  # told when it becomes fenced
        self.shutting_down: set[int] = set()  # brokers in a controlled shutdown

    # start and stop -------------------------------------------------------------------------

    async def start(self, topic_manager: TopicTable, endpoint: Endpoint) -> None:
        """Connect, register, read the brokers and topics and apply them; then watch. The
        broker stays fenced until ``serve``."""
        self._loop = asyncio.get_running_loop()
        self.topic_manager = topic_manager
        self.endpoint = endpoint
        try:
            await asyncio.to_thread(self.zk.start, self.connection_s)
        except KazooTimeoutError:
            self.zk.stop()
            self.zk.close()
            raise ClusterError(
                f"cannot reach ZooKeeper at {self.connect} within {self.connection_s:g} s "
                "(zookeeper.connection.timeout.ms)"
            ) from None
        try:
            self.cluster_id = await asyncio.to_thread(self.zk_client.prepare)
            await self._register()
        except BaseException:
            await asyncio.to_thread(self._close)
            raise
        self.zk.add_listener(self._session_changed)
        await self._read_all()
        self.zk.ChildrenWatch(BROKERS, self._from_zk(self._brokers_changed))
        self.zk.ChildrenWatch(TOPICS, self._from_zk(self._topic_names_changed))
        self.zk.ChildrenWatch(
            CONTROLLER, self._from_zk(lambda _: self._spawn(self._read_controller()))
        )
        self.zk.DataWatch(MEMBERS, self._from_zk(self._members_changed))
        self.zk.ChildrenWatch(SHUTTING_DOWN, self._from_zk(self._shutting_down_changed))
        threading.Thread(target=self._elect, name="headrace-election", daemon=True).start()
        log.info(
            "broker %d registered in %s (cluster %s, %d brokers, %d topics)",
            self.node_id,
            self.connect,
            self.cluster_id,
            len(self.brokers),
            len(self.topics),
        )

    def serve(self) -> None:
        """Start serving the partitions placed here (the coordinators have loaded)."""
        self.serving = True
        self.fenced = False
        if self._elected and self.controller is not None and not self._stopping.is_set():
            self.controller.start()  # elected while still loading (fenced): decide from now

    def _shutting_down_changed(self, ids: list[str]) -> None:
        self.shutting_down = {int(i) for i in ids if i.isdigit()}
        if self.controller is not None:
            self.controller.changed()

    async def controlled_shutdown(self, timeout_s: float) -> int:
        """Kafka's controlled shutdown, before a clean stop: ask the controller (an ephemeral
        ``/brokers/shutting_down/<id>``) to hand every partition this broker leads to another
        live ISR member and to take it out of the ISRs it is in, then wait (at most
        ``timeout_s``) until it leads nothing that another ISR member could lead. Returns how
        many partitions it still leads."""
        if self.fenced:
            return 0
        path = f"{SHUTTING_DOWN}/{self.node_id}"
        try:
            await asyncio.to_thread(self.zk.create, path, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            pass
        except KazooException as e:
            log.warning("controlled shutdown: cannot ask the controller: %s", e)
            return -1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = self._still_led()
            if not left or loop.time() >= deadline or self.fenced:
                return len(left)
            await asyncio.sleep(0.1)

    def _still_led(self) -> list[tuple[str, int]]:
        """The partitions this broker leads that another live ISR member could lead, and
        those where it is in the ISR with others (the controller takes it out)."""
        me = self.node_id
        live = set(self.brokers) - self.shutting_down - {me}  # (all stopping: none waits)
        return [
            key
            for key, state in self.states.items()
            if me in state.isr
            and any(b in live for b in state.isr if b != me)
            and key[0] in self.topics
        ]

    async def stop(self) -> None:
        """Leave the cluster: the registration and a controller role end with the session."""
        self._stopping.set()
        self._not_leading.set()
        if self.controller is not None:
            self.controller.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    async def _register(self) -> None:
        """The ephemeral registration (zk_client.py waits out a previous session's)."""
        holder = await asyncio.to_thread(
            self.zk_client.register, self.node_id, self.endpoint.encode(), self.session_s + 1
        )
        if holder is not None:
            raise ClusterError(
                f"broker id {self.node_id} is already registered in ZooKeeper at "
                f"{self.connect} by a live broker at {holder}"
            )

    # the view -------------------------------------------------------------------------

    def _from_zk(self, fn):
        """A watch callback (kazoo's thread) that runs ``fn`` on the event loop."""
        loop = self._loop
        assert loop is not None

        def watch(*args) -> None:
            if not self._stopping.is_set():
                loop.call_soon_threadsafe(fn, *args)

        return watch

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster metadata update failed", exc_info=task.exception())

    async def _read_all(self) -> None:
        """Read brokers, controller and every topic, and apply the topics (the local ones
        that are gone from the cluster too)."""
        await self._read_brokers(await asyncio.to_thread(self.zk.get_children, BROKERS))
        await self._read_controller()
        names = await asyncio.to_thread(self.zk.get_children, TOPICS)
        records = await asyncio.to_thread(self.zk_client.read_topics, names)
        fresh = {n: r for n, r in records.items() if r is not None}
        states = await asyncio.to_thread(self.zk_client.read_states, dict(fresh))
        # the watches go on meanwhile: a topic or state they told while this read was on its
        # way may be newer than the one read, and is kept (the same topic, by its id)
        same = {
            n
            for n, r in fresh.items()
            if n in self.topics and self.topics[n].topic_id == r.topic_id
        }
        for name in same:
            if self.topics[name].mzxid > fresh[name].mzxid:
                fresh[name] = self.topics[name]
        for key, state in states.items():
            known = self.states.get(key)
            if key[0] in same and known is not None and known.version > state.version:
                states[key] = known
        self.topics, self.states = fresh, states
        for name in self.topics:
            self._watch_states(name)
        assert self.topic_manager is not None
        for name in sorted(set(self.topics) | set(self.topic_manager.topics)):
            await self.topic_manager.apply(name)

    def _watch_states(self, name: str) -> None:
        """Watch the state znode of every partition of topic ``name`` (not watched yet)."""
        record = self.topics.get(name)
        if record is None or self._loop is None:
            return
        for index in range(len(record.replicas)):
            key = (name, index)
            if key in self._states_watched:
                continue
            self._states_watched.add(key)
            self.zk.DataWatch(
                partition_state.state_path(name, index), self._from_zk_state(name, index)
            )

    def _from_zk_state(self, name: str, index: int):
        watch = self._from_zk(self._state_changed)

        def changed(data, stat) -> bool | None:
            if self._stopping.is_set():
                return False
            watch(name, index, data, stat)
            if data is None and (name, index) not in self._states_watched:
                return False
            return None

        return changed

    def _state_changed(self, name: str, index: int, data: bytes | None, stat) -> None:
        key = (name, index)
        if data is None or stat is None:
            if name not in self.topics:
                self._states_watched.discard(key)
                self.states.pop(key, None)
            return
        try:
            state = PartitionState.decode(data, stat.version)
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable state of %s-%d", name, index)
            return
        if not self._newer(key, state):
            return
        self.states[key] = state
        if self.replicas is not None:
            self.replicas.state_changed(name, index)

    def _newer(self, key: tuple[str, int], state: PartitionState) -> bool:
        known = self.states.get(key)
        return known is None or state.version > known.version

    def learned(self, name: str, index: int, state: PartitionState) -> bool:
        """A state this broker wrote or read itself (newer than the watch has told, maybe);
        True when it is the newest known."""
        key = (name, index)
        if not self._newer(key, state):
            return False
        self.states[key] = state
        return True

    async def write_state(
        self, name: str, index: int, new: PartitionState, version: int, fence: int | None = None
    ) -> PartitionState:
        """Compare-and-set a partition's state (partition_state.cas); the state written.
        ``BadVersionError`` when someone wrote since ``version``."""
        written = await asyncio.to_thread(
            partition_state.cas, self.zk, name, index, new, version, fence
        )
        if self.learned(name, index, written) and self.replicas is not None:
            self.replicas.state_changed(name, index)
        return written

    async def read_state(self, name: str, index: int) -> PartitionState | None:
        """Read a partition's state from ZooKeeper now (after a refused write)."""
        state = await asyncio.to_thread(partition_state.read, self.zk, name, index)
        if state is not None and self.learned(name, index, state) and self.replicas is not None:
            self.replicas.state_changed(name, index)
        return state

    async def ensure_state(self, name: str, index: int, state: PartitionState):
        """Make a partition's state znode if it has none (the controller, for topics made
        before partition states existed); the state there."""
        found = await asyncio.to_thread(partition_state.ensure, self.zk, name, index, state)
        if found is not None and self.learned(name, index, found):
            if self.replicas is not None:
                self.replicas.state_changed(name, index)
        return found

    def _brokers_changed(self, ids: list[str]) -> None:
        self._spawn(self._read_brokers(ids))

    async def _read_brokers(self, ids: list[str]) -> None:
        self._brokers_reads += 1
        started = self._brokers_reads
        found = await asyncio.to_thread(self._registrations, ids)
        if started != self._brokers_reads:
            return  # a later change is being read: this one must not overwrite it
        self.brokers = found
        if self.controller is not None and self.controller.active:
            self.controller.changed()

    async def registered_now(self) -> dict[int, Endpoint]:
        """The registered brokers as ZooKeeper has them now, not as the last watch event told
        (a broker that has just registered may not have reached the view yet); the view
        when ZooKeeper cannot be read."""
        try:
            return await asyncio.to_thread(self._registrations)
        except KazooException as e:
            log.warning("cannot read the registered brokers: %r", e)
            return dict(self.brokers)

    def _registrations(self, ids: list[str] | None = None) -> dict[int, Endpoint]:
        """(In a thread.) The registered brokers ``ids`` (None: every one registered now, as
        ZooKeeper has it once synced), by id."""
        if ids is None:
            self.zk.sync(BROKERS)
            ids = self.zk.get_children(BROKERS)
        found = {}
        for name in ids:
            try:
                data, _ = self.zk.get(f"{BROKERS}/{name}")
            except NoNodeError:
                continue
            endpoint = Endpoint.decode(data, self.inter_broker_listener)
            if endpoint is None:
                log.warning(
                    "broker %s has no listener %s (inter.broker.listener.name); it is"
                    " not counted as live",
                    name,
                    self.inter_broker_listener,
                )
                continue
            found[int(name)] = endpoint
        return found

    async def _read_controller(self) -> None:
        contenders = await asyncio.to_thread(self._election.contenders)
        self.controller_id = int(contenders[0]) if contenders else -1
        if self.controller_id >= 0:
            self._controller_seen.set()

    async def controller_known(self) -> None:
        """Wait until the view names a controller (a broker answers clients only from then
        on: Kafka's admin clients wait for one, and a broker just started, with this one
        contending, learns it within milliseconds)."""
        while True:
            try:
                async with asyncio.timeout(5):
                    await self._controller_seen.wait()
                return
            except TimeoutError:
                log.warning("broker %d: no controller elected yet; waiting", self.node_id)

    def _topic_names_changed(self, names: list[str]) -> None:
        for name in names:
            if name not in self._watched:
                self._watched.add(name)
                self.zk.DataWatch(f"{TOPICS}/{name}", self._from_zk_data(name))

    def _from_zk_data(self, name: str):
        watch = self._from_zk(self._topic_changed)

        def changed(data, stat) -> bool | None:
            watch(name, data, stat)
            if data is None:  # deleted: a topic made again under this name is a new child
                self._watched.discard(name)
                return False
            return None

        return changed

    def _topic_changed(self, name: str, data: bytes | None, stat) -> None:
        known = self.topics.get(name)
        if data is None:
            if known is None:
                return
            self.topics.pop(name, None)
            self._forget_states(name)
        else:
            record = TopicRecord.decode(data, stat)
            if known is not None and known.mzxid >= record.mzxid:
                return
            if known is not None and known.topic_id != record.topic_id:
                self._forget_states(name)
            self.topics[name] = record
            self._watch_states(name)
        assert self.topic_manager is not None
        self._spawn(self.topic_manager.apply(name))

    def _forget_states(self, name: str) -> None:
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]
        self._states_watched -= {k for k in self._states_watched if k[0] == name}

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 (unknown partition, no leader elected, or its broker
        is down). A partition without a state znode yet (a topic made before partition states
        existed, until the controller writes one) is led by its first replica."""
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < len(record.replicas):
            return -1
        state = self.states.get((topic, partition))
        if state is not None:
            return state.leader if state.leader in self.brokers else -1
        replicas = record.replicas[partition]
        return replicas[0] if replicas and replicas[0] in self.brokers else -1

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as known here (-1: unknown partition)."""
        state = self.states.get((topic, partition))
        if state is not None:
            return state.leader_epoch
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < len(record.leader_epochs):
            return -1
        return record.leader_epochs[partition]

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.states.get((topic, partition))
        if state is not None:
            return list(state.isr)
        leader = self.leader(topic, partition)
        return [leader] if leader >= 0 else []

    def leader_of(self, topic: str, partition: int) -> int | None:
        """``leader``, but None for a partition the cluster does not have (transaction
        markers skip those)."""
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < len(record.replicas):
            return None
        return self.leader(topic, partition)

    def address_of(self, node: int) -> tuple[str, int] | None:
        """Where a live broker listens (the inter-broker client's address book)."""
        endpoint = self.brokers.get(node)
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    # sessions -------------------------------------------------------------------------

    def _session_changed(self, state: str) -> None:
        """kazoo's connection listener (its thread)."""
        if self._loop is not None and not self._stopping.is_set():
            self._loop.call_soon_threadsafe(self._on_session, state)

    def _on_session(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            if self._suspended is None:
                assert self._loop is not None
                self._suspended = self._loop.call_later(self.session_s * 2 / 3, self._fence)
            return
        if self._suspended is not None:
            self._suspended.cancel()
            self._suspended = None
        if state == KazooState.LOST:
            self._lost = True
            self._fence()
        elif state == KazooState.CONNECTED and self.serving and (self._lost or self.fenced):
            self._spawn(self._rejoin())

    def _fence(self) -> None:
        if not self.fenced:
            log.warning(
                "broker %d lost its ZooKeeper session: not serving partitions", self.node_id
            )
        was_fenced, self.fenced = self.fenced, True
        self._not_leading.set()
        if self.controller is not None:
            self.controller.stop()  # a fenced controller decides nothing
        if not was_fenced and self.on_fenced is not None:
            self.on_fenced()

    async def _rejoin(self) -> None:
        """After a lost session: register again, re-read everything, wait for the
        controller's confirmation, serve again."""
        await self._register()
        session = self.zk.client_id[0]
        self._lost = False
        await self._read_all()
        if self.controller_id == self.node_id:
            await self.confirm([self.node_id])
        log.info("broker %d registered again: waiting for the controller", self.node_id)
        while not await asyncio.to_thread(self.zk_client.is_confirmed, self.node_id, session):
            if self._lost or self._stopping.is_set():
                return  # the session ended again: the next rejoin takes over
            await asyncio.sleep(0.2)
        self.fenced = False
        log.info("broker %d registered again and confirmed: serving", self.node_id)
        if self._elected and self.controller is not None:
            self.controller.start()

    async def bump_controller_epoch(self) -> tuple[int, int]:
        """(The controller, as it starts.) The controller epoch + 1, by compare-and-set on
        ``/controller_epoch``: (the new epoch, the znode's version), which every state write
        of this controller checks (a controller elected later bumps it, fencing this one)."""
        data, stat = await self.zk_client.update(
            partition_state.CONTROLLER_EPOCH,
            lambda data, _: str(int(data or b"0") + 1).encode(),
            initial=b"0",
        )
        return int(data), stat.version

    async def restarted(self, nodes) -> set[int]:
        """(The controller.) Those of ``nodes`` registered by a session the controller has not
        confirmed yet: they were down (or their session ended) since, however briefly."""
        return await asyncio.to_thread(self.zk_client.restarted, nodes)

    async def confirm(self, nodes) -> None:
        """(The controller.) Confirm the current registration of each of ``nodes``."""
        await asyncio.to_thread(self.zk_client.confirm, nodes, self._confirmed)

    # the controller role -------------------------------------------------------------------------

    def _elect(self) -> None:
        """(A thread.) Contend for the controller role for as long as the broker runs; the
        role ends when this broker's session does."""
        while not self._stopping.is_set():
            try:
                self._election.run(self._lead)
            except KazooException:
                if not self._stopping.is_set():  # a stop closes the session under it
                    log.exception("controller election")
            self._stopping.wait(1.0)

    def _lead(self) -> None:
        log.info("broker %d is the controller", self.node_id)
        self._not_leading.clear()
        loop = self._loop
        if loop is not None and self.controller is not None and not self._stopping.is_set():
            loop.call_soon_threadsafe(self._controlling, True)
        self._not_leading.wait()
        if loop is not None and self.controller is not None and not self._stopping.is_set():
            loop.call_soon_threadsafe(self._controlling, False)

    def _controlling(self, elected: bool) -> None:
        """(On the loop.) The election's outcome: the controller decides while this broker is
        elected and not fenced (``_rejoin`` starts it again after a lost session)."""
        assert self.controller is not None
        self._elected = elected
        if elected and not self.fenced and not self._stopping.is_set():
            self.controller.start()
        else:
            self.controller.stop()

    # members -------------------------------------------------------------------------

    async def _change_members(self, change) -> dict:
        """Read, change (``change(d)`` returns True when it changed ``d``) and compare-and-set
        the members znode (made empty if missing); the content written (or read)."""

        def changed(data: bytes, _) -> bytes | None:
            d = json.loads(data)
            return json.dumps(d, sort_keys=True).encode() if change(d) else None

        data, _ = await self.zk_client.update(MEMBERS, changed, initial=NO_MEMBERS)
        return json.loads(data)

    async def update_members(self) -> dict[int, str | None]:
        """(The controller.) Registered brokers not yet members become members; removed
        brokers that have stopped are forgotten. The members: id -> rack."""
        live = dict(self.brokers)

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
        live = set(self.brokers)
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
            if self.controller is not None and self.controller.active:
                self.controller.changed()
        return found

    def _members_changed(self, data: bytes | None, stat, event=None) -> None:
        try:
            self.removed = set(json.loads(data)["removed"]) if data else set()
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable %s", MEMBERS)

    async def members(self) -> dict[int, str | None]:
        d = await self._change_members(lambda _: False)
        return {int(b): m.get("rack") for b, m in d["members"].items()}

    # writes -------------------------------------------------------------------------

    def _live(self) -> dict[int, BrokerInfo]:
        """The live brokers new partitions may go to: not those being removed (drained)."""
        return {
            b: BrokerInfo(rack=e.rack) for b, e in self.brokers.items() if b not in self.removed
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
                found = await self.registered_now()
                live = {
                    b: BrokerInfo(rack=e.rack) for b, e in found.items() if b not in self.removed
                }
            if not live:
                raise TopicChangeError(38, "no broker is registered")  # INVALID_REPLICATION_FACTOR
            if not 1 <= replication_factor <= len(live):
                raise TopicChangeError(
                    38,  # INVALID_REPLICATION_FACTOR
                    f"Replication factor: {replication_factor} larger than available brokers:"
                    f" {len(live)}.",
                )
            placed = await asyncio.to_thread(
                assign_replicas, [(name, i) for i in range(count)], live, replication_factor
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
                data, stat = await asyncio.to_thread(self.zk.get, f"{TOPICS}/{name}")
            except NoNodeError:
                pass
            else:
                await self._written(name, TopicRecord.decode(data, stat), stat)
            raise FileExistsError(name) from None
        if stat is None:
            raise TopicChangeError(3, f"topic {name} was deleted as it was made")
        for i, st in states.items():
            self.learned(name, i, replace(st, version=0))
        await self._written(name, record, stat)

    def _check_room(self, name: str, replicas: list[list[int]]) -> None:
        """Refuse (POLICY_VIOLATION) new partitions that would put a broker over
        ``max.broker.partitions`` (every broker's own setting applies to the partitions it
        opens; this is the creating broker's view, as the whole topic is refused here)."""
        load: dict[int, int] = {}
        for record in self.topics.values():
            for r in record.replicas:
                for b in r:
                    load[b] = load.get(b, 0) + 1
        for r in replicas:
            for b in r:
                load[b] = load.get(b, 0) + 1
                if load[b] > self.max_broker_partitions:
                    raise TopicChangeError(
                        44,  # POLICY_VIOLATION
                        f"Cannot add the partitions of topic '{name}': broker {b} would hold more"
                        f" than max.broker.partitions ({self.max_broker_partitions}).",
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
            if extra is None:  # the whole topic placed, as the controller places it
                rf = max(1, len(record.replicas[0]) if record.replicas else 1)
                placed = assign_replicas([(name, i) for i in range(total)], self._live(), rf)
                extra = [placed[(name, i)] for i in new]
            else:
                record.manual |= set(new)
            self._check_room(name, extra)
            record.replicas = record.replicas + extra
            record.leader_epochs = record.leader_epochs + [0] * len(extra)
            return record

        before = len(self.topics[name].replicas) if name in self.topics else 0
        await self._change(name, grow)
        record = self.topics.get(name)
        if record is not None:
            for i in range(before, len(record.replicas)):
                await self.ensure_state(name, i, partition_state.initial(record.replicas[i]))

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
                    if self.fenced:
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

    async def finish_move(self, name: str, index: int, leader: int, target: list[int]) -> bool:
        """The switch of a move (the leader ``leader`` has stopped writes and the copy has
        everything): ``replicas`` = ``target``, and in the same ZooKeeper transaction the
        partition's state (the target's first broker leads, the leader epoch + 1, the target
        in sync) and the move cleared, each by compare-and-set. False when the move is no
        longer the one under way (cancelled, or changed) or this broker no longer leads the
        partition."""
        if self.fenced:
            return False

        def switch(record: TopicRecord, state: PartitionState | None):
            move = record.reassigning.get(index)
            if not (
                move is not None
                and move["target"] == target
                and index < len(record.replicas)
                and record.replicas[index][:1] == [leader]
            ):
                return None
            if state is not None and state.leader != leader:
                return None
            epoch = max(record.leader_epochs[index], state.leader_epoch if state else 0) + 1
            record.replicas[index] = list(target)
            record.leader_epochs[index] = epoch
            del record.reassigning[index]
            # (a partition without a state znode gets one from the controller: ensure_state)
            controller_epoch = state.controller_epoch if state else 0
            return record, PartitionState(target[0], epoch, tuple(target), controller_epoch)

        return await self._finish(name, index, switch, tell_roles=False)

    async def finish_reassignment(
        self, name: str, index: int, leader: int, epoch: int, target: list[int]
    ) -> bool:
        """The end of a replicated move, written by the partition's leader once every target
        replica is in the ISR: ``replicas`` = ``target`` and the move cleared in the topic's
        znode, and in the same ZooKeeper transaction the state: the ISR without the removed
        replicas, and when the leader itself is removed, the first target replica in the ISR
        that is live leads at the leader epoch + 1. Both by compare-and-set. False when the
        move or the state is no longer what the leader saw."""
        if self.fenced:
            return False
        live = set(self.brokers)

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

        return await self._finish(name, index, end, tell_roles=True)

    async def _finish(self, name: str, index: int, change, tell_roles: bool) -> bool:
        """A move's last write (``ZkClient.update_topic_and_state``), then the view; with
        ``tell_roles`` the replica manager hears of the new state at once (a switch's new
        leader hears of it through the watch, once the copy has been handed over)."""
        done = await asyncio.to_thread(self.zk_client.update_topic_and_state, name, index, change)
        if done is None:
            return False
        record, stat, written = done
        if written is not None:
            self.learned(name, index, written)
        await self._written(name, record, stat)
        if tell_roles and self.replicas is not None:
            self.replicas.state_changed(name, index)
        return True

    async def set_configs(self, name: str, configs: dict[str, Any]) -> None:
        def set_them(record: TopicRecord) -> TopicRecord:
            record.configs = dict(configs)
            return record

        await self._change(name, set_them)

    async def delete_topic(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.zk.delete, f"{TOPICS}/{name}", recursive=True)
        except NoNodeError:
            pass
        if self.topics.pop(name, None) is not None:
            self._forget_states(name)
            assert self.topic_manager is not None
            await self.topic_manager.apply(name)

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
            await self._written(name, changed, stat)

    async def _written(self, name: str, record: TopicRecord, stat) -> None:
        record.version, record.mzxid, record.created_ms = stat.version, stat.mzxid, stat.ctime
        known = self.topics.get(name)
        if known is None or known.mzxid < record.mzxid:
            self.topics[name] = record
            self._watch_states(name)
        assert self.topic_manager is not None
        await self.topic_manager.apply(name)

    async def producer_id_block(self, size: int) -> int:
        """The first of ``size`` producer ids now this broker's alone."""
        data, _ = await self.zk_client.update(
            PRODUCER_IDS, lambda data, _: str(int(data or b"0") + size).encode(), initial=b""
        )
        return int(data) - size
