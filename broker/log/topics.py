"""The topic table: every topic of this broker (topic.py) by name and id, its metadata in
``topics.json``.

``topics.json`` in the data directory (id, partition count, per-topic settings, the
partitions held here: ``Topic.held``) is replaced atomically on every change; each
partition's log lives in ``<topic>-<partition>/``, as in Kafka. Changes go through the cluster
metadata's admin (``cluster.admin``). In a cluster that writes ZooKeeper
(cluster/topic_admin.py), and ``apply`` makes this broker's copy follow it (a restart opens
the partitions ``topics.json`` lists as held before it has read ZooKeeper); a broker on its
own (cluster/single_node.py) has the table make them itself (``create_here`` ...). Who leads
what is the ``Roles`` the broker sets (in a cluster replication/'s; on a broker on its own
``LeaderOfAll``). Disk work
runs in a worker thread; the maps change on the event loop.

Every log opens its files under one descriptor budget, ``open_files`` (``log.max.open.files``),
so the number of partitions is not bounded by RLIMIT_NOFILE. Recovery after a crash and
shutdown use ``num.recovery.threads.per.data.dir`` threads; a clean start opens in one.

Creating a topic or growing one is all or nothing: the new partitions are opened and
``topics.json`` saved in the worker thread, and the maps change only when both worked; on any
failure (too many open files, a full disk, a bad setting) what was made is undone
(``TopicCreationError`` says why). At most ``max.broker.partitions`` partitions are held.
Partitions forget producers idle for ``producer.id.expiration.ms`` (``expire_producers``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headrace.broker.config.config import BrokerConfig
from headrace.pipeline import GroupCommit
from headrace.protocol.errors import ErrorCode
from headrace.storage import (
    Log,
    LogConfig,
    OffsetCheckpoints,
    OpenFiles,
    StorageError,
    fsync_directory,
    replace_file,
)

from .partition import Partition
from .producer_state import ProducerStateManager
from .roles import LeaderOfAll, Roles
from .topic import Topic, TopicCreationError

if TYPE_CHECKING:
    from headrace.broker.cluster.metadata import ClusterMetadata

log = logging.getLogger("headrace")


TOPICS_FILE = "topics.json"
TRANSACTION_STATE = "__transaction_state"
SHARE_GROUP_STATE = "__share_group_state"
INTERNAL_REPLICATION = {
    "__consumer_offsets": "offsets.topic.replication.factor",
    TRANSACTION_STATE: "transaction.state.log.replication.factor",
    SHARE_GROUP_STATE: "share.coordinator.state.topic.replication.factor",
    "_schemas": "schema.registry.topic.replication.factor",
}
# the internal topics whose min.insync.replicas a setting gives (at most their replicas)
INTERNAL_MIN_ISR = {
    TRANSACTION_STATE: "transaction.state.log.min.isr",
    SHARE_GROUP_STATE: "share.coordinator.state.topic.min.isr",
}
RESERVE = ".reserve"  # see TopicManager._reserve
RESERVE_BYTES = 64 * 1024
DELETED_SUFFIX = "-delete"


class TopicManager:
    """All topics of this broker, by name and by id."""

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig,
        flush_stage: GroupCommit,
        cluster: ClusterMetadata,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self._flush_stage = flush_stage
        self.open_files = OpenFiles(int(config["log.max.open.files"]))
        self.checkpoints = OffsetCheckpoints(data_dir)  # every log's offsets, one file
        self._threads = max(1, int(config["num.recovery.threads.per.data.dir"]))
        # join guards each partition's producer state keeps (transactions v2)
        self._max_joining = int(config["transaction.partition.verification.max.guards"])
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._lock = asyncio.Lock()
        # where the topics' metadata lives and who writes it: ZooKeeper through the cluster,
        # or topics.json through this table (cluster/single_node.py)
        self.cluster = cluster
        self._internal: dict[str, asyncio.Future] = {}  # internal topics being made
        # called once topics are gone (the broker's coordinators purge what they keep of them)
        self.on_deleted: Callable[[set[str]], Awaitable[None]] = self._no_one_told
        # this broker's roles (in a cluster replication/'s; set by the broker)
        self.replicas: Roles = LeaderOfAll()

    # start and stop (called in a worker thread before serving and after it) ---------------

    def load(self, recover: bool) -> None:
        """Open every topic's logs; ``recover`` after an unclean stop."""
        for path in self.data_dir.glob(f"*{DELETED_SUFFIX}"):
            shutil.rmtree(path, ignore_errors=True)
        try:
            saved = json.loads((self.data_dir / TOPICS_FILE).read_text())
        except FileNotFoundError:
            saved = {}
        jobs = []
        for name, meta in saved.items():
            topic = self._topic(name, uuid.UUID(meta["id"]), dict(meta["configs"]))
            topic.count = meta["partitions"]
            config = topic.log_config()  # one for all the topic's logs
            jobs += [(topic, i, config) for i in meta.get("held", range(topic.count))]
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
        # A clean open is CPU work under the GIL: more threads only slow it (measured: 1000
        # logs in 0.22 s with one thread, 0.28 s with two, 0.43 s with four). Recovery and
        # close wait on fsyncs, and gain from threads.
        threads = self._threads if recover else 1
        with self.checkpoints.deferred():  # one write of the offsets checkpoint, at the end
            opened = self._in_threads(
                lambda j: self._open_partition(j[0], j[1], recover, j[2]), jobs, threads
            )
        for (topic, i, _), partition in zip(jobs, opened, strict=True):
            topic.held[i] = partition

    def close(self) -> None:
        with self.checkpoints.deferred():  # one write of the offsets checkpoint, at the end
            self._in_threads(Partition.close, self.all_partitions())

    def _in_threads(
        self, fn: Callable[[Any], Any], items: Sequence, threads: int | None = None
    ) -> list:
        """``[fn(item) for item in items]`` in ``threads`` threads (default
        ``num.recovery.threads.per.data.dir``), a chunk of items per task; raises the first
        failure (after every task is done)."""
        threads = threads or self._threads
        if threads == 1 or len(items) < 2:
            return [fn(item) for item in items]
        chunk = max(1, min(256, len(items) // (4 * threads)))
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        with ThreadPoolExecutor(threads, thread_name_prefix="headrace-logs") as pool:
            futures = [pool.submit(lambda c: [fn(item) for item in c], c) for c in chunks]
        return [result for f in futures for result in f.result()]

    def _open_partition(
        self, topic: Topic, index: int, recover: bool, config: LogConfig | None = None
    ) -> Partition:
        log = self.open_log(topic, index, recover, config)
        path = Path(log.directory)
        producers = ProducerStateManager.load(path, log, self._max_joining, just_opened=True)
        p = Partition(topic, index, log, producers)
        self.replicas.opened(p)
        return p

    def open_log(
        self, topic: Topic, index: int, recover: bool = True, config: LogConfig | None = None
    ) -> Log:
        """(In a worker thread.) Open (or make) the log of partition ``index`` of ``topic``."""
        return Log.open(
            self.data_dir / f"{topic.name}-{index}",
            config or topic.log_config(),
            recover=recover,
            files=self.open_files,
            checkpoints=self.checkpoints,
        )

    def _topic(self, name: str, topic_id: uuid.UUID, configs: dict[str, object]) -> Topic:
        return Topic(name, topic_id, configs, self.config, leading=self._leading)

    def _leading(self) -> bool:
        return not self.cluster.fenced

    def _save(self, pending: Topic | None = None, count: int = 0, held=()) -> None:
        """Replace ``topics.json`` atomically; with ``pending``, as if that topic (new, or
        growing) had ``count`` partitions and held ``held`` besides its own. Nothing is left
        behind if it fails. It says which partitions this broker holds (in a cluster, those
        placed here)."""
        data = {}
        for t in self.topics.values():
            data[t.name] = {
                "id": str(t.topic_id),
                "partitions": t.count,
                "configs": t.configs,
                "held": sorted(t.held),
            }
        if pending is not None:
            data[pending.name] = {
                "id": str(pending.topic_id),
                "partitions": count,
                "configs": pending.configs,
                "held": sorted({*pending.held, *held}),
            }
        replace_file(
            self.data_dir / TOPICS_FILE, json.dumps(data, indent=1, sort_keys=True).encode()
        )

    # changes (on the event loop; disk work in a thread) ---------------------------------------

    def flush(self, partitions: Iterable[Partition]) -> asyncio.Future:
        """Make everything appended to ``partitions`` so far durable: one group commit for all
        of them. The future fails with the flush's error (a ``StorageError``)."""
        now = asyncio.get_running_loop().time()
        logs = []
        for p in partitions:
            p.mark_flushed(now)
            logs.append(p.log)
        return self._flush_stage.flush(logs)

    async def expire_producers(self) -> None:
        """Forget every partition's producers idle for ``producer.id.expiration.ms``."""
        idle_s = int(self.config["producer.id.expiration.ms"]) / 1000
        expired = 0
        for i, p in enumerate(self.all_partitions()):
            expired += p.producers.expire(idle_s)
            if i % 1000 == 999:
                await asyncio.sleep(0)  # let requests in between
        if expired:
            log.info("expired %d idle producer ids", expired)

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def all_topics(self) -> list[Topic]:
        """Every topic (a copy: topics may come and go meanwhile)."""
        return list(self.topics.values())

    def all_partitions(self) -> list[Partition]:
        """Every partition of every topic (a copy, as ``all_topics``)."""
        return [p for t in self.all_topics() for p in t.partitions]

    def partition(self, name: str, index: int) -> Partition | None:
        """Partition ``index`` of topic ``name``, or None when there is no such partition."""
        topic = self.topics.get(name)
        return topic.partition(index) if topic is not None else None

    def find(self, name: str | None, topic_id: uuid.UUID | None) -> Topic | None:
        """The topic a request names: by ``name`` when it has one, else by ``topic_id``."""
        if name is not None:
            return self.topics.get(name)
        return self.by_id.get(topic_id) if topic_id is not None else None

    async def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, object],
        replicas: list[list[int]] | None = None,
        replication_factor: int = -1,
    ) -> Topic:
        """Create a topic; the caller has validated the name, count and settings (and the
        explicit ``replicas`` of each partition, if given), through the cluster's admin: in
        ZooKeeper (with ``replication_factor`` replicas per partition, -1:
        ``default.replication.factor``), this broker opening the partitions placed on it
        before this returns; or on a broker on its own, here (``create_here``)."""
        if replication_factor < 0:
            replication_factor = int(self.config["default.replication.factor"])
        await self.cluster.admin.create_topic(
            name, partitions, configs, replicas, replication_factor
        )
        topic = self.topics.get(name)
        if topic is None:
            raise TopicCreationError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{name} was deleted")
        return topic

    async def internal(self, name: str, partitions: int, configs: dict[str, object]) -> Topic:
        """The internal topic ``name`` (``__consumer_offsets``, ``__transaction_state``,
        ``__share_group_state``), made
        on first use; concurrent first uses wait for one creation. A failed creation raises
        (a ``StorageError``) and the next use tries again."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        ready = self._internal.get(name)
        if ready is None:
            # Kafka's settings, at most the live brokers
            setting = INTERNAL_REPLICATION.get(name)
            wanted = int(self.config[setting]) if setting else 1
            rf = max(1, min(wanted, len(self.cluster.brokers)))
            min_isr = INTERNAL_MIN_ISR.get(name)
            if min_isr is not None:
                configs = {**configs, "min.insync.replicas": min(rf, int(self.config[min_isr]))}
            ready = self._internal[name] = asyncio.ensure_future(
                self.create(name, partitions, configs, replication_factor=rf)
            )
        try:
            return await asyncio.shield(ready)
        except FileExistsError:  # made meanwhile (in a cluster: by another broker)
            topic = self.topics.get(name)
            if topic is None:
                raise
            return topic
        finally:
            if ready.done() and self._internal.get(name) is ready:
                del self._internal[name]

    async def add_partitions(
        self, topic: Topic, total: int, replicas: list[list[int]] | None = None
    ) -> None:
        """Grow ``topic`` to ``total`` partitions (CreatePartitions) through the cluster's
        admin, as ``create``."""
        await self.cluster.admin.add_partitions(topic.name, total, replicas)

    def _check_room(self, name: str, more: int) -> None:
        """Refuse (POLICY_VIOLATION) ``more`` partitions past ``max.broker.partitions``."""
        limit = int(self.config["max.broker.partitions"])
        now = sum(len(t.held) for t in self.topics.values())
        if now + more > limit:
            raise TopicCreationError(
                ErrorCode.POLICY_VIOLATION,
                f"Cannot add {more} partitions to topic '{name}': the broker has {now} and "
                f"max.broker.partitions is {limit}.",
            )

    def _grow(self, topic: Topic, indexes: Iterable[int], count: int) -> None:
        """(In a worker thread.) Open partitions ``indexes`` of ``topic`` (which has ``count``
        partitions) and save ``topics.json`` with them, then add them to ``topic.held`` and
        set its count. On a failure the new partitions are closed and their directories
        removed, then ``TopicCreationError`` says why. A directory already there for a new
        partition is a leftover of a creation interrupted by a crash, or of a topic of the
        same name deleted while this broker was away (``topics.json`` does not list it): it
        is removed first, so no old data comes back under the new topic."""
        opened: list[Partition] = []
        made: list[Path] = []
        spare = -1
        try:
            spare = self._reserve()
            for i in indexes:
                path = self.data_dir / f"{topic.name}-{i}"
                if path.exists():  # left by a creation a crash interrupted: not this topic's
                    log.warning("removing %s, not in %s", path, TOPICS_FILE)
                    shutil.rmtree(path)
                made.append(path)
                opened.append(self._open_partition(topic, i, True))
            self.checkpoints.write()  # the new logs' entries, before topics.json lists them
            self._save(topic, count, [p.index for p in opened])
        except Exception as e:
            if spare >= 0:
                os.close(spare)
                spare = -1
            self._undo(opened, made)
            opened.clear()
            raise TopicCreationError.of(topic.name, e) from e
        finally:
            if spare >= 0:
                os.close(spare)
        # one assignment: the event loop may be iterating the old dict meanwhile
        topic.held = dict(sorted({**topic.held, **{p.index: p for p in opened}}.items()))
        topic.count = count

    def _reserve(self) -> int:
        """A descriptor holding an unlinked file of ``RESERVE_BYTES``: closed before an undo,
        it gives back the descriptor, inode and blocks that closing a log needs (its
        checkpoint) when the open-files limit is reached or the disk is full."""
        path = self.data_dir / RESERVE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.unlink(path)
            os.write(fd, bytes(RESERVE_BYTES))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _undo(self, opened: list[Partition], made: list[Path]) -> None:
        """Close the partitions of a failed creation and remove the directories made for it,
        newest first: each removal frees what closing the next log needs."""
        for path in made[len(opened) :]:  # the partition that failed to open
            shutil.rmtree(path, ignore_errors=True)
        failed = 0
        for p, path in reversed(list(zip(opened, made))):
            try:
                p.log.close(removing=True)
            except Exception:
                failed += 1  # its descriptors close when the log is collected
            shutil.rmtree(path, ignore_errors=True)
        for path in made:  # again: a removal may have lacked a descriptor before the closes
            shutil.rmtree(path, ignore_errors=True)
        if failed:
            log.warning("%d logs of a failed creation could not be closed cleanly", failed)
        try:
            fsync_directory(self.data_dir)
        except OSError:
            pass

    async def set_configs(self, topic: Topic, configs: dict[str, object]) -> None:
        """Replace a topic's explicit settings (AlterConfigs) through the cluster's admin; its
        logs use them at once (in a cluster, every broker's logs follow)."""
        await self.cluster.admin.set_configs(topic.name, configs)

    def _configs_changed(self, topic: Topic) -> None:
        log_config = topic.log_config()
        for p in topic.partitions:
            p.log.update_config(log_config)

    async def delete(self, topic: Topic) -> None:
        """Delete a topic through the cluster's admin: every broker holding partitions of it
        forgets them and removes their files, then tells ``on_deleted``."""
        await self.cluster.admin.delete_topic(topic.name)

    # a broker on its own: the changes, made here (cluster/single_node.py's admin) -----------

    async def create_here(self, name: str, partitions: int, configs: dict[str, object]) -> None:
        """All or nothing: on any failure (``TopicCreationError``) no directory of the topic
        is left, nor an entry in ``topics.json`` or in the maps."""
        async with self._lock:
            if name in self.topics:
                raise FileExistsError(name)
            topic = self._topic(name, uuid.uuid4(), configs)
            self._check_room(name, partitions)
            await asyncio.to_thread(self._grow, topic, range(partitions), partitions)
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic

    async def grow_here(self, name: str, total: int) -> None:
        """All or nothing, as ``create_here``."""
        async with self._lock:
            topic = self.topics[name]
            self._check_room(name, total - topic.count)
            await asyncio.to_thread(self._grow, topic, range(topic.count, total), total)

    async def set_configs_here(self, name: str, configs: dict[str, object]) -> None:
        """``topics.json`` saved with the settings first: if that fails (an ``OSError``) the
        topic keeps its old ones."""
        async with self._lock:
            topic = self.topics[name]
            old, topic.configs = topic.configs, dict(configs)
            try:
                await asyncio.to_thread(self._save)
            except BaseException:
                topic.configs = old
                raise
            self._configs_changed(topic)

    async def delete_here(self, name: str) -> None:
        """``topics.json`` saved without the topic first: if that fails (an ``OSError``) the
        topic stays, untouched."""
        async with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                return
            await self._forget(topic)
        await self.on_deleted({name})

    async def _forget(self, topic: Topic) -> None:
        self.topics.pop(topic.name, None)
        self.by_id.pop(topic.topic_id, None)
        try:
            await asyncio.to_thread(self._save)
        except BaseException:
            self.topics[topic.name] = topic
            self.by_id[topic.topic_id] = topic
            raise
        for p in topic.partitions:
            await self.replicas.forget(p)
            p.gone = True
            p.wake_fetches()
        await asyncio.to_thread(self._delete_files, topic)

    async def _no_one_told(self, names: set[str]) -> None:
        pass

    # cluster mode --------------------------------------------------------------------------------

    async def apply(self, name: str) -> None:
        """Make this broker's copy of topic ``name`` what the cluster says
        (``cluster.topics[name]``, read once the lock is held, so the newest wins): open the
        partitions placed on this broker, follow the settings and the partition count, and
        forget the topic when it is gone or was re-created under a new id. Partitions that
        cannot be opened (open-files limit, full disk) are logged and left offline."""
        deleted = False
        async with self._lock:
            record = self.cluster.topics.get(name)
            topic = self.topics.get(name)
            if topic is not None and (record is None or record.topic_id != topic.topic_id):
                await self._forget(topic)
                topic, deleted = None, True
            if record is not None:
                await self._follow(name, topic, record)
        if deleted:
            await self.on_deleted({name})

    async def _follow(self, name: str, topic: Topic | None, record) -> None:
        node = self.cluster.node_id
        mine = [i for i in range(len(record.replicas)) if node in record.assigned(i)]
        new = topic is None
        if topic is None:
            topic = self._topic(name, record.topic_id, dict(record.configs))
            topic.created_ms = record.created_ms
        elif topic.configs != record.configs:
            topic.configs = dict(record.configs)
            self._configs_changed(topic)
        fresh = [i for i in mine if i not in topic.held]
        try:
            if fresh:
                self._check_room(name, len(fresh))
            if fresh or new or topic.count != len(record.replicas):
                await asyncio.to_thread(self._grow, topic, fresh, len(record.replicas))
        except TopicCreationError as e:
            log.error("partitions %s of topic %s are offline here: %s", fresh, name, e.message)
            topic.count = len(record.replicas)
        if new:
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
        lost = sorted(i for i in topic.held if i not in mine)
        if lost:
            await self._lose(topic, lost)
        await self.replicas.topic_applied(topic)

    def _save_or_log(self) -> None:
        try:
            self._save()
        except OSError:
            log.exception("cannot save %s", TOPICS_FILE)

    async def _lose(self, topic: Topic, indexes: list[int]) -> None:
        """Partitions that moved away: stop serving them, then delete their files (the new
        owner has everything: the move ended only then)."""
        gone = [topic.held[i] for i in indexes]
        topic.held = {i: p for i, p in topic.held.items() if i not in indexes}
        for p in gone:
            await self.replicas.forget(p)
            p.gone = True
            p.wake_fetches()
        await asyncio.to_thread(self._save_or_log)
        log.info("partitions %s of %s moved away: removing them here", indexes, topic.name)
        await asyncio.to_thread(self._remove_partitions, topic, gone)

    def _delete_files(self, topic: Topic) -> None:
        """Close and remove the partitions' directories (renamed first, so that one left
        behind by a failure or a crash is removed at the next start)."""
        self._remove_partitions(topic, topic.partitions)

    def _remove_partitions(self, topic: Topic, partitions: list[Partition]) -> None:
        for p in partitions:
            path = Path(p.log.directory)
            try:
                p.log.close(removing=True)
                doomed = path.with_name(f"{path.name}.{topic.topic_id.hex}{DELETED_SUFFIX}")
                os.replace(path, doomed)
            except (OSError, StorageError):
                log.exception("cannot remove %s of deleted topic %s", path, topic.name)
                continue
            shutil.rmtree(doomed, ignore_errors=True)
