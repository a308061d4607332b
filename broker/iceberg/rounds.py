"""One round of one topic, as a translator worker process runs it (workers.py starts the
process; translator.py decides the round on the broker's event loop and sends it here).

A ``Round`` is all the worker needs, and all of it plain values: the table settings, each
partition's files as of the round's start (``storage.LogFilesView``: paths, published sizes)
and last stable offset, the schema texts the event loop took from the registry, and the bytes
the round may hold (``grant``, reserved in the broker's budget). ``run`` loads the table (the
source of truth for where each partition starts), reads the committed records (committed.py)
within the grant and ``iceberg.partition.buffer.max.bytes`` per partition, makes the rows
(rows.py) and commits them with the new offsets in one snapshot (tables.py). It answers with
a ``Result``: the offsets the table now holds, rows, conflicts, the most bytes read of one
partition; or the schema ids it needs (the event loop looks them up and sends the round
again), or the size of a batch larger than the grant (the event loop reserves that much and
starts the next round at once). An exception is the round's failure (workers.py sends it
back as text).

The catalog and the values' decoders (per schema id) are kept per process, across rounds.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from .budget import BufferBudget, Hold

log = logging.getLogger("headrace")

CONFLICT_RETRIES = 20


@dataclass(frozen=True, slots=True)
class TableSettings:
    catalog_name: str
    catalog_type: str
    catalog_uri: str
    warehouse: str
    namespace: str
    partition_buffer: int


@dataclass(slots=True)
class Round:
    """One round of one topic, for a worker process: what to read and where to commit."""

    settings: TableSettings
    topic: str
    topic_id: str
    mode: str
    upsert: bool  # iceberg.upsert on a compacted topic: the latest row per key
    logs: dict[int, Any]  # partition -> its storage.LogFilesView
    ends: dict[int, int]  # partition -> its last stable offset at the round's start
    turn: int  # the round reads its partitions from the turn-th on (wrapping)
    schemas: dict[int, tuple[str, str, list[str]] | None]
    grant: int  # record bytes the round may hold (reserved in the broker's budget)
    expire_before_ms: int | None = None  # after the commit, expire older snapshots


@dataclass(slots=True)
class Result:
    visible: dict[int, int] = field(default_factory=dict)  # partition -> next offset in table
    more: bool = False  # some partition stopped at a bound
    rows: int = 0
    conflicts: int = 0
    partition_read_peak: int = 0  # the most bytes read of one partition
    need_schemas: set[int] = field(default_factory=set)  # send the round again with these
    blocked_by: int = 0  # a batch of this size is larger than the grant: reserve it whole
    warning: str = ""  # (expiry failed: logged by the broker)


_catalog: Any = None  # per process: pyiceberg's catalog, made by the first round
_values: Any = None


def run(work: Round) -> Result:
    """The round: read, make the rows, commit (see the module's docstring)."""
    global _catalog, _values
    from . import rows, tables

    s = work.settings
    if _catalog is None:
        catalog = tables.open_catalog(s.catalog_name, s.catalog_type, s.catalog_uri, s.warehouse)
        tables.ensure_namespace(catalog, s.namespace)
        _catalog = catalog
    if _values is None:
        _values = rows.SchemaValues()
    identifier = f"{s.namespace}.{work.topic}"
    schema = rows.KEY_VALUE_SCHEMA if work.mode == "key_value" else _prefix_schema()
    budget = BufferBudget(work.grant)  # (this round's share of the broker's)
    out = Result()
    with budget.hold() as hold:
        while True:
            table = tables.load_or_create(_catalog, identifier, schema, work.mode)
            starts = tables.next_offsets(table, work.topic_id)
            hold.release()  # (what an earlier try of this round held)
            parts, stopped = _read(work, starts, hold, out)
            out.visible = {p: starts.get(p, 0) for p in work.logs}
            changed = [c for c in parts if c.next_offset > c.start]
            if not changed:
                out.more = stopped
                return out
            pieces = []
            for cols in changed:
                if not len(cols):
                    continue
                if work.mode == "key_value":
                    pieces.append(rows.key_value_rows(cols))
                else:
                    try:
                        pieces.append(rows.schema_id_rows(cols, work.schemas, _values))
                    except rows.UnknownSchemas as e:
                        out.need_schemas = set(e.ids)
                        return out
            import pyarrow as pa

            data = pa.concat_tables(pieces, promote_options="permissive") if pieces else None
            ranges = [(c.partition, c.start, c.next_offset) for c in changed]
            try:
                tables.commit(table, data, ranges, work.topic_id, work.upsert)
            except tables.Conflict:
                out.conflicts += 1
                if out.conflicts > CONFLICT_RETRIES:
                    raise
                # (leaders of one table that keep colliding draw apart)
                time.sleep(random.uniform(0, 0.02 * out.conflicts))
                continue
            if work.expire_before_ms is not None:
                try:
                    tables.expire_snapshots(table, work.expire_before_ms)
                except Exception as e:
                    out.warning = f"expiring old snapshots failed: {type(e).__name__}: {e}"
            for c in changed:
                out.visible[c.partition] = c.next_offset
            out.more = stopped or any(c.more for c in changed)
            out.rows = data.num_rows if data is not None else 0
            return out


def _read(work: Round, starts: dict[int, int], hold: Hold, out: Result) -> tuple[list, bool]:
    """Each partition's committed records from its start, within the bounds: (the
    partitions' columns, whether a bound stopped the round before some partition)."""
    from . import committed

    bound = work.settings.partition_buffer
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
            if cols.blocked_by > hold.budget.capacity:
                out.blocked_by = cols.blocked_by  # (the broker reserves it whole, then again)
                return parts, True
            hold.take_whole(cols.blocked_by)
            cols = committed.read_committed(work.logs[p], p, start, end, cols.blocked_by)
            hold.give_back(hold.held - cols.bytes_read)
            parts.append(cols)
            out.partition_read_peak = max(out.partition_read_peak, cols.bytes_read)
            return parts, True
        parts.append(cols)
        out.partition_read_peak = max(out.partition_read_peak, cols.bytes_read)
    return parts, False


def _prefix_schema():
    import pyarrow as pa

    from . import rows

    fields = [rows.META[0], pa.field("schema_id", pa.int32())]  # ("value" comes with rows)
    fields += [pa.field("value_raw", pa.binary()), *rows.META[1:]]
    return pa.schema(fields)
