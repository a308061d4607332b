"""WriteTxnMarkers (key 27), versions 1-2: a transaction coordinator asks the leader of some
partitions to close a transaction there (version 0 was removed by Kafka 4.0; the schemas the
codec reads start at 1).

For each marker (producer id and epoch, commit or abort, coordinator epoch, partitions) a
control batch is appended to each partition led here (``write_here``), then they are flushed
together and, in a cluster, each waits for its ISR to have the marker (Kafka appends markers
with acks=-1: a marker lost in a failover would leave the transaction open on that partition
for ever); each partition gets its code: NOT_LEADER_OR_FOLLOWER for a partition whose
leader is another broker, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist,
INVALID_PRODUCER_EPOCH for a marker older than the partition's producer epoch.

A partition of ``__consumer_offsets`` holds transactional offset commits: before its marker,
the group coordinator makes the producer's pending offsets of that partition's groups the
groups' committed offsets (commit) or drops them (abort), see ``GroupCoordinator.complete_txn``.

The transaction coordinator calls ``write_here`` itself for the partitions led by its own
broker, so a single broker never sends this request to itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.storage import StorageError

from .authorizer import Operation
from .group_offsets import OFFSETS_TOPIC

API_KEY = ApiKey.WRITE_TXN_MARKERS
MIN_VERSION, MAX_VERSION = 1, 2

log = logging.getLogger("headrace.transactions")

# how long a marker waits for its partition's ISR (within the coordinator's request timeout,
# transaction_coordinator.MARKER_TIMEOUT_S); past it REQUEST_TIMED_OUT and the coordinator
# tries again (a second marker changes nothing)
REPLICATION_TIMEOUT_S = 4.0

E = ErrorCode
R = messages.WriteTxnMarkersResponse
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


def handle(broker, header, request):
    # brokers only (Kafka's CLUSTER_ACTION on the cluster)
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    return _write(broker, request, allowed)


async def _write(broker, request, allowed: bool):
    txns = broker.transactions
    results = []
    for marker in request.markers:
        keys = [(t.name, index) for t in marker.topics for index in t.partition_indexes]
        codes: dict[tuple[str, int], int]
        if not allowed:
            codes = dict.fromkeys(keys, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            codes = await write_here(
                broker.topics,
                broker.groups,
                marker.producer_id,
                marker.producer_epoch,
                marker.transaction_result,
                marker.coordinator_epoch,
                keys,
                txns.is_leader,
            )
        results.append(
            R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=index, error_code=codes[(t.name, index)]
                            )
                            for index in t.partition_indexes
                        ],
                    )
                    for t in marker.topics
                ],
            )
        )
    return R(markers=results)
