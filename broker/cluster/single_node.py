"""A broker on its own: the cluster metadata of a cluster of one.

How this works
--------------
``SingleNode`` has the surface of cluster.py's ``Cluster`` (the ZooKeeper cluster) that the
rest of the broker uses, so that no code asks whether there is a cluster: this broker is the
only member and the controller, leads every partition it holds in leader epoch 0 with itself
the whole ISR, and is never fenced. Its view of the topics is the topic table itself
(``topics`` and ``states`` are read from it as they are asked for), and its writes
(``admin``) are the table's own: ``topics.json``, all or nothing (log/topics.py). Producer-id
blocks are reserved in the file ``producer-ids`` of the data directory (written and fsynced
before an id of a block is handed out, so none is given twice across a crash); the shared
documents are files there too (documents.py). Its controller has nothing to decide: every
preferred leader leads already, and a controlled shutdown has nothing to hand over.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from headrace.protocol.errors import ErrorCode
from headrace.storage import replace_file

from .documents import FileDocument
from .partition_state import PartitionState
from .topic_admin import TopicChangeError
from .znodes import Endpoint, TopicRecord

PRODUCER_IDS_FILE = "producer-ids"


class Topics(Protocol):
    """What the topic table (log/topics.py) shows of a topic."""

    topic_id: uuid.UUID
    count: int
    created_ms: int

    @property
    def configs(self) -> dict[str, Any]: ...


class LocalTopics(Protocol):
    """The topic table as a broker on its own changes it (log/topics.py's ``TopicManager``):
    every change all or nothing, in ``topics.json``."""

    @property
    def topics(self) -> Mapping[str, Topics]: ...

    async def create_here(self, name: str, partitions: int, configs: dict[str, Any]) -> None: ...

    async def grow_here(self, name: str, total: int) -> None: ...

    async def set_configs_here(self, name: str, configs: dict[str, Any]) -> None: ...

    async def delete_here(self, name: str) -> None: ...


class SingleNode:
    """The cluster of one this broker is (see the module docstring). ``table`` is the topic
    table, given once both exist."""

    fenced = False

    def __init__(self, node_id: int, data_dir: Path) -> None:
        self.node_id = self.controller_id = node_id
        self.data_dir = data_dir
        self.cluster_id = ""  # the data directory's (``agree_cluster_id``)
        self.inter_broker_listener = "PLAINTEXT"
        self.brokers: dict[int, Endpoint] = {}  # this broker, once it listens
        self.table: LocalTopics | None = None
        self.topics: Mapping[str, TopicRecord] = _Records(self)
        self.states: Mapping[tuple[str, int], PartitionState] = _States(self)
        self.admin = _Admin(self)
        self.controller = _SoleController(node_id)
        self._ids_lock = asyncio.Lock()

    # the lifecycle the cluster's has: nothing to join ---------------------------------------

    async def start(self, table: LocalTopics, endpoint: Endpoint) -> None:
        self.table = table
        self.brokers = {self.node_id: endpoint}

    def agree_cluster_id(self, known: str) -> str:
        """The cluster id: the data directory's (``known``), or a new one for a new one."""
        self.cluster_id = known or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        return self.cluster_id

    def serve(self) -> None:
        pass

    async def controller_known(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def registered_now(self) -> dict[int, Endpoint]:
        return dict(self.brokers)

    # the view ---------------------------------------------------------------------------

    def _topic(self, name: str) -> Topics | None:
        return self.table.topics.get(name) if self.table is not None else None

    def _count(self, topic: str) -> int:
        held = self._topic(topic)
        return held.count if held is not None else 0

    def leader(self, topic: str, partition: int) -> int:
        """This broker, for every partition of every topic (-1: no such partition). A topic
        not made yet is led here too, as it will be once made: the coordinators serve the
        groups and transactions whose internal topic they make on first use."""
        held = self._topic(topic)
        return self.node_id if held is None or 0 <= partition < held.count else -1

    def leader_of(self, topic: str, partition: int) -> int | None:
        return self.node_id if 0 <= partition < self._count(topic) else None

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0 if 0 <= partition < self._count(topic) else -1

    def isr(self, topic: str, partition: int) -> list[int]:
        return [self.node_id] if 0 <= partition < self._count(topic) else []

    def address_of(self, node: int) -> tuple[str, int] | None:
        """No other broker to reach."""
        return None

    def document(self, name: str) -> FileDocument:
        """The shared document ``name``: ``<name>.json`` in the data directory."""
        return FileDocument(name, self.data_dir)

    async def producer_id_block(self, size: int) -> int:
        """The first of ``size`` producer ids reserved in ``producer-ids``."""
        async with self._ids_lock:
            return await asyncio.to_thread(self._reserve_ids, size)

    def _reserve_ids(self, size: int) -> int:
        path = self.data_dir / PRODUCER_IDS_FILE
        try:
            first = int(path.read_text())
        except (FileNotFoundError, ValueError):
            first = 0
        replace_file(path, str(first + size).encode())
        return first


class _Records(Mapping[str, TopicRecord]):
    """The topic table's topics as the cluster's records: one replica each, this broker."""

    def __init__(self, node: SingleNode) -> None:
        self._node = node

    def _table(self) -> Mapping[str, Topics]:
        return self._node.table.topics if self._node.table is not None else {}

    def __getitem__(self, name: str) -> TopicRecord:
        topic = self._table()[name]
        return TopicRecord(
            topic.topic_id,
            [[self._node.node_id] for _ in range(topic.count)],
            [0] * topic.count,
            dict(topic.configs),
            created_ms=topic.created_ms,
        )

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._table()))

    def __len__(self) -> int:
        return len(self._table())


