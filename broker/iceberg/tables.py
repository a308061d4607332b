"""A topic's Iceberg table: the catalog, the table (made on first use, its schema evolved as
the rows' schema grows), and the commit that appends rows and records the offsets they reach,
in one snapshot. Runs in the translator's worker processes; imported only when a topic is
written as a table.

The offsets are the table's own: each commit sets the table property
``headrace.next-offset.<partition>`` (the first offset not yet in the table) for every partition
it carries, and writes ``headrace.offsets`` (``partition:start-end`` pairs) into the snapshot's
summary. A writer reads where to start from the table it commits to, so a crash after a commit
and before anything else was noted, a restart or a new leader starts exactly there. A commit is
optimistic: it lands only if the table is still what the writer read (the SQL catalog compares
the metadata location; a REST catalog checks the branch's snapshot id), else the round is read
again from the table's new offsets. pyiceberg's own retry of a failed commit (which would
re-apply the same rows to a table that moved on) is off for these tables
(``commit.retry.num-retries`` 0).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table
from pyiceberg.table.update import AssertRefSnapshotId

log = logging.getLogger("headrace")

NEXT_OFFSET = "headrace.next-offset."
OFFSETS_SUMMARY = "headrace.offsets"
TOPIC_ID = "headrace.topic-id"  # the topic whose offsets the table's properties hold
NO_RETRY = {"commit.retry.num-retries": "0"}
# a table committed to every few seconds: its old metadata files go (the newest 100 stay)
METADATA_KEPT = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


class Conflict(Exception):
    """Another writer committed to the table first: read the round again from its offsets."""


def open_catalog(name: str, kind: str, uri: str, warehouse: str) -> Catalog:
    """pyiceberg's SQL catalog (``uri`` a SQLAlchemy URL) or REST catalog (``uri`` its URL)."""
    props: dict[str, str] = {"uri": uri}
    if warehouse:
        props["warehouse"] = warehouse
    if kind == "sql":
        props["type"] = "sql"
        if uri.startswith("sqlite:///"):  # (the database's folder must be there)
            Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    else:
        props["type"] = "rest"
    return load_catalog(name, **props)


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """The namespace, made when there is none. Brokers sharing a catalog make it at once: the
    SQL catalog looks, then inserts, so the one that loses the race gets the database's
    unique-key error rather than NamespaceAlreadyExistsError; the namespace is there then."""
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise


def load_or_create(catalog: Catalog, identifier: str, schema: pa.Schema, mode: str) -> Table:
    """The table, made with ``schema`` when there is none (two brokers making it at once: the
    second loads the first's)."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            table = catalog.create_table(
                identifier,
                schema=schema,
                properties={
                    "format-version": "2",
                    "headrace.mode": mode,
                    **NO_RETRY,
                    **METADATA_KEPT,
                },
            )
        except TableAlreadyExistsError:
            table = catalog.load_table(identifier)
    if table.properties.get("commit.retry.num-retries") != "0":
        with table.transaction() as tx:
            tx.set_properties(NO_RETRY)
        table = catalog.load_table(identifier)
    return table


def next_offsets(table: Table, topic_id: str) -> dict[int, int]:
    """partition -> the first offset not in the table yet (absent: none of it is). Offsets
    recorded for another topic of the same name (deleted, then made again) count for nothing:
    the new topic's records are added from its start (the old rows stay)."""
    if table.properties.get(TOPIC_ID, topic_id) != topic_id:
        return {}
    found = {}
    for name, value in table.properties.items():
        if name.startswith(NEXT_OFFSET):
            found[int(name[len(NEXT_OFFSET) :])] = int(value)
    return found


