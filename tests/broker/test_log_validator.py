"""Records inside a batch checked as Kafka's LogValidator checks them: the compiled check and
its Python reference give the same answers on valid and mutated batches; a broker refuses
malformed records, keyless records on a compacted topic and out-of-range timestamps with
Kafka's codes and the record's index, and stores nothing of the refused payload."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import KafkaError, Producer
from kafkawire import WireClient

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.compression import compress
from headrace.protocol.records import Record, build_batch
from headrace.record_check import COMPILED, FRAMING, NO_KEY, OFFSET, OK, TIMESTAMP, check_records, check_records_py
from headrace.record_format import set_crc

L = (1 << 63) - 1
HEADER = 61
NOW = 1_700_000_000_000


def batch(records=None, **kw) -> bytearray:
    records = records or [Record(key=b"k%d" % i, value=b"v" * (i * 7), headers=[("h", b"x")] if i % 2 else [],
                                 timestamp=NOW + i) for i in range(20)]
    return bytearray(build_batch(records, **kw))


def check(b, fn=check_records, need_key=False, low=-L - 1, high=L, count=None):
    count = int.from_bytes(b[57:61], "big") if count is None else count
    base = int.from_bytes(b[27:35], "big", signed=True)
    return fn(bytes(b), HEADER, len(b), count, need_key, base, low, high)


def test_valid_batches_pass_and_each_kind_of_problem_is_found():
    b = batch()
    assert check(b) == (OK, -1)
    assert check(b, need_key=True) == (OK, -1)
    keyless = batch([Record(key=b"k", value=b"1", timestamp=NOW), Record(key=None, value=b"2", timestamp=NOW)])
    assert check(keyless, need_key=True) == (NO_KEY, 1)
    assert check(b, low=NOW, high=NOW + 5) == (TIMESTAMP, 6)
    assert check(b, count=19) == (FRAMING, 19)  # bytes left after the count
    assert check(b, count=21) == (FRAMING, 20)  # fewer records than the count
    # the second record's offset delta (after its length varint and attributes): 1 -> 5
    first_len = b[HEADER] >> 1  # one-byte zigzag varint
    second = HEADER + 1 + first_len
    pos = second + 1 + 1 + 1  # length (1 byte), attributes, timestamp delta (1 byte: 1)
    assert b[pos] == 2  # zigzag(1)
    b[pos] = 10
    assert check(b) == (OFFSET, 1)


def test_the_compiled_check_agrees_with_the_reference_on_mutated_batches():
    if not COMPILED:
        pytest.skip("headrace._record_check was not built (no C compiler at install)")
    rng = random.Random(14)
    answers = set()
    keyless = [Record(key=None if i == 3 else b"k", value=b"v" * i, timestamp=NOW + i) for i in range(8)]
    for n in range(3000):
        b = batch(keyless if n % 4 == 0 else None)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(HEADER, len(b))
            b[i] = rng.randrange(256) if rng.random() < 0.7 else b[i] ^ (1 << rng.randrange(8))
        if rng.random() < 0.2:
            del b[rng.randrange(HEADER, len(b)):]
        kw = dict(need_key=rng.random() < 0.5, low=NOW + rng.randint(-5, 5), high=NOW + rng.randint(5, 30))
        got = check(b, check_records, **kw)
        assert got == check(b, check_records_py, **kw), n
        answers.add(got[0])
    assert answers == {OK, FRAMING, OFFSET, NO_KEY, TIMESTAMP}  # every answer was exercised


def produce(client, topic: str, records: bytes | bytearray, version: int = 9):
    P = messages.ProduceRequest
    request = P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=0, records=bytes(records))])])
    return client.request(ApiKey.PRODUCE, version, request).responses[0].partition_responses[0]


def log_end(client, topic: str) -> int:
    L_ = messages.ListOffsetsRequest
    answer = client.request(ApiKey.LIST_OFFSETS, 7, L_(replica_id=-1, isolation_level=0, topics=[
        L_.ListOffsetsTopic(name=topic, partitions=[L_.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return answer.topics[0].partitions[0].offset


def test_the_broker_refuses_bad_records_with_kafkas_codes_and_stores_nothing(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker, WireClient(broker.port) as client:
        broker.create_topic("plain")
        broker.create_topic("compacted", cleanup_policy="compact")
        broker.create_topic("recent", message_timestamp_before_max_ms=60_000,
                            message_timestamp_after_max_ms=60_000)
        now = int(time.time() * 1000)
        good = batch([Record(key=b"k", value=b"v", timestamp=now)])
        for topic in ("plain", "compacted", "recent"):
            assert produce(client, topic, good).error_code == ErrorCode.NONE

        # a record whose length says one byte more than it has; the CRC is made to match
        bad = batch([Record(key=b"a", value=b"1", timestamp=now), Record(key=b"b", value=b"2", timestamp=now)])
        second = HEADER + 1 + (bad[HEADER] >> 1)
        bad[second] += 2  # zigzag: length + 1
        set_crc(bad)
        answer = produce(client, "plain", bad)
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert [(e.batch_index, bool(e.batch_index_error_message)) for e in answer.record_errors] == [(1, True)]
        assert answer.error_message
        # the same damage without a matching CRC is a corrupt message, as before
        bad[17] ^= 0xFF
        assert produce(client, "plain", bad).error_code == ErrorCode.CORRUPT_MESSAGE

        keyless = batch([Record(key=b"k", value=b"1", timestamp=now), Record(key=None, value=b"2", timestamp=now)])
        answer = produce(client, "compacted", keyless)
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert [e.batch_index for e in answer.record_errors] == [1]
        assert "without key" in answer.error_message
        assert produce(client, "plain", keyless).error_code == ErrorCode.NONE  # not compacted

        late = batch([Record(key=b"k", value=b"1", timestamp=now), Record(key=b"k", value=b"2", timestamp=now - 3_600_000)])
        answer = produce(client, "recent", late)
        assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in answer.record_errors] == [1]

        # compressed: the records are looked at after decompression
        inner = bytearray(build_batch([Record(key=None, value=b"x", timestamp=now)] * 3, compression=1))
        assert produce(client, "compacted", inner).error_code == ErrorCode.INVALID_RECORD

        assert log_end(client, "plain") == 3  # the good batch and the keyless one
        assert log_end(client, "compacted") == 1
        assert log_end(client, "recent") == 1


def test_a_real_client_gets_invalid_record_for_a_keyless_record_on_a_compacted_topic(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        broker.create_topic("compacted", cleanup_policy="compact")
        errors = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
        producer.produce("compacted", b"no key", on_delivery=lambda e, m: errors.append(e))
        producer.flush(20)  # (one batch is refused or stored whole)
        producer.produce("compacted", b"keyed", key=b"k", on_delivery=lambda e, m: errors.append(e))
        producer.flush(20)
        assert [e.code() if e else None for e in errors] == [KafkaError.INVALID_RECORD, None]


def set_configs(client, topic: str, **configs) -> int:
    """AlterConfigs: the topic's explicit settings become exactly ``configs``."""
    A = messages.AlterConfigsRequest
    r = client.request(ApiKey.ALTER_CONFIGS, 2, A(validate_only=False, resources=[
        A.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            A.AlterableConfig(name=n.replace("_", "."), value=str(v)) for n, v in configs.items()])]))
    return r.responses[0].error_code


