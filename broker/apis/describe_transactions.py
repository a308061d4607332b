"""DescribeTransactions (key 65), version 0: the coordinator's view of transactional ids.

Unknown ids get TRANSACTIONAL_ID_NOT_FOUND. The state names are Kafka's (``Ongoing``,
``CompleteCommit``...), so ``kafka-transactions.sh describe`` prints what it would for Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import transaction_refusal

R = messages.DescribeTransactionsResponse


def handle(broker: Broker, header, request: messages.DescribeTransactionsRequest):
    states = []
    for tid in request.transactional_ids:
        txn = broker.transactions.describe(tid)
        refused = transaction_refusal(broker, header.session, Operation.DESCRIBE, tid)
        if txn is None or refused:
            states.append(_none(tid, refused or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        by_topic: dict[str, list[int]] = {}
        for name, index in sorted(txn.partitions):
            by_topic.setdefault(name, []).append(index)
        states.append(
            R.TransactionState(
                error_code=ErrorCode.NONE,
                transactional_id=tid,
                transaction_state=txn.state.name,
                transaction_timeout_ms=txn.timeout_ms,
                transaction_start_time_ms=txn.start_ms,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[R.TopicData(topic=n, partitions=ps) for n, ps in by_topic.items()],
            )
        )
    return R(throttle_time_ms=0, transaction_states=states)


def _none(transactional_id: str, error_code: int):
    """The answer for an id that is not described: ``error_code`` says why."""
    return R.TransactionState(
        error_code=error_code,
        transactional_id=transactional_id,
        transaction_state="",
        producer_id=-1,
        producer_epoch=-1,
        transaction_start_time_ms=-1,
        topics=[],
    )