def commit(
    table: Table,
    rows: pa.Table | None,
    ranges: Iterable[tuple[int, int, int]],
    topic_id: str,
    upsert: bool = False,
) -> Table:
    """Append ``rows`` (None or empty: none) and set the next offset of each ``(partition,
    start, end)`` to ``end``, in one snapshot when there are rows. Raises ``Conflict`` when the
    table changed since it was loaded; the schema grows first when ``rows`` bring new columns
    (a separate commit: a newer schema with no rows is harmless). ``upsert``: the rows replace
    those of their keys instead (``upsert_by_key``), in the same transaction."""
    ranges = list(ranges)
    props = {f"{NEXT_OFFSET}{p}": str(end) for p, _, end in ranges}
    props[TOPIC_ID] = topic_id
    stale: list[str] = []  # another topic's offsets (of the same name): gone with this commit
    if table.properties.get(TOPIC_ID, topic_id) != topic_id:
        stale = [k for k in table.properties if k.startswith(NEXT_OFFSET) and k not in props]
    summary = ",".join(f"{p}:{start}-{end}" for p, start, end in ranges)
    snapshot = table.current_snapshot()
    try:
        if rows is not None and rows.num_rows:
            if _new_columns(table, rows.schema):
                with table.update_schema() as update:
                    update.union_by_name(rows.schema)
            with table.transaction() as tx:
                _assert_branch(tx, snapshot.snapshot_id if snapshot else None)
                conformed = _conform(rows, tx.table_metadata.schema().as_arrow())
                if upsert:
                    upsert_by_key(tx, conformed, {OFFSETS_SUMMARY: summary})
                else:
                    tx.append(conformed, {OFFSETS_SUMMARY: summary})
                tx.set_properties(props)
                if stale:
                    tx.remove_properties(*stale)
        else:
            with table.transaction() as tx:
                _assert_branch(tx, snapshot.snapshot_id if snapshot else None)
                tx.set_properties(props)
                if stale:
                    tx.remove_properties(*stale)
    except CommitFailedException as e:
        raise Conflict(str(e)) from e
    return table


def _assert_branch(tx: Any, snapshot_id: int | None) -> None:
    """The commit lands only if ``main`` is still at ``snapshot_id`` (a REST catalog checks it;
    the SQL catalog also compares the whole metadata file). pyiceberg adds this requirement to
    appends itself; a commit of properties alone needs it too."""
    requirement = AssertRefSnapshotId(snapshot_id=snapshot_id, ref="main")  # type: ignore[call-arg]
    tx._apply((), (requirement,))


def _new_columns(table: Table, schema: pa.Schema) -> bool:
    have = table.schema().as_arrow()
    try:
        return pa.unify_schemas([have, schema], promote_options="permissive") != have
    except (pa.ArrowException, TypeError):
        return True


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with the table's columns, in its order and types (nulls where absent; a struct
    gains the fields later schema versions added)."""
    arrays = []
    for field in schema:
        if field.name in rows.column_names:
            column = rows.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def expire_snapshots(table: Table, older_than_ms: int) -> int:
    """Expire the table's snapshots older than ``older_than_ms`` (epoch milliseconds; the
    current one never); how many. The offsets are table properties, so no snapshot is needed
    to resume; a commit another writer beat is left for the next time."""
    from datetime import UTC, datetime

    old = [s for s in table.snapshots() if s.timestamp_ms < older_than_ms]
    if not old:
        return 0
    try:
        expire = table.maintenance.expire_snapshots()
        expire.older_than(datetime.fromtimestamp(older_than_ms / 1000, UTC)).commit()
    except CommitFailedException:
        return 0
    return len(old)


def upsert_by_key(tx: Any, rows: pa.Table, summary: dict[str, str]) -> None:
    """A compacted topic's rows as its latest record per key: of the rows with one key the
    latest (by timestamp, then offset) wins; it replaces the table's row of that key, or, a
    tombstone (no value), deletes it."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import In

    rows = rows.filter(pc.is_valid(rows.column("key")))  # (a compacted topic has keys)
    if not rows.num_rows:
        return
    indexed = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    indexed = indexed.sort_by([("timestamp", "ascending"), ("offset", "ascending")])
    indexed = indexed.append_column("__order", pa.array(range(rows.num_rows), pa.int64()))
    last = indexed.group_by("key").aggregate([("__order", "max")]).column("__order_max")
    latest = indexed.take(last).drop_columns(["__row", "__order"])
    value_columns = [c for c in ("value", "value_raw") if c in latest.column_names]
    present = pc.is_valid(latest.column(value_columns[0]))
    for name in value_columns[1:]:
        present = pc.or_(present, pc.is_valid(latest.column(name)))
    gone = latest.filter(pc.invert(present)).column("key").to_pylist()
    live = latest.filter(present)
    if gone:
        tx.delete(In("key", gone), snapshot_properties=summary)  # type: ignore[call-arg, arg-type]
    if live.num_rows:
        tx.upsert(live, join_cols=["key"], snapshot_properties=summary)
