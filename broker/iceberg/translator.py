"""The translator: the partition leaders' side of topics as tables. The broker's event loop
only decides what to read (each partition's last stable offset and a snapshot of its segment
files), reserves the bytes and keeps the metrics; reading the log files, making the rows,
writing Parquet and committing run in worker processes (workers.py, rounds.py), so produce and
the event loop never share the interpreter lock, a catalog or a disk with them.

Every ``iceberg.commit.interval.ms`` each topic whose ``iceberg.mode`` is not ``disabled`` and
that has new committed records in a partition this broker leads gets a round: the event loop
sends a worker the round (rounds.Round: the table settings, each partition's files as
``Log.files_view()`` saw them and its last stable offset, the schema texts, the bytes it may
hold); the worker loads the table (made on first use), takes each partition's next offset from
it (the table is the source of truth: a restart or a new leader starts there), reads the
committed records up to the last stable offset (committed.py), makes the rows (rows.py) and
commits them with the new offsets in one snapshot (tables.py), and answers with the offsets
the table now holds. A conflict (another leader committed to the same table) reads the round
again at once, in the worker; a failure (the catalog, the disk, a worker that died or gave no
answer in ``iceberg.round.timeout.ms``: it is killed) is counted and the topic waits,
doubling, before it tries again; records stay in the log meanwhile. Values naming schema ids
the round was not given come back as a request for them: the event loop looks them up in the
registry and sends the round again.

Bounds: a round reads at most ``iceberg.partition.buffer.max.bytes`` of a partition, whole
batches; all rounds at once hold at most ``iceberg.buffer.max.bytes``: before it is sent, a
round reserves its share in the broker's budget (budget.py: what is free, up to the partition
bound for each partition behind), and the worker reads within that share, committing what it
has read when it is used up; the share is given back when the answer comes.
``iceberg.max.open.files`` rounds run at once (one table, one Parquet file each), in as many
worker processes. A batch is never split: one larger than a round's share is answered as its
size, and the topic's next round reserves that whole (once nothing else holds bytes, if it is
larger than the whole budget) and reads it. A round starts at the partition after the one its
topic's last round started at, so every partition gets its turn when the budget is short; a
round that stopped at a bound is followed by the next at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from headrace.broker.log.topic import Topic
from headrace.broker.log.topics import TopicManager

from . import rounds
from .budget import BufferBudget, Hold
from .workers import WorkerPool

log = logging.getLogger("headrace")

MODES = ("key_value", "value_schema_id_prefix")
TICK_S = 0.1  # how often the last stable offsets are sampled (for the lag)
SAMPLES = 4096  # per partition: (last stable offset, when first seen)
RESERVE_WAIT_S = 0.02  # how often a round waiting for budget bytes looks again
EXPIRE_EVERY_S = 600.0  # how often a topic's round also expires its old snapshots
# what the workers' fork server imports once (pyarrow, pyiceberg): a new worker starts at once
PRELOAD = [f"{__package__}.{name}" for name in ("rounds", "committed", "rows", "tables")]

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
    whole: int = 0  # a batch the last round could not hold: the next one reserves this many


@dataclass(frozen=True)
class IcebergSettings:
    commit_interval_s: float
    table: rounds.TableSettings  # what a worker needs to read and commit
    broker_buffer: int
    open_files: int
    backoff_max_s: float
    snapshot_retention_ms: int
    round_timeout_s: float  # a worker that has not answered a round by then is killed
    worker_nice: int  # the workers' CPU priority below the broker's (os.nice)
    worker_sched_idle: bool  # the workers run under SCHED_IDLE (then their nice is moot)

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
            table=rounds.TableSettings(
                catalog_name=str(config["iceberg.catalog.name"]),
                catalog_type=kind,
                catalog_uri=uri,
                warehouse=warehouse,
                namespace=str(config["iceberg.namespace"]),
                partition_buffer=int(config["iceberg.partition.buffer.max.bytes"]),
            ),
            broker_buffer=int(config["iceberg.buffer.max.bytes"]),
            open_files=int(config["iceberg.max.open.files"]),
            backoff_max_s=int(config["iceberg.retry.backoff.max.ms"]) / 1000,
            snapshot_retention_ms=int(config["iceberg.snapshot.retention.ms"]),
            round_timeout_s=int(config["iceberg.round.timeout.ms"]) / 1000,
            worker_nice=int(config["iceberg.worker.nice"]),
            worker_sched_idle=bool(config["iceberg.worker.sched.idle"]),
        )


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
        self._pool: WorkerPool | None = None  # started by the first round
        self._slots = asyncio.Semaphore(settings.open_files)
        self.budget = BufferBudget(settings.broker_buffer)
        self._whole_waiting = 0  # rounds waiting to reserve one large batch whole
        self.running = 0  # rounds in worker processes now
        self.peak_running = 0
        self.peak_partition_read = 0  # the most bytes one round read of one partition
        self._task: asyncio.Task | None = None
        self._rounds: set[asyncio.Task] = set()
        self._schemas: dict[int, tuple[str, str, list[str]] | None] = {}
        self._expired: dict[str, float] = {}  # topic -> monotonic time of the last expiry

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop starting rounds; wait a while for the running ones, then end the workers (a
        round cut short by the stop commits nothing, or commits and its offsets are in the
        table: the next leader starts at the table's offsets either way)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._rounds:
            await asyncio.wait(list(self._rounds), timeout=timeout_s)
        if self._pool is not None:
            self._pool.close()

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
            work = rounds.Round(
                self.settings.table,
                topic.name,
                str(topic.topic_id),
                mode,
                bool(topic.setting("iceberg.upsert"))
                and "compact" in str(topic.setting("cleanup.policy")),
                # (after the last stable offsets: the files' published sizes cover them)
                {p.index: p.log.files_view() for p in topic.led},
                ends,
                state.turn,
                dict(self._schemas),
                0,  # (the bytes it may hold: reserved when it has a slot)
                self._expiry(topic.name, now),
            )
            task = asyncio.create_task(self._round(state, work))
            self._rounds.add(task)
            task.add_done_callback(self._rounds.discard)

    def _expiry(self, topic: str, now: float) -> int | None:
        """Whether this round of ``topic`` also expires old snapshots: before which time (epoch
        ms), at most every ``EXPIRE_EVERY_S`` per topic; None: not this time."""
        keep_ms = self.settings.snapshot_retention_ms
        if keep_ms < 0 or now - self._expired.get(topic, -EXPIRE_EVERY_S) < EXPIRE_EVERY_S:
            return None
        self._expired[topic] = now
        return int(time.time() * 1000) - keep_ms

    async def _round(self, state: TopicState, work: rounds.Round) -> None:
        interval = self.settings.commit_interval_s
        hold = self.budget.hold()
        try:
            async with self._slots:
                if self._pool is None:
                    s = self.settings
                    self._pool = WorkerPool(
                        s.open_files,
                        s.worker_nice,
                        s.round_timeout_s,
                        PRELOAD,
                        s.worker_sched_idle,
                    )
                self.running += 1
                self.peak_running = max(self.peak_running, self.running)
                try:
                    work.grant = await self._reserve(hold, state, work)
                    while True:
                        result = await self._pool.run(rounds.run, work)
                        if not result.need_schemas:
                            break
                        self._look_up(result.need_schemas)
                        work.schemas = dict(self._schemas)
                finally:
                    self.running -= 1
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
            hold.release()
            state.running = False
        if result.warning:
            log.warning("iceberg: topic %s: %s", work.topic, result.warning)
        self.peak_partition_read = max(self.peak_partition_read, result.partition_read_peak)
        state.whole = result.blocked_by
        now = time.monotonic()
        state.failures = 0
        state.rows += result.rows
        state.conflicts += result.conflicts
        if result.rows or any(state.visible.get(p) != v for p, v in result.visible.items()):
            state.commits += 1
        lag = 0.0
        for p, start in state.visible.items():
            samples = state.stable.get(p)
            if samples and result.visible.get(p, start) > start:
                seen = _stable_since(samples, start)
                if seen is not None:
                    lag = max(lag, now - seen)
        state.last_lag_s = lag
        state.visible.update(result.visible)
        for p, samples in state.stable.items():
            v = state.visible.get(p, 0)
            while len(samples) > 1 and samples[1][0] <= v:
                samples.popleft()
        state.due = now if result.more else now + interval

    async def _reserve(self, hold: Hold, state: TopicState, work: rounds.Round) -> int:
        """The round's bytes, taken from the broker's budget (waiting while none are free):
        the partition bound for each partition behind, or what is free when less; a batch
        the last round could not hold (``state.whole``), whole."""
        if state.whole:
            self._whole_waiting += 1
            try:
                while not hold.try_take_whole(state.whole):
                    await asyncio.sleep(RESERVE_WAIT_S)
            finally:
                self._whole_waiting -= 1
            return state.whole
        behind = sum(1 for p, end in work.ends.items() if state.visible.get(p, -1) < end)
        want = self.settings.table.partition_buffer * max(behind, 1)
        while True:
            got = 0 if self._whole_waiting else hold.try_take(want)
            if got:
                return got
            await asyncio.sleep(RESERVE_WAIT_S)

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


def _stable_since(samples: deque, offset: int) -> float | None:
    """When the record at ``offset`` was first seen below the last stable offset (None: not
    yet)."""
    for lso, at in samples:
        if lso > offset:
            return at
    return None