def test_settings_changed_by_alter_configs_apply_to_the_next_produce(tmp_path):
    """The produce path reads a topic's settings once per change (``Topic.produce_config``):
    each AlterConfigs applies to the very next request, and a restart keeps it."""
    data = tmp_path / "data"
    now = int(time.time() * 1000)
    keyless = batch([Record(key=None, value=b"x" * 100, timestamp=now)])
    old = batch([Record(key=b"k", value=b"x" * 100, timestamp=now - 3_600_000)])
    with BrokerProcess(data) as broker, WireClient(broker.port) as client:
        broker.create_topic("t")
        assert produce(client, "t", keyless).error_code == ErrorCode.NONE
        assert produce(client, "t", old).error_code == ErrorCode.NONE
        assert produce(client, "t", old).log_append_time_ms == -1

        assert set_configs(client, "t", cleanup_policy="compact") == ErrorCode.NONE
        assert produce(client, "t", keyless).error_code == ErrorCode.INVALID_RECORD
        assert set_configs(client, "t", message_timestamp_before_max_ms=60_000) == ErrorCode.NONE
        assert produce(client, "t", keyless).error_code == ErrorCode.NONE  # no longer compacted
        assert produce(client, "t", old).error_code == ErrorCode.INVALID_TIMESTAMP
        assert set_configs(client, "t", max_message_bytes=len(old) - 1) == ErrorCode.NONE
        assert produce(client, "t", old).error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert set_configs(client, "t", message_timestamp_type="LogAppendTime") == ErrorCode.NONE
        answer = produce(client, "t", old)  # its timestamp is replaced, so not too old
        assert answer.error_code == ErrorCode.NONE and answer.log_append_time_ms >= now
        assert log_end(client, "t") == 5
    with BrokerProcess(data) as broker, WireClient(broker.port) as client:
        assert produce(client, "t", old).log_append_time_ms >= now
        assert produce(client, "t", keyless).error_code == ErrorCode.NONE
        assert set_configs(client, "t", cleanup_policy="compact") == ErrorCode.NONE
        assert produce(client, "t", keyless).error_code == ErrorCode.INVALID_RECORD
