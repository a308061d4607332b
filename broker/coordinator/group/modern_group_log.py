"""Consumer, share and streams groups in ``__consumer_offsets``: writing what changed.

How this works
--------------
Each group keeps what its records in the log say (``ModernGroup.stored``: part -> key ->
value, a part being None for the group's own records and a member id for a member's, see
``modern_records``). After a change the group's coordinator builds the records of the parts
that may have changed (``complete``: every part, when members may have come or gone) and
``append`` writes, as one record batch (a large group's as several, ``BATCH_BYTES`` each),
the records whose value differs from the stored one and a tombstone for each stored key
that is no longer there; nothing when nothing changed, as a steady member's heartbeat. The
append is synchronous (on the event loop), so a group's batches reach the log in the order
its changes were made; ``durable`` then waits for the flush and, in a cluster, for the
partition's ISR (``OffsetStore.flush``, the path committed offsets take), as Kafka answers
a heartbeat only once its records are committed.

``stored`` is updated when the batch is appended: a write that fails leaves it as it was, so
the next change writes those records again. A group's ``stored`` is bounded by its members
(each has at most three records), and goes with the group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from headrace.broker.log.topic import NotHere
from headrace.protocol import ErrorCode
from headrace.storage import StorageError

from .group_offsets import OFFSETS_TOPIC, partition_for
from .modern_records import Stored

log = logging.getLogger("headrace.groups")

E = ErrorCode


@dataclass(frozen=True, slots=True)
class Write:
    error: int
    partition: Any = None  # None: nothing written
    end: int = 0


NOTHING = Write(E.NONE)
BATCH_BYTES = 256 * 1024  # a large group's change is appended as batches of about this size


def _chunks(changes: list[tuple[bytes, bytes | None]]):
    """``changes`` in runs of about ``BATCH_BYTES`` (each one record batch, well under
    ``message.max.bytes``)."""
    run: list[tuple[bytes, bytes | None]] = []
    size = 0
    for k, v in changes:
        n = len(k) + (len(v) if v is not None else 0) + 32
        if run and size + n > BATCH_BYTES:
            yield run
            run, size = [], 0
        run.append((k, v))
        size += n
    if run:
        yield run


class ModernGroupLog:
    def __init__(self, store) -> None:
        self.store = store  # the OffsetStore: same partitions, same write path

    async def ready(self) -> int:
        """Make ``__consumer_offsets`` if it is not there yet (before a change, whose append
        must not wait); an error code."""
        if self.store.topics.get(OFFSETS_TOPIC) is not None:
            return E.NONE
        try:
            await self.store.topic()
        except StorageError:
            log.exception("cannot create %s", OFFSETS_TOPIC)
            return E.COORDINATOR_NOT_AVAILABLE
        return E.NONE

    def append(self, group, current: Stored, complete: bool) -> Write:
        """Append what differs between ``current`` (parts -> key -> value) and
        ``group.stored``; with ``complete``, stored parts not in ``current`` get tombstones."""
        stored = group.stored
        changes: list[tuple[bytes, bytes | None]] = []
        for part, records in current.items():
            old = stored.get(part, {})
            changes += [(k, v) for k, v in records.items() if old.get(k) != v]
            changes += [(k, None) for k in old if k not in records]
        gone = [p for p in stored if p not in current] if complete else []
        for part in gone:
            changes += [(k, None) for k in stored[part]]
        if not changes:
            return NOTHING
        topic = self.store.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return Write(E.COORDINATOR_NOT_AVAILABLE)
        try:
            partition = topic.held_partition(partition_for(group.group_id, topic.count))
        except NotHere:
            return Write(E.NOT_COORDINATOR)
        error = E.NONE
        for chunk in _chunks(changes):
            error = self.store.append(partition, chunk)
            if error:
                break
        if error:
            log.warning(
                "%s group %s: writing its records failed (error %d)",
                group.group_type,
                group.group_id,
                error,
            )
            return Write(error)
        for part, records in current.items():
            if records:
                stored[part] = records
            else:
                stored.pop(part, None)
        for part in gone:
            del stored[part]
        return Write(E.NONE, partition, partition.log.log_end_offset)

    def delete(self, group) -> Write:
        """Tombstones for every record of ``group`` (it is deleted)."""
        return self.append(group, {}, complete=True)

    async def durable(self, write: Write) -> int:
        """Wait for ``write`` to be flushed and replicated; an error code."""
        if write.error or write.partition is None:
            return write.error
        return await self.store.flush(write.partition, write.end)
