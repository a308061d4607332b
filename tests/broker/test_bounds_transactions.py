"""Transactional ids are bounded by ``transactional.id.max.count`` (and forgotten after
``transactional.id.expiration.ms`` idle): a client making up ids cannot pass the bound."""

from __future__ import annotations

import time
import uuid

from headrace.protocol import ApiKey, ErrorCode, messages

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

MAX_IDS = 10
SETTINGS = {
    "transactional.id.max.count": str(MAX_IDS),
    "transactional.id.expiration.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": "3",
}


def init(c, tid: str) -> int:
    I = messages.InitProducerIdRequest
    return c.request(ApiKey.INIT_PRODUCER_ID, 4, I(
        transactional_id=tid, transaction_timeout_ms=10_000)).error_code


def known(c) -> int:
    L = messages.ListTransactionsRequest
    return len(c.request(ApiKey.LIST_TRANSACTIONS, 1, L()).transaction_states)


def test_made_up_transactional_ids_are_bounded_and_expire(tmp_path):
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        with WireClient(b.port) as c:
            codes = [init(c, f"hostile-{uuid.uuid4()}") for _ in range(3 * MAX_IDS)]
            accepted = codes.count(ErrorCode.NONE)
            assert MAX_IDS <= accepted < 3 * MAX_IDS  # expiry may free a few meanwhile
            assert set(codes) == {ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE}
            assert known(c) <= MAX_IDS
            deadline = time.monotonic() + 10
            while known(c) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert known(c) == 0  # idle ids expired: room again
            assert init(c, "legit") == ErrorCode.NONE
    finally:
        b.kill()
