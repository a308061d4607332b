"""InitProducerId (key 22), versions 0-5: producer ids for idempotent and transactional
producers.

Every call without a transactional id gets a new producer id, epoch 0. Ids are handed out
from blocks of ``BLOCK`` reserved in ``producer-ids`` in the data directory (written and
fsynced before the first id of a block is used), so no id is given twice, even across a
crash; in a cluster the blocks come from ZooKeeper (``Cluster.producer_id_block``), so no two
brokers give the same id. A call with a transactional id goes to the transaction
coordinator: the id's producer id with its epoch bumped (fencing the previous producer; an
open transaction of it is aborted first). Fenced answers are PRODUCER_FENCED from v4,
INVALID_PRODUCER_EPOCH before.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from headrace.protocol import ApiKey, ErrorCode, messages

from .authorizer import TOPIC, TRANSACTIONAL_ID, Operation

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION, MAX_VERSION = 0, 5

R = messages.InitProducerIdResponse
BLOCK = 1000
FILE = "producer-ids"


class ProducerIdManager:
    """Producer ids from blocks reserved in ``data_dir`` (the file is read at the first id),
    or taken from ``blocks`` (an async callable: the first id of a new block of a size)."""

    def __init__(
        self, data_dir: Path, blocks: Callable[[int], Awaitable[int]] | None = None
    ) -> None:
        self._path = data_dir / FILE
        self._blocks = blocks
        self._reserved = self._next = -1  # not read yet
        self._lock = asyncio.Lock()

    def _load(self) -> None:
        try:
            self._reserved = int(self._path.read_text())
        except (FileNotFoundError, ValueError):
            self._reserved = 0
        self._next = self._reserved

    async def next_id(self) -> int:
        async with self._lock:
            if self._blocks is not None and self._next >= self._reserved:
                self._next = await self._blocks(BLOCK)
                self._reserved = self._next + BLOCK
            if self._reserved < 0:
                await asyncio.to_thread(self._load)
            if self._next >= self._reserved:
                await asyncio.to_thread(self._reserve, self._next + BLOCK)
            pid = self._next
            self._next += 1
            return pid

    def _reserve(self, upto: int) -> None:
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(str(upto))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._reserved = upto


async def handle(broker, header, request):
    if request.transactional_id == "":
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.INVALID_REQUEST,
            producer_id=-1,
            producer_epoch=-1,
        )
    authorizer, session = broker.authorizer, header.session
    if request.transactional_id is not None:
        version = header.api_version
        if not authorizer.allows(
            session, Operation.WRITE, TRANSACTIONAL_ID, request.transactional_id
        ):
            return R(
                throttle_time_ms=0,
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1,
                producer_epoch=-1,
            )
        refused = broker.transactions.not_served(request.transactional_id)
        if refused:
            return R(
                throttle_time_ms=0,
                error_code=refused,
                producer_id=-1,
                producer_epoch=-1,
            )
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
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    pid = await broker.producer_ids.next_id()
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
