"""AddOffsetsToTxn (key 25), versions 0-4: a group's offsets join a producer's transaction.

The group's partition of ``__consumer_offsets`` (created here if needed) is added to the
transaction, so the offsets that TxnOffsetCommit then writes are committed or aborted with
it. Fencing is PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC, partition_for
from headrace.broker.security.authorizer import GROUP, TRANSACTIONAL_ID, Operation
from headrace.protocol import ErrorCode, messages
from headrace.storage import StorageError

R = messages.AddOffsetsToTxnResponse


async def handle(broker: Broker, header, request: messages.AddOffsetsToTxnRequest):
    if not request.group_id:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    authorizer, session = broker.authorizer, header.session
    if not authorizer.allows(session, Operation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorizer.allows(session, Operation.READ, GROUP, request.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = broker.transactions.not_served(request.transactional_id)
    if refused:
        return R(throttle_time_ms=0, error_code=refused)
    try:
        topic = await broker.groups.offsets.topic()
    except StorageError:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error = await broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        {(OFFSETS_TOPIC, partition_for(request.group_id, topic.count))},
    )
    if error == ErrorCode.PRODUCER_FENCED and header.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=error)
