"""AddPartitionsToTxn (key 24), versions 0-5: partitions join a producer's transaction.

v0-3 (what clients send) carry one transaction; v4-5 (broker to broker, KIP-890) carry a
batch of them, each ``verify_only`` (is the partition already in the transaction?) or, for a
transactions-v2 producer, an add by the partition's leader
(``AddPartitionsToTxnManager.join``). v4-5 need CLUSTER_ACTION, and the producer's own rights
were checked by the leader, as in Kafka.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the others of the same
request OPERATION_NOT_ATTEMPTED: nothing is added unless every partition exists. Otherwise
every partition gets the coordinator's answer (``transaction_state.ADD_PARTITIONS``);
fencing is PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.txn.transaction_log import TRANSACTION_TOPIC
from headrace.broker.security.authorizer import TOPIC, TRANSACTIONAL_ID, Operation
from headrace.protocol import ErrorCode, messages

R = messages.AddPartitionsToTxnResponse


def _unknown(broker: Broker, name: str, index: int) -> bool:
    topic = broker.topics.get(name)
    return name == TRANSACTION_TOPIC or topic is None or not 0 <= index < topic.count


async def _one(broker: Broker, session, version, tid, pid, epoch, topics, verify_only=False):
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = {(n, p) for n, p in wanted if _unknown(broker, n, p)}
    authorizer = broker.authorizer
    from_client = version <= 3
    denied = {
        t.name
        for t in topics
        if from_client and not authorizer.allows(session, Operation.WRITE, TOPIC, t.name)
    }
    if from_client and not authorizer.allows(session, Operation.WRITE, TRANSACTIONAL_ID, tid):
        codes: dict[tuple[str, int], int] = dict.fromkeys(
            wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
    elif denied:
        codes = {
            w: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if w[0] in denied
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for w in wanted
        }
    elif refused := broker.transactions.not_served(tid):
        codes = {w: refused for w in wanted}
    elif unknown:
        codes = {
            w: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if w in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for w in wanted
        }
    else:
        error = await broker.transactions.add_partitions(
            tid, pid, epoch, set(wanted), verify_only, client_version=0 if from_client else 2
        )
        if error == ErrorCode.PRODUCER_FENCED and version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        codes = {w: error for w in wanted}
    results = []
    for t in topics:
        results.append(
            R.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=codes[(t.name, p)]
                    )
                    for p in t.partitions
                ],
            )
        )
    return results


async def handle(broker: Broker, header, request: messages.AddPartitionsToTxnRequest):
    version = header.api_version
    if version <= 3:
        results = await _one(
            broker,
            header.session,
            version,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
        )
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    out = []
    # v4+ comes from brokers verifying for their producers (Kafka: CLUSTER_ACTION)
    if not broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION):
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            results_by_transaction=[],
        )
    for txn in request.transactions:
        results = await _one(
            broker,
            header.session,
            version,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
        )
        out.append(
            R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=results)
        )
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=out)
