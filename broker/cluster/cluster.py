"""Cluster mode (``zookeeper.connect``): membership and topic metadata in ZooKeeper.

How this works
--------------
Under the chroot of ``zookeeper.connect`` (Kafka's ZooKeeper-era map, simplified):

  /cluster/id                  the cluster id, made by the first broker
  /brokers/ids/<id>            ephemeral, one per live broker, as Kafka writes it:
                               {"endpoints": ["NAME://host:port", ...],
                               "listener_security_protocol_map": {NAME: PROTOCOL}, "rack",
                               and "host"/"port" of a listener named PLAINTEXT (else null/-1)}
  /brokers/topics/<name>       a topic: {"topic_id", "replicas": [[ids] per partition],
                               "leader_epochs": [...], "configs": {...}, and while partitions
                               move "reassigning": {index: {"target", "adding", "removing"}},
                               and "manual": [indexes placed by hand]}
  /controller                  kazoo's election recipe: the first contender is the controller
  /latest_producer_id_block    the first producer id not yet handed out, taken by CAS
  /cluster/members             the member brokers (controller.py): {"members": {id: {"rack"}},
                               "removed": [ids]}, by CAS
  /brokers/confirmed/<id>      the session whose registration of broker <id> the controller
                               has confirmed (written by the controller)
  /brokers/shutting_down/<id>  ephemeral: broker <id> is stopping cleanly and asks the
                               controller to move its leaderships away (controlled shutdown)

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
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError

from . import partition_state
from .partition_state import PartitionState
from .placement import BrokerInfo, assign_replicas

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger("headrace.cluster")

BROKERS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CLUSTER_ID = "/cluster/id"
PRODUCER_IDS = "/latest_producer_id_block"
MEMBERS = "/cluster/members"
CONFIRMED = "/brokers/confirmed"
SHUTTING_DOWN = "/brokers/shutting_down"


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


@dataclass(frozen=True)
class Endpoint:
    """A broker's address on one listener (``host``, ``port``), its rack, and every listener
    it registered: (name, security protocol, advertised host, port)."""

    host: str
    port: int
    rack: str | None = None
    listeners: tuple[tuple[str, str, str, int], ...] = ()

    def on(self, listener: str) -> Endpoint | None:
        """This broker's address on the listener named ``listener``; None if it has none."""
        for name, _, host, port in self.listeners:
            if name == listener:
                return Endpoint(host, port, self.rack, self.listeners)
        return None

    def encode(self) -> bytes:
        plain = next((x for x in self.listeners if x[0] == "PLAINTEXT"), None)
        return json.dumps(
            {
                "version": 5,
                "host": plain[2] if plain else None,
                "port": plain[3] if plain else -1,
                "endpoints": [f"{n}://{_bracket(h)}:{p}" for n, _, h, p in self.listeners],
                "listener_security_protocol_map": {n: proto for n, proto, _, _ in self.listeners},
                "rack": self.rack,
                "jmx_port": -1,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes, listener: str) -> Endpoint | None:
        """A registration read from ZooKeeper, addressed on ``listener`` (the inter-broker
        one); None if it has no such listener."""
        d = json.loads(data)
        protocols = d.get("listener_security_protocol_map") or {}
        found = []
        for text in d.get("endpoints") or ():
            name, _, address = text.partition("://")
            host, _, port = address.rpartition(":")
            found.append((name, protocols.get(name, name), host.strip("[]"), int(port)))
        if not found and d.get("host") is not None:  # registered by an older Headrace
            found.append(("PLAINTEXT", "PLAINTEXT", d["host"], int(d["port"])))
        return cls("", 0, d.get("rack"), tuple(found)).on(listener)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class TopicRecord:
    """A topic as the cluster knows it (the znode's content)."""

    topic_id: uuid.UUID
    replicas: list[list[int]]  # per partition, the leader first
    leader_epochs: list[int]
    configs: dict[str, Any] = field(default_factory=dict)
    version: int = -1  # the znode's version: writes compare-and-set on it
    mzxid: int = 0  # the znode's last modification: older watch events are dropped
    created_ms: int = 0  # when the znode was made (a namesake of a deleted topic is newer)
    # partition -> {"target": [ids], "adding": [ids], "removing": [ids]}: moves under way
    reassigning: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    # partitions placed by hand (CreateTopics assignments, reassignments): the controller
    # leaves them where they are
    manual: set[int] = field(default_factory=set)

    def replicated_move(self, index: int) -> bool:
        """Partition ``index`` is moving Kafka's way (more than one replica before or after):
        the adding brokers follow its leader as replicas; a move of a single replica to
        another single broker is a copy and a switch instead (moves.py)."""
        move = self.reassigning.get(index)
        if move is None or not 0 <= index < len(self.replicas):
            return False
        return len(self.replicas[index]) > 1 or len(move["target"]) > 1

    def assigned(self, index: int) -> list[int]:
        """The brokers holding a replica of partition ``index``: its replicas, and during a
        replicated move the adding ones too (Kafka's RS = ORS + TRS)."""
        current = self.replicas[index]
        if not self.replicated_move(index):
            return current
        return current + [b for b in self.reassigning[index]["adding"] if b not in current]

    def encode(self) -> bytes:
        d: dict[str, Any] = {
            "topic_id": str(self.topic_id),
            "replicas": self.replicas,
            "leader_epochs": self.leader_epochs,
            "configs": self.configs,
        }
        if self.reassigning:
            d["reassigning"] = {str(i): m for i, m in sorted(self.reassigning.items())}
        if self.manual:
            d["manual"] = sorted(self.manual)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, stat) -> TopicRecord:
        d = json.loads(data)
        return cls(
            uuid.UUID(d["topic_id"]),
            [list(r) for r in d["replicas"]],
            list(d["leader_epochs"]),
            dict(d["configs"]),
            stat.version,
            stat.mzxid,
            stat.ctime,
            {
                int(i): {k: list(v) for k, v in m.items()}
                for i, m in d.get("reassigning", {}).items()
            },
            set(d.get("manual", ())),
        )


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
            self.cluster_id = await asyncio.to_thread(self._prepare)
            await asyncio.to_thread(self._register)
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

    def _prepare(self) -> str:
        """(In a thread.) The paths every broker uses, and the cluster id."""
        for path in (BROKERS, TOPICS, CONTROLLER, SHUTTING_DOWN):
            self.zk.ensure_path(path)
        try:
            self.zk.create(CLUSTER_ID, uuid.uuid4().hex[:22].encode(), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(CLUSTER_ID)
        return data.decode()

    def _register(self) -> None:
        """(In a thread.) The ephemeral registration. A znode of this id left by a previous
        session (a broker killed, not stopped) is waited for until the session timeout; one
        that outlives it belongs to a live broker, and this one cannot start."""
        path = f"{BROKERS}/{self.node_id}"
        data = self.endpoint.encode()
        deadline = time.monotonic() + self.session_s + 1
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                held, stat = self.zk.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return  # ours already (a retried create)
            if time.monotonic() > deadline:
                holder = json.loads(held).get("endpoints")
                raise ClusterError(
                    f"broker id {self.node_id} is already registered in ZooKeeper at "
                    f"{self.connect} by a live broker at {', '.join(holder or ())}"
                )
            time.sleep(0.25)

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
        records = await asyncio.to_thread(self._read_topics, names)
        fresh = {n: r for n, r in records.items() if r is not None}
        states = await asyncio.to_thread(self._read_states, dict(fresh))
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

    def _read_topics(self, names) -> dict[str, TopicRecord | None]:
        out: dict[str, TopicRecord | None] = {}
        for name in names:
            try:
                data, stat = self.zk.get(f"{TOPICS}/{name}")
            except NoNodeError:
                out[name] = None
                continue
            out[name] = TopicRecord.decode(data, stat)
        return out

    def _read_states(self, topics: dict[str, TopicRecord]) -> dict:
        """(In a thread.) The state of every partition of ``topics`` that has one."""
        out: dict[tuple[str, int], PartitionState] = {}
        for name, record in topics.items():
            for index in range(len(record.replicas)):
                state = partition_state.read(self.zk, name, index)
                if state is not None:
                    out[(name, index)] = state
        return out

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
        await asyncio.to_thread(self._register)
        session = self.zk.client_id[0]
        self._lost = False
        await self._read_all()
        if self.controller_id == self.node_id:
            await self.confirm([self.node_id])
        log.info("broker %d registered again: waiting for the controller", self.node_id)
        while not await asyncio.to_thread(self._is_confirmed, session):
            if self._lost or self._stopping.is_set():
                return  # the session ended again: the next rejoin takes over
            await asyncio.sleep(0.2)
        self.fenced = False
        log.info("broker %d registered again and confirmed: serving", self.node_id)
        if self._elected and self.controller is not None:
            self.controller.start()

    def _is_confirmed(self, session: int) -> bool:
        """(In a thread.) Has the controller confirmed this broker's registration by
        ``session``?"""
        try:
            data, _ = self.zk.get(f"{CONFIRMED}/{self.node_id}")
        except NoNodeError:
            return False
        return data == str(session).encode()

    async def bump_controller_epoch(self) -> tuple[int, int]:
        """(The controller, as it starts.) The controller epoch + 1, by compare-and-set on
        ``/controller_epoch``: (the new epoch, the znode's version), which every state write
        of this controller checks (a controller elected later bumps it, fencing this one)."""

        def run() -> tuple[int, int]:
            path = partition_state.CONTROLLER_EPOCH
            while True:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    try:
                        self.zk.create(path, b"1")
                    except NodeExistsError:
                        continue
                    return 1, 0
                epoch = int(data or b"0") + 1
                try:
                    new = self.zk.set(path, str(epoch).encode(), version=stat.version)
                except BadVersionError:
                    continue
                return epoch, new.version

        return await asyncio.to_thread(run)

    async def restarted(self, nodes) -> set[int]:
        """(The controller.) Those of ``nodes`` registered by a session the controller has not
        confirmed yet: they were down (or their session ended) since, however briefly."""

        def run() -> set[int]:
            out = set()
            for node in nodes:
                try:
                    _, stat = self.zk.get(f"{BROKERS}/{node}")
                except NoNodeError:
                    continue
                try:
                    data, _ = self.zk.get(f"{CONFIRMED}/{node}")
                except NoNodeError:
                    data = b""
                if data != str(stat.ephemeralOwner).encode():
                    out.add(node)
            return out

        return await asyncio.to_thread(run)

    async def confirm(self, nodes) -> None:
        """(The controller.) Confirm the current registration of each of ``nodes``."""

        def run() -> None:
            for node in nodes:
                try:
                    _, stat = self.zk.get(f"{BROKERS}/{node}")
                except NoNodeError:
                    continue
                session = str(stat.ephemeralOwner).encode()
                if self._confirmed.get(node) == session:
                    continue
                path = f"{CONFIRMED}/{node}"
                try:
                    self.zk.set(path, session)
                except NoNodeError:
                    try:
                        self.zk.create(path, session, makepath=True)
                    except NodeExistsError:
                        self.zk.set(path, session)
                self._confirmed[node] = session

        await asyncio.to_thread(run)

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

    def _read_members(self) -> tuple[dict, Any]:
        """(In a thread.) The members znode's content and stat (made empty if missing)."""
        try:
            data, stat = self.zk.get(MEMBERS)
        except NoNodeError:
            try:
                self.zk.create(MEMBERS, b'{"members": {}, "removed": []}', makepath=True)
            except NodeExistsError:
                pass
            data, stat = self.zk.get(MEMBERS)
        return json.loads(data), stat

    async def _change_members(self, change) -> dict:
        """Read, change (``change(d)`` returns True when it changed ``d``) and compare-and-set
        the members znode; the content written (or read, when unchanged)."""

        def run() -> dict:
            while True:
                d, stat = self._read_members()
                if not change(d):
                    return d
                try:
                    self.zk.set(MEMBERS, json.dumps(d, sort_keys=True).encode(), stat.version)
                except BadVersionError:
                    continue
                return d

        return await asyncio.to_thread(run)

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
        d, _ = await asyncio.to_thread(self._read_members)
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

        def write():
            txn = self.zk.transaction()
            txn.create(f"{TOPICS}/{name}", record.encode())
            partition_state.create_ops(txn, name, states, parent=True)
            results = txn.commit()
            if isinstance(results[0], NodeExistsError):
                raise NodeExistsError()
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return self.zk.exists(f"{TOPICS}/{name}")

        try:
            stat = await asyncio.to_thread(write)
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
        path = f"{TOPICS}/{name}"

        def run() -> tuple[TopicRecord, Any, PartitionState | None] | None:
            while True:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    return None
                record = TopicRecord.decode(data, stat)
                move = record.reassigning.get(index)
                if not (
                    move is not None
                    and move["target"] == target
                    and index < len(record.replicas)
                    and record.replicas[index][:1] == [leader]
                ):
                    return None
                state = partition_state.read(self.zk, name, index)
                if state is not None and state.leader != leader:
                    return None
                epoch = max(record.leader_epochs[index], state.leader_epoch if state else 0) + 1
                record.replicas[index] = list(target)
                record.leader_epochs[index] = epoch
                del record.reassigning[index]
                new_state = PartitionState(
                    target[0], epoch, tuple(target), state.controller_epoch if state else 0
                )
                txn = self.zk.transaction()
                txn.set_data(path, record.encode(), stat.version)
                if state is not None:  # (else the controller makes it: ``ensure_state``)
                    txn.set_data(
                        partition_state.state_path(name, index), new_state.encode(), state.version
                    )
                results = txn.commit()
                if any(isinstance(r, Exception) for r in results):
                    continue
                if state is None:
                    return record, results[0], None
                return record, results[0], replace(new_state, version=results[1].version)

        done = await asyncio.to_thread(run)
        if done is None:
            return False
        record, stat, written = done
        if written is not None:
            self.learned(name, index, written)
        await self._written(name, record, stat)
        return True

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
        path = f"{TOPICS}/{name}"
        live = set(self.brokers)

        def run() -> tuple[TopicRecord, Any, PartitionState] | None:
            while True:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    return None
                record = TopicRecord.decode(data, stat)
                move = record.reassigning.get(index)
                state = partition_state.read(self.zk, name, index)
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
                    new_state = replace(
                        state, leader=candidates[0], leader_epoch=epoch + 1, isr=isr
                    )
                record.replicas[index] = list(target)
                record.leader_epochs[index] = new_state.leader_epoch
                del record.reassigning[index]
                txn = self.zk.transaction()
                txn.set_data(path, record.encode(), stat.version)
                txn.set_data(
                    partition_state.state_path(name, index), new_state.encode(), state.version
                )
                results = txn.commit()
                if any(isinstance(r, Exception) for r in results):
                    continue
                return record, results[0], replace(new_state, version=results[1].version)

        done = await asyncio.to_thread(run)
        if done is None:
            return False
        record, stat, written = done
        self.learned(name, index, written)
        await self._written(name, record, stat)
        if self.replicas is not None:
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
        path = f"{TOPICS}/{name}"
        while True:
            try:
                data, stat = await asyncio.to_thread(self.zk.get, path)
            except NoNodeError:
                raise TopicChangeError(3, f"topic {name} does not exist") from None
            record = change(TopicRecord.decode(data, stat))
            if record is None:
                return  # nothing to write
            try:
                new_stat = await asyncio.to_thread(
                    self.zk.set, path, record.encode(), version=stat.version
                )
            except BadVersionError:
                continue
            await self._written(name, record, new_stat)
            return

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

        def take() -> int:
            self.zk.ensure_path(PRODUCER_IDS)
            while True:
                data, stat = self.zk.get(PRODUCER_IDS)
                start = int(data or b"0")
                try:
                    self.zk.set(PRODUCER_IDS, str(start + size).encode(), stat.version)
                except BadVersionError:
                    continue
                return start

        return await asyncio.to_thread(take)
