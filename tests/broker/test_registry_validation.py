"""Records checked against the schema registry where a topic asks for it
(``confluent.value.schema.validation``, ``confluent.key.schema.validation``): confluent-kafka's
AvroSerializer's records are accepted; raw bytes, an unknown schema id and the id of another
subject's schema are refused with INVALID_RECORD and the record's index, and nothing of the
batch is written; a compressed batch is looked into; a topic that does not ask is not touched;
a broker without the registry refuses a topic that asks for it."""

from __future__ import annotations

import json
import struct
import time

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafkawire import WireClient

from headrace.broker.client.admin_request import AdminError
from headrace.broker.log.log_validator import validate
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, iter_batches
from headrace.record_check import (
    COMPILED,
    IDS_FRAMING,
    KEY_ID,
    KEY_NO_ID,
    OK,
    VALUE_ID,
    VALUE_NO_ID,
    id_table_c,
    id_table_py,
    schema_ids,
    schema_ids_py,
)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
OTHER = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
NOW = 1_700_000_000_000


def framed(schema_id: int, body: bytes = b"\x02\x02a") -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


# the walk and the validator alone ------------------------------------------------------------


WALKS = [pytest.param((schema_ids_py, id_table_py), id="python")]
if COMPILED:
    WALKS.append(pytest.param((schema_ids, id_table_c), id="c"))


def run(fn, table, b, key_ids=None, value_ids=None, count=None):
    count = int.from_bytes(b[57:61], "big") if count is None else count
    return fn(
        bytes(b), 61, len(b), count,
        None if key_ids is None else table(key_ids),
        None if value_ids is None else table(value_ids),
    )


@pytest.mark.parametrize("impl", WALKS)
def test_the_walk_finds_each_kind_of_problem_with_its_index(impl):
    def walk(records, key_ids=None, value_ids=None):
        return run(*impl, bytes(build_batch(records)), key_ids, value_ids)

    good = [Record(key=framed(1), value=framed(2), timestamp=NOW) for _ in range(3)]
    assert walk(good, {1}, {2}) == (OK, -1, -1)
    assert walk(good, None, {2}) == (OK, -1, -1)
    assert walk(good, {7}, None) == (KEY_ID, 0, 1)
    nulls = [Record(key=None, value=None, timestamp=NOW)] * 2  # null keys and tombstones pass
    assert walk(nulls, {1}, {2}) == (OK, -1, -1)
    raw = good + [Record(key=framed(1), value=b"raw json", timestamp=NOW)]
    assert walk(raw, {1}, {2}) == (VALUE_NO_ID, 3, -1)
    short = good[:1] + [Record(key=b"\x00\x00", value=framed(2), timestamp=NOW)]
    assert walk(short, {1}, {2}) == (KEY_NO_ID, 1, -1)
    wrong_magic = [Record(key=None, value=b"\x01" + framed(2)[1:], timestamp=NOW)]
    assert walk(wrong_magic, None, {2}) == (VALUE_NO_ID, 0, -1)
    other = good[:2] + [Record(key=framed(1), value=framed(9), timestamp=NOW)]
    assert walk(other, {1}, {2}) == (VALUE_ID, 2, 9)
    assert walk([Record(key=None, value=framed(2**32 - 1), timestamp=NOW)], None, {2})[2] == 2**32 - 1
    many = set(range(0, 4000, 3))
    assert walk([Record(key=None, value=framed(2997), timestamp=NOW)], None, many)[0] == OK
    assert walk([Record(key=None, value=framed(2998), timestamp=NOW)], None, many)[0] == VALUE_ID
    b = bytearray(build_batch(good))
    assert run(*impl, b, {1}, {2}, count=4)[:2] == (IDS_FRAMING, 3)  # fewer records than said


def test_the_compiled_walk_agrees_with_the_reference_on_mutated_batches():
    if not COMPILED:
        pytest.skip("headrace._record_check was not built (no C compiler at install)")
    import random

    rng = random.Random(35)
    records = [
        Record(key=None if i == 2 else framed(i % 3), value=framed(10 + i % 4) if i % 5 else None,
               headers=[("h", b"x")] if i % 2 else [], timestamp=NOW + i)
        for i in range(12)
    ]
    answers = set()
    for n in range(1500):
        b = bytearray(build_batch(records))
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(61, len(b))
            b[i] = rng.randrange(256) if rng.random() < 0.5 else b[i] ^ (1 << rng.randrange(8))
        keys = {0, 1, 2} if rng.random() < 0.5 else ({0, 1} if rng.random() < 0.5 else None)
        values = {10, 11, 12} if rng.random() < 0.7 else None
        got = run(schema_ids, id_table_c, b, keys, values)
        assert got == run(schema_ids_py, id_table_py, b, keys, values), n
        answers.add(got[0])
    assert answers == {OK, KEY_NO_ID, KEY_ID, VALUE_NO_ID, VALUE_ID, IDS_FRAMING}


