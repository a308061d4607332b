"""The persister: what a partition leader calls to read and write the state of its share
partitions (Kafka's ``DefaultStatePersister`` and ``PersisterStateManager``).

How this works
--------------
Each call names one share-partition key (group id, topic id, partition) and goes to the key's
share coordinator, the leader of the key's partition of ``__share_group_state``
(``ShareCoordinator.coordinator_for``, which makes the topic on first use). When that is this
broker the local ``ShareCoordinator`` answers directly; otherwise the Kafka API (Initialize,
Read, Write, Delete, ReadSummary ShareGroupState, keys 83-87) goes to the coordinator over the
``share-state`` channel of the broker client (a connection of its own: a write waits for its
ISR, and must not hold up replica fetches or markers). Answers that mean "ask again"
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION while the coordinator's metadata catches up, and a lost or timed-out
connection) are retried, the coordinator looked up afresh each time, with a backoff from
``RETRY_BACKOFF_MS`` doubling to ``RETRY_BACKOFF_MAX_MS``, until ``timeout_ms``; then the last
error is returned. Other errors are returned at once.

A read of a key the coordinator has no state for (Kafka answers INVALID_REQUEST with
``READ_UNINITIALIZED``) is a ``ReadResult`` with error NONE, ``initialized`` False and start
offset -1: the leader then starts the share partition where its reset policy says and
initializes it. A key initialized with start offset -1 reads back the same way but with
``initialized`` True.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from headrace.broker.client.broker_client import NetworkError
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.api import request_class

from .share_coordinator import READ_UNINITIALIZED, ReadAnswer, ShareCoordinator, SummaryAnswer
from .share_state_log import ShareKey
from .state_batches import StateBatch

log = logging.getLogger("headrace.share")

E = ErrorCode
RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 1000
RETRIABLE = frozenset(
    {
        E.NOT_COORDINATOR,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NETWORK_EXCEPTION,
        E.REQUEST_TIMED_OUT,
    }
)
# the requests' topic structs, and the versions sent (Kafka 4.4's newest)
_TOPIC_STRUCTS: dict[int, str] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "InitializeStateData",
    ApiKey.READ_SHARE_GROUP_STATE: "ReadStateData",
    ApiKey.WRITE_SHARE_GROUP_STATE: "WriteStateData",
    ApiKey.DELETE_SHARE_GROUP_STATE: "DeleteStateData",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "ReadStateSummaryData",
}
WRITTEN_BATCH = messages.WriteShareGroupStateRequest.StateBatch
INITIALIZE_VERSION, READ_VERSION, WRITE_VERSION, DELETE_VERSION, SUMMARY_VERSION = 0, 0, 1, 0, 1
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A read's answer. ``initialized`` False: the coordinator has no state for the key (never
    initialized, or deleted); then error is NONE, state epoch 0, start offset -1, no batches."""

    error: int
    state_epoch: int = 0
    start_offset: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    initialized: bool = True
    message: str | None = None


