"""Cluster mode (``zookeeper.connect``): this broker's view of the cluster in ZooKeeper, its
registration and its session.

How this works
--------------
The znodes, their paths and their contents are znodes.py's; the ZooKeeper operations
zk_client.py's; the topic changes this broker writes topic_admin.py's (``Cluster.admin``);
the controller's job, and the members, controller.py's.

Reading: kazoo's watches run on kazoo's threads; they only hand the new value to the event
loop, where ``brokers``, ``topics`` and ``controller_id`` change. A topic event older than what
is known (by the znode's modification zxid) is dropped. Every topic change is passed on to
``TopicManager.apply``, which opens the partitions placed on this broker, follows settings and
partition counts, and forgets deleted topics (files, and the coordinators' state about them).

Each partition's leader, leader epoch and ISR live in its own state znode
(partition_state.py), written only by compare-and-set (the controller's elections, the
leader's ISR changes), watched by every broker (``states``; replica_manager.py turns them into
this broker's roles). A write this broker makes itself is in the view at once (``learned``,
``written``), not only once its watch tells of it.

The controller: every broker contends; the elected one does controller.py's job (fencing
stops it). Producer ids: every broker takes
blocks of ids from ``/latest_producer_id_block`` by compare-and-set, so no id is handed out
twice in the cluster.

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
from collections.abc import Callable, Mapping
from typing import Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from . import partition_state
from .controller import Controller
from .documents import ZnodeDocument
from .metadata import ClusterError
from .partition_state import PartitionState
from .topic_admin import TopicAdmin
from .zk_client import ZkClient
from .znodes import (
    BROKERS,
    CONTROLLER,
    MEMBERS,
    PRODUCER_IDS,
    SHUTTING_DOWN,
    TOPICS,
    Endpoint,
    TopicRecord,
)

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
        self.admin = TopicAdmin(self)  # the topic changes this broker writes
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
        self.stopping = threading.Event()
        # the controller's job, done while this broker is the elected controller
        self.controller = Controller(self, int(config["controller.rebalance.interval.ms"]))
        self.removed: set[int] = set()  # brokers removed while running (being drained)
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
        self.controller.contend()
        log.info(
            "broker %d registered in %s (cluster %s, %d brokers, %d topics)",
            self.node_id,
            self.connect,
            self.cluster_id,
            len(self.brokers),
            len(self.topics),
        )

    def agree_cluster_id(self, known: str) -> str:
        """The cluster's id (read at ``start``), which the data directory's, ``known``, if
        it has one, must be: a data directory never moves to another cluster."""
        if known not in ("", self.cluster_id):
            raise ClusterError(
                f"the data directory belongs to cluster {known}, not to {self.cluster_id} of "
                f"{self.connect}"
            )
        return self.cluster_id

    def document(self, name: str) -> ZnodeDocument:
        """The shared document ``name``: the znode ``/<name>``."""
        return ZnodeDocument(name, self.zk_client)

    def serve(self) -> None:
        """Start serving the partitions placed here (the coordinators have loaded)."""
        self.serving = True
        self.fenced = False
        self.controller.resume()  # elected while still loading (fenced): decide from now

    def _shutting_down_changed(self, ids: list[str]) -> None:
        self.shutting_down = {int(i) for i in ids if i.isdigit()}
        self.controller.changed()

    async def stop(self) -> None:
        """Leave the cluster: the registration and a controller role end with the session."""
        self.stopping.set()
        self.controller.resign()
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
            if not self.stopping.is_set():
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
            if self.stopping.is_set():
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
        self._learned_here(name, index, written)
        return written

    async def read_state(self, name: str, index: int) -> PartitionState | None:
        """Read a partition's state from ZooKeeper now (after a refused write)."""
        state = await asyncio.to_thread(partition_state.read, self.zk, name, index)
        self._learned_here(name, index, state)
        return state

    async def ensure_state(self, name: str, index: int, state: PartitionState):
        """Make a partition's state znode if it has none (the controller, for topics made
        before partition states existed); the state there."""
        found = await asyncio.to_thread(partition_state.ensure, self.zk, name, index, state)
        self._learned_here(name, index, found)
        return found

    def _learned_here(self, name: str, index: int, state: PartitionState | None) -> None:
        """A state read or written here: into the view and, when newest, to the roles."""
        if state is not None and self.learned(name, index, state) and self.replicas is not None:
            self.replicas.state_changed(name, index)

    def _brokers_changed(self, ids: list[str]) -> None:
        self._spawn(self._read_brokers(ids))

    async def _read_brokers(self, ids: list[str]) -> None:
        self._brokers_reads += 1
        started = self._brokers_reads
        found = await asyncio.to_thread(
            self.zk_client.registrations, ids, self.inter_broker_listener
        )
        if started != self._brokers_reads:
            return  # a later change is being read: this one must not overwrite it
        self.brokers = found
        if self.controller.active:
            self.controller.changed()

    async def registered_now(self) -> dict[int, Endpoint]:
        """The registered brokers as ZooKeeper has them now, not as the last watch event told
        (a broker that has just registered may not have reached the view yet); the view
        when ZooKeeper cannot be read."""
        try:
            return await asyncio.to_thread(
                self.zk_client.registrations, None, self.inter_broker_listener
            )
        except KazooException as e:
            log.warning("cannot read the registered brokers: %r", e)
            return dict(self.brokers)

    async def _read_controller(self) -> None:
        contenders = await asyncio.to_thread(self.controller.election.contenders)
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
        if self._loop is not None and not self.stopping.is_set():
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
        self.controller.resign()  # a fenced controller decides nothing
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
            await self.controller.confirm([self.node_id])
        log.info("broker %d registered again: waiting for the controller", self.node_id)
        while not await asyncio.to_thread(self.zk_client.is_confirmed, self.node_id, session):
            if self._lost or self.stopping.is_set():
                return  # the session ended again: the next rejoin takes over
            await asyncio.sleep(0.2)
        self.fenced = False
        log.info("broker %d registered again and confirmed: serving", self.node_id)
        self.controller.resume()

    # members -------------------------------------------------------------------------

    def _members_changed(self, data: bytes | None, stat, event=None) -> None:
        try:
            self.removed = set(json.loads(data)["removed"]) if data else set()
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable %s", MEMBERS)

    # the view after this broker's own writes (topic_admin.py) ---------------------------

    async def forget_topic(self, name: str) -> None:
        """A topic this broker deleted: out of the view, and out of the topic table."""
        if self.topics.pop(name, None) is not None:
            self._forget_states(name)
            assert self.topic_manager is not None
            await self.topic_manager.apply(name)

    async def written(self, name: str, record: TopicRecord, stat) -> None:
        """A topic this broker wrote (``stat``: its znode's, after the write): in the view at
        once, and applied by the topic table, so the client's answer comes once this broker
        serves it (the other brokers follow through their watches)."""
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
