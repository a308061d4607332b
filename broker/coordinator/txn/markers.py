"""Transaction markers written on this broker: the leader's side of closing a transaction.

For each marker (producer id and epoch, commit or abort, coordinator epoch, partitions) a
control batch is appended to each partition led here, then they are flushed together and, in
a cluster, each waits for its ISR to have the marker (Kafka appends markers with acks=-1: a
marker lost in a failover would leave the transaction open on that partition for ever); each
partition gets its code: NOT_LEADER_OR_FOLLOWER for a partition whose leader is another broker,
UNKNOWN_TOPIC_OR_PARTITION for one that does not exist, INVALID_PRODUCER_EPOCH for a marker
older than the partition's producer epoch.

A partition of ``__consumer_offsets`` holds transactional offset commits: before its marker,
the group coordinator makes the producer's pending offsets of that partition's groups the
groups' committed offsets (commit) or drops them (abort), see ``GroupCoordinator.complete_txn``.

WriteTxnMarkers (``apis.write_txn_markers``) calls ``write_here`` for the markers another
broker's coordinator sends; the transaction coordinator calls it itself for the partitions led
by its own broker, so a single broker never sends that request to itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.protocol import ErrorCode
from headrace.storage import StorageError

log = logging.getLogger("headrace.transactions")

# how long a marker waits for its partition's ISR (within the coordinator's request timeout,
# transaction_coordinator.MARKER_TIMEOUT_S); past it REQUEST_TIMED_OUT and the coordinator
# tries again (a second marker changes nothing)
REPLICATION_TIMEOUT_S = 4.0

E = ErrorCode
Key = tuple[str, int]


async def write_here(
    topics,
    groups,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    keys: Iterable[Key],
    is_leader: Callable[[str, int], bool] | None = None,
) -> dict[Key, int]:
    """Append the marker to each partition of ``keys`` held here and flush them; an error
    code per partition. ``is_leader(topic, partition)``: is this broker its leader (default:
    every partition it has)."""
    codes: dict[Key, int] = {}
    appended = []
    ends: dict[Key, int] = {}
    for key in keys:
        name, index = key
        partition = topics.partition(name, index)
        if is_leader is not None and not is_leader(name, index):
            codes[key] = E.NOT_LEADER_OR_FOLLOWER
            continue
        if partition is None:
            codes[key] = E.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if name == OFFSETS_TOPIC and groups is not None:
            error = await groups.complete_txn(producer_id, index, commit)
            if error:
                codes[key] = error
                continue
        try:
            error = partition.append_marker(producer_id, epoch, commit, coordinator_epoch)
        except StorageError:
            log.exception("marker of producer %d in %s-%d", producer_id, name, index)
            error = E.KAFKA_STORAGE_ERROR
        codes[key] = error
        if not error:
            appended.append(partition)
            ends[key] = partition.log.log_end_offset
    if appended:
        try:
            await topics.flush(appended)
        except StorageError:
            log.exception("flushing the markers of producer %d", producer_id)
            for p in appended:
                codes[(p.topic.name, p.index)] = E.KAFKA_STORAGE_ERROR
            return codes
        replicated = await asyncio.gather(
            *(p.replicated(ends[(p.topic.name, p.index)], REPLICATION_TIMEOUT_S) for p in appended)
        )
        for p, code in zip(appended, replicated, strict=True):
            codes[(p.topic.name, p.index)] = code
    return codes