class FakeIds:
    def __init__(self, subjects: dict[str, set[int]], why: str | None = None):
        self.subjects, self.why = subjects, why
        self.asked = 0

    def unavailable(self):
        return self.why

    def allowed_ids(self, topic, part, strategy):
        assert strategy == "TopicNameStrategy"
        self.asked += 1
        return self.subjects.get(f"{topic}-{part}", set())

    def schema_known(self, schema_id):
        return any(schema_id in ids for ids in self.subjects.values())


class FakeTopic:
    def __init__(self, name, **configs):
        from headrace.broker.config.config import BrokerConfig
        from headrace.broker.log.topic import Topic

        self.topic = Topic(name, None, configs, BrokerConfig({}))  # type: ignore[arg-type]

    def __getattr__(self, name):
        return getattr(self.topic, name)


def check(topic, records, schemas, compression=0):
    b = memoryview(bytearray(build_batch(records, compression=compression)))
    return validate(b, list(iter_batches(b)), topic, NOW, schemas)


def test_validate_names_the_record_the_subject_and_the_reason():
    ids = FakeIds({"t-value": {2}, "u-value": {5}, "t-key": {1}})
    plain = FakeTopic("t").topic
    asks = FakeTopic("t", **{"confluent.value.schema.validation": True}).topic
    both = FakeTopic(
        "t",
        **{"confluent.value.schema.validation": True, "confluent.key.schema.validation": True},
    ).topic
    good = [Record(key=b"k", value=framed(2), timestamp=NOW)] * 3
    assert check(asks, good, ids) is None
    assert check(plain, [Record(key=None, value=b"raw", timestamp=NOW)], ids) is None
    assert check(plain, good, None) is None  # a topic that does not ask needs no registry
    assert ids.asked == 1  # (and asks nothing of it)
    r = check(asks, good + [Record(key=None, value=framed(5), timestamp=NOW)], ids)
    assert (r.error_code, r.record_index) == (ErrorCode.INVALID_RECORD, 3)
    assert "schema id 5 of its value is not registered under subject t-value" in r.message
    r = check(asks, good[:1] + [Record(key=None, value=framed(77), timestamp=NOW)], ids)
    assert r.record_index == 1 and "schema id 77 of its value is unknown" in r.message
    r = check(asks, [Record(key=None, value=b'{"a": 1}', timestamp=NOW)], ids)
    assert r.record_index == 0 and "does not start with a schema id" in r.message
    r = check(both, good, ids)  # b"k" is no schema id
    assert r.record_index == 0 and "its key" in r.message
    assert check(both, [Record(key=framed(1), value=framed(2), timestamp=NOW)], ids) is None
    # compressed batches are decompressed first
    r = check(asks, good + [Record(key=None, value=b"raw", timestamp=NOW)], ids, compression=1)
    assert r.record_index == 3
    assert check(asks, good, ids, compression=1) is None
    # no registry, or no view of it here: refused as a whole, saying why
    r = check(asks, good, None)
    assert r.record_index == -1 and "schema registry is off" in r.message
    r = check(asks, good, FakeIds({}, (ErrorCode.INVALID_RECORD, "no replica of _schemas here")))
    assert r.error_code == ErrorCode.INVALID_RECORD and "no replica of _schemas" in r.message
    r = check(asks, good, FakeIds({}, (ErrorCode.REQUEST_TIMED_OUT, "it is loading")))
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT and "loading" in r.message


# a real broker with the registry ---------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("registry-validation"),
        {"schema.registry.listeners": "http://127.0.0.1:0", "num.partitions": 1},
    ).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def client(broker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"})


def send(broker, topic, values, keys=None, **conf) -> list:
    """Produce ``values`` in one batch (a long linger); each delivery's error code or None."""
    got: list = [None] * len(values)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "message.timeout.ms": 10_000,
         "retries": 0, **conf}
    )
    for i, v in enumerate(values):
        def report(e, m, i=i):
            got[i] = e.code() if e else None
        producer.produce(topic, value=v, key=None if keys is None else keys[i], on_delivery=report)
    assert producer.flush(20) == 0
    return got


