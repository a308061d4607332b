"""Transaction markers written on this broker: the leader's side of closing a transaction.

For each marker (producer id and epoch, commit or abort, coordinator epoch, partitions) a
control batch is appended to each partition led here, then those whose ``flush.messages`` is
due are flushed together (as any append: Kafka's markers follow their partition's flush
settings too) and, in a cluster, each waits for its ISR to have the marker (Kafka appends
markers with acks=-1: a marker lost in a failover would leave the transaction open on that
partition for ever); each partition gets its code: NOT_LEADER_OR_FOLLOWER for a partition
whose leader is another broker, or that this broker has been told it leads but does not serve
as the leader yet (the coordinator tries again), UNKNOWN_TOPIC_OR_PARTITION for one that does
not exist (the coordinator takes it as deleted),
INVALID_PRODUCER_EPOCH for a marker older than the partition's producer epoch.

A partition of ``__consumer_offsets`` holds transactional offset commits: before its marker,
the group coordinator makes the producer's pending offsets of that partition's groups the
groups' committed offsets (commit) or drops them (abort), see ``GroupCoordinator.complete_txn``.

WriteTxnMarkers (``apis.write_txn_markers``) calls ``write_here`` for the markers another
broker's coordinator sends; the transaction coordinator calls it itself for the partitions led
by its own broker, so a single broker never sends that request to itself.

The coordinator's side (``TransactionMarkers.write``): the markers of a decided transaction on
each of its partitions not marked yet, ``write_here`` for those led here and one
WriteTxnMarkers request per other leader, all at once, tried again (the leaders looked up
again) up to a number of attempts; the partitions marked are remembered, so that a later try
(every ``MARKER_RETRY_S``) sends only the markers still missing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Iterable

from headrace.broker.client.broker_client import NetworkError
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.storage import StorageError

from .transaction_log import TransactionMetadata

log = logging.getLogger("headrace.transactions")

# how long a marker waits for its partition's ISR (within the coordinator's request timeout,
# MARKER_TIMEOUT_S); past it REQUEST_TIMED_OUT and the coordinator
# tries again (a second marker changes nothing)
REPLICATION_TIMEOUT_S = 4.0

E = ErrorCode
COORDINATOR_EPOCH = 0  # the coordinator of a transactional id never moves yet
MARKER_VERSION = 1  # WriteTxnMarkers version sent to other brokers
MARKER_TIMEOUT_S = 5.0  # for one WriteTxnMarkers request
MARKER_ATTEMPTS = 3  # per completion asked for by a client, before it is left to the retries
MARKER_BACKOFF_S = 0.1  # doubled after each attempt
# then the coordinator tries the markers still missing again this often, until written
MARKER_RETRY_S = 0.5
# marker codes after which a partition needs no more tries (INVALID_PRODUCER_EPOCH: a newer
# epoch of the producer has been seen there, which already closed this transaction)
MARKER_DONE = {E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PRODUCER_EPOCH}
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
    """Append the marker to each partition of ``keys`` held here, flushed where the
    partition's ``flush.messages`` is due (as any append) and, in a cluster, in its ISR; an
    error code per partition. ``is_leader(topic, partition)``: is this broker its leader (default:
    every partition it has)."""
    codes: dict[Key, int] = {}
    appended = []
    ends: dict[Key, int] = {}
    for key in keys:
        name, index = key
        if is_leader is not None and not is_leader(name, index):
            codes[key] = E.NOT_LEADER_OR_FOLLOWER
            continue
        topic = topics.get(name)
        if topic is None:
            codes[key] = E.UNKNOWN_TOPIC_OR_PARTITION
            continue
        partition = topic.partition(index)
        if partition is None:  # (held here but not led yet: NOT_LEADER_OR_FOLLOWER)
            codes[key] = topic.partition_error(index)
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
    due = [p for p in appended if p.flush_due]
    if due:
        try:
            await topics.flush(due)
        except StorageError:
            log.exception("flushing the markers of producer %d", producer_id)
            for p in due:
                codes[(p.topic.name, p.index)] = E.KAFKA_STORAGE_ERROR
            appended = [p for p in appended if p not in due]
    replicated = await asyncio.gather(
        *(p.replicated(ends[(p.topic.name, p.index)], REPLICATION_TIMEOUT_S) for p in appended)
    )
    for p, code in zip(appended, replicated, strict=True):
        codes[(p.topic.name, p.index)] = code
    return codes


def crash_point(name: str) -> None:
    """Fault injection for crash tests (see transaction_coordinator.py's docstring)."""
    if os.environ.get("HEADRACE_TEST_CRASH") == name:
        log.warning("HEADRACE_TEST_CRASH=%s: killing the broker", name)
        os.kill(os.getpid(), signal.SIGKILL)


class TransactionMarkers:
    """The transaction coordinator's markers (see the module docstring)."""

    def __init__(
        self,
        topics,
        groups,
        node_id: int,
        leader_of: Callable[[str, int], int | None],
        broker_client=None,
    ) -> None:
        self.topics = topics
        self.groups = groups
        self.node_id = node_id
        self.leader_of = leader_of
        self.broker_client = broker_client
        # (transactional id, producer id, epoch) of a decided transaction -> its partitions
        # whose marker is written (while some others' are not)
        self._marked: dict[tuple[str, int, int], set[Key]] = {}

    def forget(self, transactional_ids) -> None:
        """The coordinator no longer has these ids (their partition moved away)."""
        ids = set(transactional_ids)
        for key in [k for k in self._marked if k[0] in ids]:
            del self._marked[key]

    async def write(self, txn: TransactionMetadata, commit: bool, attempts: int) -> int:
        """The markers of ``txn`` on each of its partitions not marked yet, written and
        flushed: here for the partitions led here, by WriteTxnMarkers to the leader of the
        others (up to ``attempts`` times, the leader looked up again each time).
        Returns NONE once every partition has its marker, else COORDINATOR_NOT_AVAILABLE."""
        ident = (txn.transactional_id, txn.producer_id, txn.producer_epoch)
        marked = self._marked.setdefault(ident, set())
        backoff = MARKER_BACKOFF_S
        for attempt in range(attempts):
            todo = sorted(txn.partitions - marked)
            if not todo:
                break
            by_node: dict[int, list[Key]] = {}
            for key in todo:
                leader = self.leader_of(*key)
                if leader is None:
                    marked.add(key)  # deleted meanwhile
                else:
                    by_node.setdefault(leader, []).append(key)
            sends = [
                self._here(txn, commit, keys)
                if node == self.node_id
                else self._to(node, txn, commit, keys)
                for node, keys in by_node.items()
            ]
            retry = False
            for codes in await asyncio.gather(*sends):
                for (topic, index), code in codes.items():
                    if code in MARKER_DONE:
                        marked.add((topic, index))
                        if code != E.NONE and code != E.UNKNOWN_TOPIC_OR_PARTITION:
                            log.warning(
                                "marker for %s in %s-%d: error %d",
                                txn.transactional_id,
                                topic,
                                index,
                                code,
                            )
                    else:
                        retry = True
                        log.info(
                            "marker for %s in %s-%d: error %d (attempt %d)",
                            txn.transactional_id,
                            topic,
                            index,
                            code,
                            attempt + 1,
                        )
            if not retry:
                break
            if attempt + 1 < attempts:
                await asyncio.sleep(backoff)
                backoff *= 2
        if txn.partitions - marked:
            return E.COORDINATOR_NOT_AVAILABLE  # still decided: tried again later
        self._marked.pop(ident, None)
        return E.NONE

    async def _here(self, txn, commit: bool, keys: list[Key]) -> dict[Key, int]:
        pid, epoch = txn.producer_id, txn.producer_epoch
        codes = {}
        if os.environ.get("HEADRACE_TEST_CRASH") == "after-first-marker":
            codes = await write_here(
                self.topics, self.groups, pid, epoch, commit, COORDINATOR_EPOCH, keys[:1]
            )
            crash_point("after-first-marker")
            keys = keys[1:]
        codes.update(
            await write_here(self.topics, self.groups, pid, epoch, commit, COORDINATOR_EPOCH, keys)
        )
        return codes

    async def _to(self, node: int, txn, commit: bool, keys: list[Key]) -> dict[Key, int]:
        """WriteTxnMarkers to ``node`` for ``keys``: a code per partition (NETWORK_EXCEPTION
        for all when the request failed)."""
        W = messages.WriteTxnMarkersRequest
        by_topic: dict[str, list[int]] = {}
        for name, index in keys:
            by_topic.setdefault(name, []).append(index)
        request = W(
            markers=[
                W.WritableTxnMarker(
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    transaction_result=commit,
                    topics=[
                        W.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=COORDINATOR_EPOCH,
                )
            ]
        )
        if self.broker_client is None:
            return dict.fromkeys(keys, E.NETWORK_EXCEPTION)
        try:
            response = await self.broker_client.send(
                node, ApiKey.WRITE_TXN_MARKERS, MARKER_VERSION, request, MARKER_TIMEOUT_S
            )
        except NetworkError as e:
            log.info("markers of %s to node %d: %s", txn.transactional_id, node, e)
            return dict.fromkeys(keys, E.NETWORK_EXCEPTION)
        codes: dict[Key, int] = dict.fromkeys(keys, E.UNKNOWN_SERVER_ERROR)  # unless answered
        for result in response.markers:
            for t in result.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in codes:
                        codes[(t.name, p.partition_index)] = p.error_code
        return codes
