"""The ZooKeeper operations of cluster mode, kept apart from the znodes' layout (znodes.py)
and from the view built from them (cluster.py), as Kafka's ``KafkaZkClient`` is.

How this works
--------------
kazoo's calls block, so every method here that reads or writes runs in a worker thread
(``asyncio.to_thread``), except ``update``, which is a coroutine: it reads and writes in
threads and calls its ``change`` on the event loop, where the caller's view may be read safely.

Every write that depends on what it read is a compare-and-set on the znode's version, tried
again from a fresh read when someone else wrote in between: ``update`` for one znode (a topic,
the members, the producer id block, the controller epoch, the shared documents, a SCRAM user),
``update_topic_and_state`` for a topic and one partition's state in one ZooKeeper transaction
(the switch of a move, the end of a reassignment). Nothing here keeps state.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from . import partition_state
from .partition_state import PartitionState
from .znodes import (
    BROKERS,
    CLUSTER_ID,
    CONFIRMED,
    CONTROLLER,
    SHUTTING_DOWN,
    TOPICS,
    Endpoint,
    TopicRecord,
)

log = logging.getLogger("headrace.cluster")

# ``update_topic_and_state``'s change: the topic's record and the partition's state as read
# (None: it has none) -> the record and state to write (state None: only the record), or None
# to write nothing
TopicAndState = Callable[
    [TopicRecord, PartitionState | None], tuple[TopicRecord, PartitionState | None] | None
]


class ZkClient:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    # compare-and-set ----------------------------------------------------------------------

    async def update(
        self,
        path: str,
        change: Callable[[bytes, Any], bytes | None],
        *,
        initial: bytes | None = None,
        delete_empty: bool = False,
    ) -> tuple[bytes, Any]:
        """Read ``path``, ``change(data, stat)`` it (the bytes to write, or None to write
        nothing) and compare-and-set the result, from a fresh read again while someone else
        writes in between. A missing znode is made with ``initial`` first (None: NoNodeError
        is raised); with ``delete_empty``, empty bytes delete it (compare-and-set too: the
        stat returned is then None). Returns the data written (or read, when unchanged) and
        its stat."""
        while True:
            data, stat = await asyncio.to_thread(self._get, path, initial)
            new = change(data, stat)
            if new is None:
                return data, stat
            try:
                if delete_empty and not new:
                    await asyncio.to_thread(self.zk.delete, path, version=stat.version)
                    return new, None
                stat = await asyncio.to_thread(self.zk.set, path, new, version=stat.version)
            except (BadVersionError, NoNodeError):
                continue
            return new, stat

    def _get(self, path: str, initial: bytes | None) -> tuple[bytes, Any]:
        try:
            return self.zk.get(path)
        except NoNodeError:
            if initial is None:
                raise
        try:
            self.zk.create(path, initial, makepath=True)
        except NodeExistsError:
            pass
        return self.zk.get(path)

    def update_topic_and_state(
        self, name: str, index: int, change: TopicAndState
    ) -> tuple[TopicRecord, Any, PartitionState | None] | None:
        """(In a thread.) Change topic ``name``'s znode and partition ``index``'s state
        together, each by compare-and-set, in one transaction, until no one wrote in between.
        Returns the record, its new stat and the state written (with its version), or None
        when the topic is gone or ``change`` wrote nothing."""
        path = f"{TOPICS}/{name}"
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return None
            state = partition_state.read(self.zk, name, index)
            changed = change(TopicRecord.decode(data, stat), state)
            if changed is None:
                return None
            record, new_state = changed
            txn = self.zk.transaction()
            txn.set_data(path, record.encode(), stat.version)
            if new_state is not None and state is not None:
                txn.set_data(
                    partition_state.state_path(name, index), new_state.encode(), state.version
                )
            results = txn.commit()
            if any(isinstance(r, Exception) for r in results):
                continue
            if new_state is None or state is None:
                return record, results[0], None
            return record, results[0], replace(new_state, version=results[1].version)

    # registration ------------------------------------------------------------------------

    def prepare(self) -> str:
        """(In a thread.) The paths every broker uses, and the cluster id."""
        for path in (BROKERS, TOPICS, CONTROLLER, SHUTTING_DOWN):
            self.zk.ensure_path(path)
        try:
            self.zk.create(CLUSTER_ID, uuid.uuid4().hex[:22].encode(), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(CLUSTER_ID)
        return data.decode()

    def register(self, node_id: int, data: bytes, wait_s: float) -> str | None:
        """(In a thread.) Broker ``node_id``'s ephemeral registration. A znode of this id left
        by a previous session (a broker killed, not stopped) is waited for, up to ``wait_s``;
        one that outlives it belongs to a live broker: its endpoints are returned (None: this
        session registered)."""
        path = f"{BROKERS}/{node_id}"
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                return None
            except NodeExistsError:
                pass
            try:
                held, stat = self.zk.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return None  # ours already (a retried create)
            if time.monotonic() > deadline:
                return ", ".join(json.loads(held).get("endpoints") or ())
            time.sleep(0.25)

    def registrations(self, ids: list[str] | None, listener: str) -> dict[int, Endpoint]:
        """(In a thread.) The registered brokers ``ids`` (None: every one registered now, as
        ZooKeeper has it once synced), by id, addressed on ``listener``; a broker without that
        listener is not counted as live."""
        if ids is None:
            self.zk.sync(BROKERS)
            ids = self.zk.get_children(BROKERS)
        found = {}
        for name in ids:
            try:
                data, _ = self.zk.get(f"{BROKERS}/{name}")
            except NoNodeError:
                continue
            endpoint = Endpoint.decode(data, listener)
            if endpoint is None:
                log.warning(
                    "broker %s has no listener %s (inter.broker.listener.name); it is"
                    " not counted as live",
                    name,
                    listener,
                )
                continue
            found[int(name)] = endpoint
        return found

    def is_confirmed(self, node_id: int, session: int) -> bool:
        """(In a thread.) Has the controller confirmed broker ``node_id``'s registration by
        ``session``?"""
        try:
            data, _ = self.zk.get(f"{CONFIRMED}/{node_id}")
        except NoNodeError:
            return False
        return data == str(session).encode()

    def restarted(self, nodes) -> set[int]:
        """(In a thread; the controller.) Those of ``nodes`` registered by a session the
        controller has not confirmed yet."""
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

    def confirm(self, nodes, confirmed: dict[int, bytes]) -> None:
        """(In a thread; the controller.) Confirm the current registration of each of
        ``nodes``; ``confirmed``: the sessions confirmed already (kept up to date)."""
        for node in nodes:
            try:
                _, stat = self.zk.get(f"{BROKERS}/{node}")
            except NoNodeError:
                continue
            session = str(stat.ephemeralOwner).encode()
            if confirmed.get(node) == session:
                continue
            path = f"{CONFIRMED}/{node}"
            try:
                self.zk.set(path, session)
            except NoNodeError:
                try:
                    self.zk.create(path, session, makepath=True)
                except NodeExistsError:
                    self.zk.set(path, session)
            confirmed[node] = session

    # topics -----------------------------------------------------------------------------

    def read_topics(self, names) -> dict[str, TopicRecord | None]:
        """(In a thread.) The topics ``names`` (None: deleted meanwhile)."""
        out: dict[str, TopicRecord | None] = {}
        for name in names:
            try:
                data, stat = self.zk.get(f"{TOPICS}/{name}")
            except NoNodeError:
                out[name] = None
                continue
            out[name] = TopicRecord.decode(data, stat)
        return out

    def read_states(self, topics: dict[str, TopicRecord]) -> dict:
        """(In a thread.) The state of every partition of ``topics`` that has one."""
        out: dict[tuple[str, int], PartitionState] = {}
        for name, record in topics.items():
            for index in range(len(record.replicas)):
                state = partition_state.read(self.zk, name, index)
                if state is not None:
                    out[(name, index)] = state
        return out

    def create_topic(self, name: str, record: TopicRecord, states: dict[int, PartitionState]):
        """(In a thread.) A new topic and its partitions' states, in one transaction; the
        topic's stat (None: deleted as it was made). NodeExistsError when the name is taken."""
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