def end_offset(broker, topic) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_a_real_producer_is_refused_what_the_registry_does_not_know(broker, client):
    broker.create_topic("orders", confluent_value_schema_validation="true")
    broker.create_topic("loose")
    ctx = SerializationContext("orders", MessageField.VALUE)
    serialize = AvroSerializer(client, json.dumps(ORDER))
    good = [serialize({"id": i, "item": "x"}, ctx) for i in range(5)]
    assert send(broker, "orders", good) == [None] * 5
    assert end_offset(broker, "orders") == 5
    other_id = client.register_schema("elsewhere-value", Schema(json.dumps(OTHER), "AVRO"))
    assert other_id != int.from_bytes(good[0][1:5], "big")
    refused = [
        [b"raw bytes"],  # no wire format
        [framed(4242)],  # an id the registry does not have
        [framed(other_id)],  # the id of another subject's schema
    ]
    for bad in refused:
        # the bad record in the middle of a batch of good ones: the whole batch is refused
        assert send(broker, "orders", good[:2] + bad + good[2:]) == [KafkaError.INVALID_RECORD] * 6
    assert end_offset(broker, "orders") == 5
    # compressed batches are looked into
    assert send(broker, "orders", good, **{"compression.type": "gzip"}) == [None] * 5
    assert send(broker, "orders", good + [b"raw"], **{"compression.type": "lz4"}) == [
        KafkaError.INVALID_RECORD
    ] * 6
    assert end_offset(broker, "orders") == 10
    # a tombstone passes; a topic that does not ask takes anything
    assert send(broker, "orders", [None]) == [None]
    assert send(broker, "loose", [b"raw", framed(4242)]) == [None, None]


def test_the_record_index_and_message_reach_the_wire_and_keys_are_checked_too(broker, client):
    broker.create_topic(
        "keyed", confluent_key_schema_validation="true", confluent_value_schema_validation="false"
    )
    key_id = client.register_schema("keyed-key", Schema(json.dumps(OTHER), "AVRO"))
    value_id = client.register_schema("keyed-value", Schema(json.dumps(ORDER), "AVRO"))
    P = messages.ProduceRequest

    def produce(records):
        b = bytes(build_batch(records))
        request = P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name="keyed", partition_data=[P.PartitionProduceData(index=0, records=b)])])
        with WireClient(broker.port) as c:
            return c.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0]

    now = int(time.time() * 1000)
    ok = Record(key=framed(key_id), value=b"not checked", timestamp=now)
    assert produce([ok, ok]).error_code == ErrorCode.NONE
    answer = produce([ok, ok, Record(key=framed(value_id), value=None, timestamp=now)])
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [2]
    assert "not registered under subject keyed-key" in answer.error_message
    # soft-deleted versions still pass (a record may be retried after the delete)
    client.delete_subject("keyed-key")
    assert produce([ok]).error_code == ErrorCode.NONE
    client.delete_subject("keyed-key", permanent=True)
    assert produce([ok]).error_code == ErrorCode.INVALID_RECORD


def test_record_name_strategies(broker, client):
    from confluent_kafka.schema_registry import (
        record_subject_name_strategy,
        topic_record_subject_name_strategy,
    )

    broker.create_topic(
        "by-record",
        confluent_value_schema_validation="true",
        confluent_value_subject_name_strategy="io.confluent.kafka.serializers.subject.RecordNameStrategy",
    )
    broker.create_topic(
        "by-topic-record",
        confluent_value_schema_validation="true",
        confluent_value_subject_name_strategy="TopicRecordNameStrategy",
    )
    order = {"id": 1, "item": "x"}
    by_record = AvroSerializer(client, json.dumps(ORDER),
                               conf={"subject.name.strategy": record_subject_name_strategy})
    by_topic_record = AvroSerializer(client, json.dumps(ORDER),
                                     conf={"subject.name.strategy": topic_record_subject_name_strategy})
    for topic, serialize, subject in (
        ("by-record", by_record, "shop.Order"),
        ("by-topic-record", by_topic_record, "by-topic-record-shop.Order"),
    ):
        value = serialize(order, SerializationContext(topic, MessageField.VALUE))
        assert subject in client.get_subjects()
        assert send(broker, topic, [value]) == [None], topic
    # the Order schema under by-topic-record's subject does not make it good for by-record
    # through that subject only; OTHER is registered under a subject that is not its name
    other = client.register_schema("orders-other", Schema(json.dumps(OTHER), "AVRO"))
    for topic in ("by-record", "by-topic-record"):
        assert send(broker, topic, [framed(other)]) == [KafkaError.INVALID_RECORD], topic
    client.register_schema("Other", Schema(json.dumps(OTHER), "AVRO"))  # its record name
    assert send(broker, "by-record", [framed(other)]) == [None]
    assert send(broker, "by-topic-record", [framed(other)]) == [KafkaError.INVALID_RECORD]


def test_a_broker_without_the_registry_refuses_a_topic_that_asks(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        with pytest.raises(AdminError, match="needs the schema registry"):
            broker.create_topic("t", confluent_value_schema_validation="true")
        broker.create_topic("t", confluent_value_schema_validation="false")
        with WireClient(broker.port) as c:
            A = messages.AlterConfigsRequest
            r = c.request(ApiKey.ALTER_CONFIGS, 2, A(validate_only=False, resources=[
                A.AlterConfigsResource(resource_type=2, resource_name="t", configs=[
                    A.AlterableConfig(name="confluent.key.schema.validation", value="true")])]))
        assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG
        assert "schema.registry.listeners" in r.responses[0].error_message
