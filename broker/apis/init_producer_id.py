"""InitProducerId (key 22), versions 0-5: producer ids for idempotent and transactional
producers.

Every call without a transactional id gets a new producer id, epoch 0, from
``coordinator.txn.producer_ids``. A call with a transactional id goes to the transaction
coordinator: the id's producer id with its epoch bumped (fencing the previous producer; an
open transaction of it is aborted first). Fenced answers are PRODUCER_FENCED from v4,
INVALID_PRODUCER_EPOCH before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .refusals import transaction_refusal

R = messages.InitProducerIdResponse


async def handle(broker: Broker, header, request: messages.InitProducerIdRequest):
    if request.transactional_id == "":
        return _refused(ErrorCode.INVALID_REQUEST)
    authorizer, session = broker.authorizer, header.session
    if request.transactional_id is not None:
        version = header.api_version
        refused = transaction_refusal(broker, session, Operation.WRITE, request.transactional_id)
        if refused:
            return _refused(refused)
        error, pid, epoch = await broker.transactions.init_producer_id(
            request.transactional_id,
            request.transaction_timeout_ms,
            request.producer_id if version >= 3 else -1,
            request.producer_epoch if version >= 3 else -1,
        )
        if error == ErrorCode.PRODUCER_FENCED and version < 4:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return R(throttle_time_ms=0, error_code=error, producer_id=pid, producer_epoch=epoch)
    # an idempotent producer: IDEMPOTENT_WRITE on the cluster, or (Kafka 3.0+) WRITE on
    # some topic
    if not authorizer.allows_cluster(session, Operation.IDEMPOTENT_WRITE) and not (
        authorizer.allows_any(session, Operation.WRITE, TOPIC)
    ):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    pid = await broker.producer_ids.next_id()
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)


def _refused(code: int):
    return R(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
