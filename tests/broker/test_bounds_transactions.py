"""Transactional ids are bounded by ``transactional.id.max.count`` (and forgotten after
``transactional.id.expiration.ms`` idle): a client making up ids cannot pass the bound. The join
guards of a partition (transactions v2) are bounded by
``transaction.partition.verification.max.guards``."""

from __future__ import annotations

import random
import time
import uuid

import confluent_kafka as ck
import pytest

import headrace
from headrace.broker.config.settings import ConfigError
from headrace.protocol import ApiKey, ErrorCode, messages

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient
from test_transactions_v2 import end_txn_v5, produce_v12
from test_transactions_wire import FAST, create_topic, init_pid

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


GUARDS = 20


def test_made_up_producers_joining_transactions_keep_the_guards_bounded():
    """A client floods a partition with transactional Produce v12 requests of made-up producer
    and transactional ids: each is a first batch waiting to join a transaction (the leader asks
    the coordinator), so each leaves a join guard in the partition's producer state. The guards
    stay within ``transaction.partition.verification.max.guards``, the client gets Kafka's error
    code, and a real transactional producer commits afterwards."""
    settings = {**FAST, "transaction.partition.verification.max.guards": GUARDS}
    with headrace.Broker(settings) as broker:
        with WireClient(broker.port) as c:
            create_topic(c, "t")
            guards = broker._server.topics.get("t").partition(0).producers.joining
            codes = set()
            for pid in random.sample(range(10_000, 1 << 40), 10 * GUARDS):
                codes.add(produce_v12(c, f"hostile-{uuid.uuid4()}", pid, 0, 0, [b"x"]))
                assert len(guards) <= GUARDS
            assert codes == {ErrorCode.INVALID_PRODUCER_ID_MAPPING}
            assert len(guards) == GUARDS

            # the broker still serves transactions v2 on the partition, on the same connection
            _, pid, epoch = init_pid(c, "legit-v2")
            assert produce_v12(c, "legit-v2", pid, epoch, 0, [b"a"]) == ErrorCode.NONE
            assert end_txn_v5(c, "legit-v2", pid, epoch, True)[0] == ErrorCode.NONE
            assert pid not in guards and len(guards) <= GUARDS

        producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                "transactional.id": "legit"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(5):
            producer.produce("t", b"b%d" % i, partition=0)
        producer.commit_transaction(30)

        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "check",
                                "isolation.level": "read_committed", "enable.partition.eof": True})
        consumer.assign([ck.TopicPartition("t", 0, 0)])
        values = []
        while True:
            m = consumer.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error():
                break
            values.append(m.value())
        consumer.close()
        assert values == [b"a", b"b0", b"b1", b"b2", b"b3", b"b4"]


def test_the_guard_bound_is_at_least_one():
    with pytest.raises(ConfigError, match="transaction.partition.verification.max.guards: 0 is below 1"):
        headrace.Broker({"transaction.partition.verification.max.guards": 0})
    with pytest.raises(ConfigError, match="quota.window.num: 0 is below 1"):
        headrace.Broker({"quota.window.num": 0})
