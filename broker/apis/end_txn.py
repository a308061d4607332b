"""EndTxn (key 26), versions 0-5: commit or abort a producer's transaction.

The coordinator writes its decision, a marker to every partition of the transaction, flushes
them and completes the transaction before answering (``transaction_coordinator``). A retry
of a finished commit or abort succeeds; EndTxn without an open transaction is
INVALID_TXN_STATE; one while the markers are written is CONCURRENT_TRANSACTIONS. Fencing is
PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before. Version 5 is transactions v2
(KIP-890): the decision bumps the producer epoch, and the answer carries the producer id and
epoch the producer goes on with (``transaction_state.END_TXN_V2``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import transaction_refusal

R = messages.EndTxnResponse


async def handle(broker: Broker, header, request: messages.EndTxnRequest):
    refused = transaction_refusal(broker, header.session, Operation.WRITE, request.transactional_id)
    if refused:
        return R(throttle_time_ms=0, error_code=refused, producer_id=-1, producer_epoch=-1)
    error, producer_id, epoch = await broker.transactions.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        client_version=2 if header.api_version >= 5 else 0,
    )
    if error == ErrorCode.PRODUCER_FENCED and header.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)