class SharePersister:
    """Built from the local share coordinator, the channel of the broker client that reaches
    the others (None: a broker on its own), this node's id and how long a call may retry."""

    def __init__(
        self,
        coordinator: ShareCoordinator,
        client=None,
        *,
        node_id: int,
        timeout_ms: int = 30000,
    ) -> None:
        self.coordinator = coordinator
        self.client = client
        self.node_id = node_id
        self.timeout_s = timeout_ms / 1000

    # the calls ---------------------------------------------------------------------------------

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> ReadResult:
        """The key's state epoch, start offset and state batches; a ``leader_epoch`` newer than
        the one recorded is recorded (fencing the previous leader's writes), an older one is
        FENCED_LEADER_EPOCH."""
        key = (group_id, topic_id, partition)
        answer = await self._call(
            key,
            lambda: self.coordinator.read(key, leader_epoch),
            lambda node: self._read_remote(node, key, leader_epoch),
            ReadAnswer,
            lambda a: a.error,
        )
        if answer.error == E.INVALID_REQUEST and answer.message == READ_UNINITIALIZED:
            return ReadResult(E.NONE, initialized=False, message=answer.message)
        if answer.error:
            return ReadResult(answer.error, message=answer.message)
        return ReadResult(E.NONE, answer.state_epoch, answer.start_offset, list(answer.batches))

    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        start_offset: int,
    ) -> int:
        """Start the key afresh at ``start_offset`` (-1: not known yet) with ``state_epoch``;
        an error code."""
        key = (group_id, topic_id, partition)
        error, _ = await self._call(
            key,
            lambda: self.coordinator.initialize(key, state_epoch, start_offset),
            lambda node: self._error_remote(
                node,
                ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                INITIALIZE_VERSION,
                key,
                state_epoch=state_epoch,
                start_offset=start_offset,
            ),
            _failed,
            lambda a: a[0],
        )
        return error

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[Sequence[int]],
        delivery_complete_count: int = -1,
    ) -> int:
        """Merge ``batches`` ((first offset, last offset, delivery state, delivery count)) into
        the key's state and move its start offset forward to ``start_offset`` (-1: leave it);
        NONE once the coordinator's ISR has the record, else an error code (FENCED_LEADER_EPOCH,
        FENCED_STATE_EPOCH: a newer leader or state took over)."""
        key = (group_id, topic_id, partition)
        written = [StateBatch(*b) for b in batches]
        error, _ = await self._call(
            key,
            lambda: self.coordinator.write(
                key, state_epoch, leader_epoch, start_offset, written, delivery_complete_count
            ),
            lambda node: self._error_remote(
                node,
                ApiKey.WRITE_SHARE_GROUP_STATE,
                WRITE_VERSION,
                key,
                state_epoch=state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                state_batches=[WRITTEN_BATCH(**b._asdict()) for b in written],
            ),
            _failed,
            lambda a: a[0],
        )
        return error

    async def delete(self, group_id: str, topics: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> int:
        """Delete the group's state of the partitions named, (topic id, [partitions]) pairs:
        the first error code met, or NONE."""
        keys = [(group_id, t, p) for t, ps in topics for p in ps]
        errors = await asyncio.gather(*(self._delete(key) for key in keys))
        return next((e for e in errors if e), E.NONE)

    async def _delete(self, key: ShareKey) -> int:
        error, _ = await self._call(
            key,
            lambda: self.coordinator.delete(key),
            lambda node: self._error_remote(
                node, ApiKey.DELETE_SHARE_GROUP_STATE, DELETE_VERSION, key
            ),
            _failed,
            lambda a: a[0],
        )
        return error

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int = 0
    ) -> SummaryAnswer:
        """The key's start offset, epochs and delivery-complete count (an uninitialized key:
        start offset -1, count -1)."""
        key = (group_id, topic_id, partition)

        async def local() -> SummaryAnswer:
            return self.coordinator.read_summary(key)

        return await self._call(
            key,
            local,
            lambda node: self._summary_remote(node, key, leader_epoch),
            SummaryAnswer,
            lambda a: a.error,
        )

    # finding the coordinator, retrying --------------------------------------------------------

    async def _call(
        self,
        key: ShareKey,
        local: Callable[[], Awaitable[A]],
        remote: Callable[[int], Awaitable[A]],
        failed: Callable[[int], A],
        error_of: Callable[[A], int],
    ) -> A:
        """``local()`` or ``remote(node)`` at the key's coordinator, retried while the answer
        is retriable and time is left; ``failed(error)`` makes the answer of a try that
        reached no coordinator."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        backoff = RETRY_BACKOFF_MS / 1000
        while True:
            answer = await self._once(key, local, remote, failed)
            if error_of(answer) not in RETRIABLE or loop.time() + backoff >= deadline:
                return answer
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_MS / 1000)

    async def _once(
        self,
        key: ShareKey,
        local: Callable[[], Awaitable[A]],
        remote: Callable[[int], Awaitable[A]],
        failed: Callable[[int], A],
    ) -> A:
        try:
            node = await self.coordinator.coordinator_for(key)
        except Exception as e:  # the topic could not be made (StorageError, TopicCreationError)
            log.info("no share coordinator for %s yet: %s", key, e)
            return failed(E.COORDINATOR_NOT_AVAILABLE)
        if node < 0:
            return failed(E.COORDINATOR_NOT_AVAILABLE)
        if node == self.node_id:
            return await local()
        if self.client is None:
            return failed(E.COORDINATOR_NOT_AVAILABLE)
        try:
            return await remote(node)
        except NetworkError as e:
            log.info("share state of %s at node %d: %s", key, node, e)
            return failed(E.NETWORK_EXCEPTION)

    async def _ask(self, node: int, api_key: int, version: int, key: ShareKey, **fields):
        """Send ``api_key`` about one key to ``node``: its result for the key's partition
        (``fields`` are the partition's), or None when the answer has none."""
        group_id, topic_id, partition = key
        Q = request_class(api_key)
        topic = getattr(Q, _TOPIC_STRUCTS[api_key])
        request = Q(
            group_id=group_id,
            topics=[
                topic(
                    topic_id=topic_id, partitions=[Q.PartitionData(partition=partition, **fields)]
                )
            ],
        )
        response = await self.client.send(node, api_key, version, request, self.timeout_s)
        for t in response.results:
            if t.topic_id == topic_id:
                for p in t.partitions:
                    if p.partition == partition:
                        return p
        return None

    async def _error_remote(self, node, api_key, version, key, **fields) -> tuple[int, str | None]:
        r = await self._ask(node, api_key, version, key, **fields)
        return (E.UNKNOWN_SERVER_ERROR, None) if r is None else (r.error_code, r.error_message)

    async def _read_remote(self, node, key, leader_epoch) -> ReadAnswer:
        r = await self._ask(
            node, ApiKey.READ_SHARE_GROUP_STATE, READ_VERSION, key, leader_epoch=leader_epoch
        )
        if r is None:
            return ReadAnswer(E.UNKNOWN_SERVER_ERROR, "no answer for the partition")
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in r.state_batches
        ]
        return ReadAnswer(r.error_code, r.error_message, r.state_epoch, r.start_offset, batches)

    async def _summary_remote(self, node, key, leader_epoch) -> SummaryAnswer:
        r = await self._ask(
            node,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
            SUMMARY_VERSION,
            key,
            leader_epoch=leader_epoch,
        )
        if r is None:
            return SummaryAnswer(E.UNKNOWN_SERVER_ERROR, "no answer for the partition")
        return SummaryAnswer(
            r.error_code,
            r.error_message,
            r.state_epoch,
            r.leader_epoch,
            r.start_offset,
            r.delivery_complete_count,
        )


def _failed(error: int) -> tuple[int, str | None]:
    return error, None