class _States(Mapping[tuple[str, int], PartitionState]):
    """Every partition's state: led here, in leader epoch 0, this broker the ISR."""

    def __init__(self, node: SingleNode) -> None:
        self._node = node

    def __getitem__(self, key: tuple[str, int]) -> PartitionState:
        topic, index = key
        if not 0 <= index < self._node._count(topic):
            raise KeyError(key)
        return PartitionState(self._node.node_id, 0, (self._node.node_id,))

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for name, record in list(self._node.topics.items()):
            for index in range(len(record.replicas)):
                yield name, index

    def __len__(self) -> int:
        return sum(len(r.replicas) for r in self._node.topics.values())


class _Admin:
    """Topic changes, made by the topic table itself. The replicas asked for were checked
    against the live brokers (this one) by the API modules, so a new partition's one replica
    is here."""

    def __init__(self, node: SingleNode) -> None:
        self._node = node

    def _table(self) -> LocalTopics:
        assert self._node.table is not None, "the topic table is given at start"
        return self._node.table

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, Any],
        replicas: list[list[int]] | None,
        replication_factor: int,
    ) -> None:
        await self._table().create_here(name, partitions, configs)

    async def add_partitions(
        self, name: str, total: int, replicas: list[list[int]] | None = None
    ) -> None:
        await self._table().grow_here(name, total)

    async def set_configs(self, name: str, configs: dict[str, Any]) -> None:
        await self._table().set_configs_here(name, configs)

    async def delete_topic(self, name: str) -> None:
        await self._table().delete_here(name)

    async def reassign(self, name: str, targets: dict[int, list[int] | None]) -> dict[int, str]:
        """Nothing to move: every partition's one replica is here, where the targets (checked
        against the live brokers) put it; nothing is under way to cancel."""
        return {
            index: f"No reassignment of partition {index} of {name} is in progress."
            for index, target in targets.items()
            if target is None
        }


class _SoleController:
    """The controller of a cluster of one: every partition's preferred leader leads, so an
    election has nothing to do; there is no other member to remove, nor anyone to hand
    partitions to at a controlled shutdown."""

    active = True
    epoch = 0
    epoch_version = 0

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    async def remove_member(self, node: int) -> bool:
        if node == self.node_id:
            raise TopicChangeError(
                ErrorCode.INVALID_REQUEST, "A broker on its own cannot be removed."
            )
        return False

    async def controlled_shutdown(self, timeout_s: float) -> int:
        return 0
