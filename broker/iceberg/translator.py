"""The translator: the partition leaders' side of topics as tables. On the event loop it only
decides what to read (each partition's last stable offset) and keeps the metrics; reading the
log, making the rows and committing them run in worker threads, so produce and the event loop
never wait for a catalog or a disk.

Every ``iceberg.commit.interval.ms`` each topic whose ``iceberg.mode`` is not ``disabled`` and
that has new committed records in a partition this broker leads gets a round: in a worker
thread, load the table (made on first use), take each partition's next offset from it (the
table is the source of truth: a restart or a new leader starts there), read the committed
records up to the last stable offset (committed.py), make the rows (rows.py) and commit them
with the new offsets in one snapshot (tables.py). A conflict (another leader committed to the
same table) reads the round again at once; a failure (the catalog, the disk) is counted and
the topic waits, doubling, before it tries again; records stay in the log meanwhile.

Bounds: a round reads at most ``iceberg.partition.buffer.max.bytes`` of a partition, whole
batches; all rounds at once hold at most ``iceberg.buffer.max.bytes`` (budget.py: a round takes
bytes before it reads each partition, and one that finds none free commits what it has read);
``iceberg.max.open.files`` rounds run at once (one table, one Parquet file each), in as many
worker threads. A batch is never split: one larger than a bound is read by a round of its own
(budget.py). A round starts at the partition after the one its topic's last round started
at, so every partition gets its turn when the budget is short; a round that stopped at a
bound is followed by the next at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from headrace.broker.log.topic import Topic
from headrace.broker.log.topics import TopicManager

from .budget import BufferBudget, Hold

log = logging.getLogger("headrace")

MODES = ("key_value", "value_schema_id_prefix")
CONFLICT_RETRIES = 20
TICK_S = 0.1  # how often the last stable offsets are sampled (for the lag)
SAMPLES = 4096  # per partition: (last stable offset, when first seen)

# how long a schema id the registry does not know is waited for (this broker's view of
# _schemas may lag the broker a producer registered it through) before its values are taken
# as undecodable (value_raw)
UNKNOWN_SCHEMA_GRACE_S = 30.0


class SchemaSource(Protocol):
    """The schema registry, as the translator reads it (``registry.SchemaRegistry``)."""

    @property
    def loaded(self) -> bool: ...

    def schema_texts(self, schema_id: int) -> tuple[str, str, list[str]] | None:
        """(type, text, referenced texts) of a schema id; None: not in the registry."""
        ...


class SchemasNotReady(Exception):
    """Values name schema ids the registry cannot give yet: the round waits and tries again."""


@dataclass
class TopicState:
    """What the translator keeps about one topic's table."""

    topic_id: Any = None
    due: float = 0.0  # monotonic time of its next round
    running: bool = False
    failures: int = 0  # in a row
    turn: int = 0  # rounds started: which partition the next one reads first
    # partition -> the first offset not in the table (as of the last round); absent: unknown
    visible: dict[int, int] = field(default_factory=dict)
    # partition -> (last stable offset, monotonic time first seen) samples, oldest first
    stable: dict[int, deque] = field(default_factory=dict)
    rows: int = 0
    commits: int = 0
    conflicts: int = 0
    errors: int = 0
    last_error: str = ""
    last_lag_s: float = 0.0  # of the last commit: its oldest record's age when it became visible


@dataclass(frozen=True)
class IcebergSettings:
    commit_interval_s: float
    catalog_name: str
    catalog_type: str
    catalog_uri: str
    warehouse: str
    namespace: str
    partition_buffer: int
    broker_buffer: int
    open_files: int
    backoff_max_s: float
    snapshot_retention_ms: int

    @classmethod
    def of(cls, config, data_dir: Path) -> IcebergSettings:
        base = data_dir / "iceberg"
        uri = str(config["iceberg.catalog.uri"]).strip()
        warehouse = str(config["iceberg.catalog.warehouse"]).strip()
        kind = str(config["iceberg.catalog.type"])
        if not uri and kind == "sql":
            uri = f"sqlite:///{base / 'catalog.db'}"
        if not warehouse and kind == "sql":
            warehouse = (base / "warehouse").as_uri()
        elif warehouse and "://" not in warehouse:
            warehouse = Path(warehouse).absolute().as_uri()
        return cls(
            commit_interval_s=int(config["iceberg.commit.interval.ms"]) / 1000,
            catalog_name=str(config["iceberg.catalog.name"]),
            catalog_type=kind,
            catalog_uri=uri,
            warehouse=warehouse,
            namespace=str(config["iceberg.namespace"]),
            partition_buffer=int(config["iceberg.partition.buffer.max.bytes"]),
            broker_buffer=int(config["iceberg.buffer.max.bytes"]),
            open_files=int(config["iceberg.max.open.files"]),
            backoff_max_s=int(config["iceberg.retry.backoff.max.ms"]) / 1000,
            snapshot_retention_ms=int(config["iceberg.snapshot.retention.ms"]),
        )


