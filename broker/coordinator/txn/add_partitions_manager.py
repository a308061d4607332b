"""The leader's side of transactions v2 (KIP-890): a partition joins the producer's transaction
when its leader first gets a transactional batch for it, before the batch is appended.

How this works
--------------
Produce v12+ (apis/produce.py) and TxnOffsetCommit v5 (apis/txn_offset_commit.py, the group's
partition of ``__consumer_offsets``) call ``join`` with the partitions led here that are not yet
in the producer's transaction. When this broker coordinates the transactional id the
coordinator adds them itself (``TransactionCoordinator.add_partitions`` as for a
transactions-v2 client, which waits for a change of the same transaction being written
instead of answering CONCURRENT_TRANSACTIONS); otherwise they go in an AddPartitionsToTxn v5
request to the leader of the id's partition of ``__transaction_state`` (as the cluster
metadata says), on a channel of its own (``client``), with ``request.timeout.ms``.

The coordinator's answer is turned into what Kafka's leaders give the producer: a coordinator
that is unreachable, moving or loading is NOT_ENOUGH_REPLICAS (the producer retries), a fenced
producer INVALID_PRODUCER_EPOCH; other errors pass as they are. The manager keeps no state of
its own: the transactions are the coordinator's, read and changed through its methods.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headrace.broker.client.broker_client import NetworkError
from headrace.broker.coordinator.group import group_offsets
from headrace.protocol import ApiKey, ErrorCode, messages

from .transaction_log import TRANSACTION_TOPIC

if TYPE_CHECKING:
    from .transaction_coordinator import TransactionCoordinator

log = logging.getLogger("headrace.transactions")

E = ErrorCode
Key = tuple[str, int]
# the coordinator's answers a leader gives the producer as NOT_ENOUGH_REPLICAS (retried)
_RETRIED = frozenset(
    {
        E.NETWORK_EXCEPTION,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.REQUEST_TIMED_OUT,
    }
)


class AddPartitionsToTxnManager:
    """Adds the partitions led here to their producers' transactions: at ``coordinator``
    when it serves the transactional id, else through ``client`` (None: one broker, never
    needed)."""

    def __init__(self, coordinator: TransactionCoordinator, client=None) -> None:
        self.coordinator = coordinator
        self.client = client

    async def join(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: set[Key]
    ) -> int:
        """Add ``partitions`` to the producer's transaction before this broker, their leader,
        appends the producer's first batch there (see the module doc for the errors)."""
        coordinator = self.coordinator
        if coordinator.owns(transactional_id):
            error = coordinator.not_served(transactional_id) or await coordinator.add_partitions(
                transactional_id, producer_id, epoch, partitions, client_version=2
            )
        else:
            error = await self._add_remote(transactional_id, producer_id, epoch, partitions)
        if error in _RETRIED:
            return E.NOT_ENOUGH_REPLICAS
        if error == E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        return error

    async def _add_remote(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: set[Key]
    ) -> int:
        """AddPartitionsToTxn v5 to the coordinator of ``transactional_id``: its error code
        (the first partition's error, if any)."""
        cluster = self.coordinator.topics.cluster
        topic = cluster.topics.get(TRANSACTION_TOPIC)
        if topic is None or self.client is None:
            return E.COORDINATOR_NOT_AVAILABLE
        index = group_offsets.partition_for(transactional_id, len(topic.replicas))
        node = cluster.leader(TRANSACTION_TOPIC, index)
        if node < 0:
            return E.COORDINATOR_NOT_AVAILABLE
        by_topic: dict[str, list[int]] = {}
        for name, p in sorted(partitions):
            by_topic.setdefault(name, []).append(p)
        A = messages.AddPartitionsToTxnRequest
        request = A(
            transactions=[
                A.AddPartitionsToTxnTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    verify_only=False,
                    topics=[
                        A.AddPartitionsToTxnTopic(name=n, partitions=ps)
                        for n, ps in by_topic.items()
                    ],
                )
            ]
        )
        try:
            response = await self.client.send(
                node, ApiKey.ADD_PARTITIONS_TO_TXN, 5, request, self.coordinator.write_timeout_s
            )
        except NetworkError as e:
            log.info("adding partitions of %s at node %d: %s", transactional_id, node, e)
            return E.NETWORK_EXCEPTION
        if response.error_code:
            return response.error_code
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for r in t.results_by_partition:
                    if r.partition_error_code:
                        return r.partition_error_code
        return E.NONE
