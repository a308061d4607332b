"""A partition's producer state is bounded by ``producer.id.expiration.ms``: producer ids made
up by a client are forgotten once idle, active producers are kept."""

from __future__ import annotations

import random
import time

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

EXPIRATION_MS = 1500
SETTINGS = {
    "producer.id.expiration.ms": str(EXPIRATION_MS),
    "producer.id.expiration.check.interval.ms": "200",
}


def produce(c, pid: int, seq: int) -> int:
    P = messages.ProduceRequest
    records = build_batch([Record(key=b"k", value=b"v", timestamp=int(time.time() * 1000))],
                          producer_id=pid, producer_epoch=0, base_sequence=seq)
    r = c.request(ApiKey.PRODUCE, 9, P(
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name="t", partition_data=[
            P.PartitionProduceData(index=0, records=records)])]))
    return r.responses[0].partition_responses[0].error_code


def producers(c) -> set[int]:
    D = messages.DescribeProducersRequest
    r = c.request(ApiKey.DESCRIBE_PRODUCERS, 0, D(topics=[
        D.TopicRequest(name="t", partition_indexes=[0])]))
    return {p.producer_id for p in r.topics[0].partitions[0].active_producers}


def test_made_up_producer_ids_expire_and_active_ones_stay(tmp_path):
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        with WireClient(b.port) as c:
            C = messages.CreateTopicsRequest
            c.request(ApiKey.CREATE_TOPICS, 7, C(topics=[
                C.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]))
            hostile = random.sample(range(10_000, 1 << 40), 300)
            for pid in hostile:
                assert produce(c, pid, 0) == ErrorCode.NONE
            active = 7
            assert produce(c, active, 0) == ErrorCode.NONE
            assert producers(c) == set(hostile) | {active}
            # the active producer keeps appending, in sequence, while the others idle
            seq = 1
            deadline = time.monotonic() + EXPIRATION_MS / 1000 * 3
            while producers(c) != {active}:
                assert time.monotonic() < deadline, len(producers(c))
                assert produce(c, active, seq) == ErrorCode.NONE
                seq += 1
                time.sleep(0.1)
            # its sequence numbers are still checked; a forgotten producer starts afresh
            assert produce(c, active, seq + 5) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert produce(c, hostile[0], 42) == ErrorCode.NONE
            assert producers(c) == {active, hostile[0]}
    finally:
        b.kill()


def test_a_producer_with_an_open_transaction_is_not_forgotten():
    from headrace.broker.log.producer_state import ProducerStateManager

    state = ProducerStateManager(max_joining=1000)
    state.record(1, 0, 0, 0, 10, transactional=True)
    state.record(2, 0, 0, 0, 11)
    assert state.expire(-1) == 1  # everything is idle past the cutoff
    assert set(state.producers) == {1} and state.ongoing == {1: 10}
    state.complete(1, 0, 0, 12)
    assert state.expire(60) == 0  # the marker counts as activity
    assert state.expire(-1) == 1 and not state.producers