@dataclass
class Work:
    """One round of one topic, for the worker thread: what to read."""

    topic: str
    topic_id: str
    mode: str
    upsert: bool  # iceberg.upsert on a compacted topic: the latest row per key
    logs: dict[int, Any]  # partition -> its Log
    ends: dict[int, int]  # partition -> its last stable offset now
    turn: int  # the round reads its partitions from the turn-th on (wrapping)
    schemas: dict[int, tuple[str, str, list[str]] | None]


@dataclass
class Outcome:
    visible: dict[int, int]  # partition -> next offset in the table after the round
    more: bool  # some partition stopped at its byte budget
    rows: int
    conflicts: int


class IcebergTranslator:
    """Writes this broker's led partitions of ``iceberg.mode`` topics into Iceberg tables."""

    def __init__(
        self,
        topics: TopicManager,
        settings: IcebergSettings,
        schemas: SchemaSource | None = None,
    ) -> None:
        self.topics = topics
        self.settings = settings
        self.schema_source = schemas
        self._unknown_since: dict[int, float] = {}
        self.states: dict[str, TopicState] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._slots = asyncio.Semaphore(settings.open_files)
        self.budget = BufferBudget(settings.broker_buffer)
        self._running_lock = threading.Lock()
        self.running = 0  # rounds in worker threads now
        self.peak_running = 0
        self.peak_partition_read = 0  # the most bytes one round read of one partition
        self._task: asyncio.Task | None = None
        self._rounds: set[asyncio.Task] = set()
        self._schemas: dict[int, tuple[str, str, list[str]] | None] = {}
        self._catalog: Any = None  # pyiceberg's, made in a worker thread on first use
        self._avro: Any = None
        self._expired: dict[str, float] = {}  # topic -> monotonic time of the last expiry

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop starting rounds; wait a while for the running ones (a round cut short by the
        stop commits nothing, and the next leader starts at the table's offsets)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._rounds:
            await asyncio.wait(list(self._rounds), timeout=timeout_s)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # the loop ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                self._tick(time.monotonic())
            except Exception:
                log.exception("iceberg translator tick failed")
            await asyncio.sleep(TICK_S)

    def _tables(self) -> list[tuple[Topic, str]]:
        found = []
        for topic in self.topics.all_topics():
            mode = str(topic.setting("iceberg.mode"))
            if mode in MODES and topic.led and topic.leading():
                found.append((topic, mode))
        return found

    def _tick(self, now: float) -> None:
        tables = self._tables()
        names = {t.name for t, _ in tables}
        for name in list(self.states):
            if name not in names and not self.states[name].running:
                del self.states[name]
        for topic, mode in tables:
            state = self.states.get(topic.name)
            if state is None or (state.topic_id != topic.topic_id and not state.running):
                # (a topic deleted and made again under its name starts from nothing)
                state = self.states[topic.name] = TopicState(topic_id=topic.topic_id)
            elif state.topic_id != topic.topic_id:
                continue
            leading = {p.index for p in topic.led}
            for index in [i for i in state.stable if i not in leading]:
                # led elsewhere now (its preferred replica is back, say): its new leader writes
                # it and counts its lag; what this broker saw of it is waited for no more
                del state.stable[index]
                state.visible.pop(index, None)
            ends = {}
            for p in topic.led:
                lso = p.last_stable_offset
                ends[p.index] = lso
                samples = state.stable.setdefault(p.index, deque(maxlen=SAMPLES))
                if not samples or samples[-1][0] < lso:
                    if len(samples) < SAMPLES:
                        samples.append((lso, now))
                    else:  # (full, while the table falls behind: the newest sample grows, so
                        # the oldest waiting record's time is kept and the lag never shrinks)
                        samples[-1] = (lso, samples[-1][1])
            if state.running or now < state.due:
                continue
            if all(state.visible.get(i, -1) >= end for i, end in ends.items()):
                continue  # nothing new (and every offset known)
            state.running = True
            state.turn += 1
            work = Work(
                topic.name,
                str(topic.topic_id),
                mode,
                bool(topic.setting("iceberg.upsert"))
                and "compact" in str(topic.setting("cleanup.policy")),
                {p.index: p.log for p in topic.led},
                ends,
                state.turn,
                dict(self._schemas),
            )
            task = asyncio.create_task(self._round(state, work))
            self._rounds.add(task)
            task.add_done_callback(self._rounds.discard)

    async def _round(self, state: TopicState, work: Work) -> None:
        interval = self.settings.commit_interval_s
        try:
            async with self._slots:
                loop = asyncio.get_running_loop()
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        self.settings.open_files, thread_name_prefix="iceberg"
                    )
                while True:
                    try:
                        outcome = await loop.run_in_executor(self._executor, self._commit, work)
                        break
                    except _NeedSchemas as e:
                        self._look_up(e.ids)
                        work.schemas = dict(self._schemas)
        except Exception as e:
            state.failures += 1
            state.errors += 1
            state.last_error = f"{type(e).__name__}: {e}"
            wait = min(interval / 10 * 2 ** min(state.failures, 30), self.settings.backoff_max_s)
            state.due = time.monotonic() + max(wait, interval / 10)
            log.warning(
                "iceberg: topic %s not committed (%s); next try in %.1f s",
                work.topic,
                state.last_error,
                wait,
            )
            return
        finally:
            state.running = False
        now = time.monotonic()
        state.failures = 0
        state.rows += outcome.rows
        state.conflicts += outcome.conflicts
        if outcome.rows or any(state.visible.get(p) != v for p, v in outcome.visible.items()):
            state.commits += 1
        lag = 0.0
        for p, start in state.visible.items():
            samples = state.stable.get(p)
            if samples and outcome.visible.get(p, start) > start:
                seen = _stable_since(samples, start)
                if seen is not None:
                    lag = max(lag, now - seen)
        state.last_lag_s = lag
        state.visible.update(outcome.visible)
        for p, samples in state.stable.items():
            v = state.visible.get(p, 0)
            while len(samples) > 1 and samples[1][0] <= v:
                samples.popleft()
        state.due = now if outcome.more else now + interval

    def _look_up(self, ids: set[int]) -> None:
        """Take the schemas of ``ids`` from the registry; ``SchemasNotReady`` while it is
        loading or an id it does not know is younger than ``UNKNOWN_SCHEMA_GRACE_S``."""
        source = self.schema_source
        now = time.monotonic()
        waiting = []
        for schema_id in ids:
            found = source.schema_texts(schema_id) if source is not None else None
            if found is None and source is not None:
                since = self._unknown_since.setdefault(schema_id, now)
                if not source.loaded or now - since < UNKNOWN_SCHEMA_GRACE_S:
                    waiting.append(schema_id)
                    continue
            self._unknown_since.pop(schema_id, None)
            self._schemas[schema_id] = found
        if waiting:
            raise SchemasNotReady(f"schema ids {sorted(waiting)} not in the registry (yet)")

    # the worker thread ------------------------------------------------------------------------

    def _commit(self, work: Work) -> Outcome:
        with self._running_lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            with self.budget.hold() as hold:
                return self._commit_holding(work, hold)
        finally:
            with self._running_lock:
                self.running -= 1

    def _read(self, work: Work, starts: dict[int, int], hold: Hold) -> tuple[list[Any], bool]:
        """Each partition's committed records from its start, within the bounds: (the
        partitions' columns, whether the budget stopped the round before some partition)."""
        from . import committed

        bound = self.settings.partition_buffer
        order = sorted(work.logs)
        order = order[work.turn % len(order) :] + order[: work.turn % len(order)]
        parts: list[committed.Columns] = []
        for p in order:
            start, end = starts.get(p, 0), work.ends[p]
            if start >= end:
                continue
            grant = hold.take(bound)
            if not grant:
                return parts, True  # (the others' turn comes in the next round)
            cols = committed.read_committed(work.logs[p], p, start, end, grant)
            hold.give_back(grant - cols.bytes_read)
            if cols.blocked_by:  # its next batch is larger than what the round could take
                if hold.held:
                    return parts, True  # (read first in a round of its own)
                hold.take_whole(cols.blocked_by)
                cols = committed.read_committed(work.logs[p], p, start, end, cols.blocked_by)
                hold.give_back(hold.held - cols.bytes_read)
                parts.append(cols)
                self.peak_partition_read = max(self.peak_partition_read, cols.bytes_read)
                return parts, True
            parts.append(cols)
            self.peak_partition_read = max(self.peak_partition_read, cols.bytes_read)
        return parts, False

    def _commit_holding(self, work: Work, hold: Hold) -> Outcome:
        from . import rows, tables

        if self._catalog is None:
            s = self.settings
            catalog = tables.open_catalog(
                s.catalog_name, s.catalog_type, s.catalog_uri, s.warehouse
            )
            tables.ensure_namespace(catalog, s.namespace)
            self._catalog = catalog
        if self._avro is None:
            self._avro = rows.AvroValues()
        identifier = f"{self.settings.namespace}.{work.topic}"
        schema = rows.KEY_VALUE_SCHEMA if work.mode == "key_value" else _prefix_schema()
        conflicts = 0
        while True:
            table = tables.load_or_create(self._catalog, identifier, schema, work.mode)
            starts = tables.next_offsets(table, work.topic_id)
            hold.release()  # (what an earlier try of this round held)
            parts, stopped = self._read(work, starts, hold)
            visible = {p: starts.get(p, 0) for p in work.logs}
            changed = [c for c in parts if c.next_offset > c.start]
            if not changed:
                return Outcome(visible, stopped, 0, conflicts)
            pieces = []
            for cols in changed:
                if not len(cols):
                    continue
                if work.mode == "key_value":
                    pieces.append(rows.key_value_rows(cols))
                else:
                    try:
                        pieces.append(rows.schema_id_rows(cols, work.schemas, self._avro))
                    except rows.UnknownSchemas as e:
                        raise _NeedSchemas(e.ids) from None
            import pyarrow as pa

            data = pa.concat_tables(pieces, promote_options="permissive") if pieces else None
            ranges = [(c.partition, c.start, c.next_offset) for c in changed]
            try:
                tables.commit(table, data, ranges, work.topic_id, work.upsert)
            except tables.Conflict:
                conflicts += 1
                if conflicts > CONFLICT_RETRIES:
                    raise
                # (leaders of one table that keep colliding draw apart)
                time.sleep(random.uniform(0, 0.02 * conflicts))
                continue
            self._maybe_expire(table, work.topic)
            for c in changed:
                visible[c.partition] = c.next_offset
            more = stopped or any(c.more for c in changed)
            return Outcome(visible, more, data.num_rows if data is not None else 0, conflicts)

    def _maybe_expire(self, table: Any, topic: str) -> None:
        """(A worker thread, after a commit.) Expire the table's old snapshots, at most every
        ``tables.EXPIRE_EVERY_S`` per topic; a failure is logged and waits for the next time."""
        from . import tables

        keep_ms = self.settings.snapshot_retention_ms
        now = time.monotonic()
        if (
            keep_ms < 0
            or now - self._expired.get(topic, -tables.EXPIRE_EVERY_S) < tables.EXPIRE_EVERY_S
        ):
            return
        self._expired[topic] = now
        try:
            tables.expire_snapshots(table, int(time.time() * 1000) - keep_ms)
        except Exception:
            log.warning("iceberg: expiring old snapshots of %s failed", topic, exc_info=True)

    # metrics ----------------------------------------------------------------------------------

    def lag_seconds(self, name: str, now: float | None = None) -> float:
        """How long the oldest acknowledged, committed record of the topic that is not a row
        yet has waited (0: every one is)."""
        state = self.states.get(name)
        if state is None:
            return 0.0
        now = time.monotonic() if now is None else now
        lag = 0.0
        for p, samples in state.stable.items():
            v = state.visible.get(p, 0)
            seen = _stable_since(samples, v)
            if seen is not None:
                lag = max(lag, now - seen)
        return lag


class _NeedSchemas(Exception):
    def __init__(self, ids: set[int]) -> None:
        super().__init__(f"schema ids {sorted(ids)}")
        self.ids = ids


def _stable_since(samples: deque, offset: int) -> float | None:
    """When the record at ``offset`` was first seen below the last stable offset (None: not
    yet)."""
    for lso, at in samples:
        if lso > offset:
            return at
    return None


def _prefix_schema():
    import pyarrow as pa

    from . import rows

    fields = [rows.META[0], pa.field("schema_id", pa.int32())]  # ("value" comes with rows)
    fields += [pa.field("value_raw", pa.binary()), *rows.META[1:]]
    return pa.schema(fields)
