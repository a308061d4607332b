"""Topics as Iceberg tables, read by real engines: pyiceberg (its scan) and DuckDB (over the
Arrow table pyiceberg scans: DuckDB's own iceberg extension is downloaded from the internet at
first use, which this test does not assume). The rows are exactly what a read_committed
consumer gets (partition, offset, key, value, headers); an aborted transaction's records are
absent; values in Confluent's wire format become the columns of their Avro, JSON or Protobuf
schema, and a newer compatible version of it adds columns; a kill -9 during a load loses and
duplicates nothing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

pyiceberg = pytest.importorskip("pyiceberg")
duckdb = pytest.importorskip("duckdb")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from headrace.broker.tools.process import BrokerProcess  # noqa: E402

INTERVAL_MS = 300
SETTINGS = {
    "iceberg.enabled": "true",
    "iceberg.commit.interval.ms": INTERVAL_MS,
    "num.partitions": 2,
}


def catalog(data_dir):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "headrace",
        uri=f"sqlite:///{data_dir}/iceberg/catalog.db",
        warehouse=(data_dir / "iceberg" / "warehouse").as_uri(),
    )


def table_rows(data_dir, topic: str):
    """The table's rows as an Arrow table (None: no table yet)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    if not (data_dir / "iceberg" / "catalog.db").exists():
        return None
    try:
        return catalog(data_dir).load_table(f"kafka.{topic}").scan().to_arrow()
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def wait_rows(data_dir, topic: str, count: int, timeout: float = 60):
    deadline = time.monotonic() + timeout
    rows = None
    while time.monotonic() < deadline:
        rows = table_rows(data_dir, topic)
        if rows is not None and rows.num_rows >= count:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"{topic}: {rows.num_rows if rows is not None else 0} rows, not {count}")


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """(partition, offset, key, value) of everything a read_committed consumer gets."""
    ends = {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    for p in range(partitions):
        _, ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    done = {p for p, e in ends.items() if e == 0}
    deadline = time.monotonic() + 30
    while len(done) < partitions and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            for p in range(partitions):  # (stopped by the last stable offset / aborted tail)
                pos = consumer.position([TopicPartition(topic, p)])[0].offset
                if pos >= ends[p]:
                    done.add(p)
            continue
        if m.error():
            continue
        got.append((m.partition(), m.offset(), m.key(), m.value()))
        if m.offset() + 1 >= ends[m.partition()]:
            done.add(m.partition())
    consumer.close()
    return sorted(got)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("iceberg"),
        {**SETTINGS, "schema.registry.listeners": "http://127.0.0.1:0"},
    ).start()
    yield b
    b.stop()


def test_key_value_rows_are_what_read_committed_consumers_get(broker):
    topic = "kv"
    broker.create_topic(topic, partitions=2, iceberg_mode="key_value")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(200):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % 2,
            headers=[("h", f"x{i}".encode())],
        )
    assert producer.flush(30) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "iceberg-t"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(50):
        txn.produce(topic, key=b"aborted", value=f"a{i}".encode(), partition=i % 2)
    txn.abort_transaction(30)
    txn.begin_transaction()
    for i in range(20):
        txn.produce(topic, key=b"committed", value=f"c{i}".encode(), partition=i % 2)
    txn.commit_transaction(30)
    for i in range(10):
        producer.produce(topic, key=b"after", value=f"z{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    expected = read_committed(broker.bootstrap, topic, 2)
    assert len(expected) == 230
    rows = wait_rows(broker.data_dir, topic, 230)
    time.sleep(3 * INTERVAL_MS / 1000)  # (nothing more comes: no duplicate, no aborted row)
    rows = table_rows(broker.data_dir, topic)
    got = sorted(
        zip(
            rows.column("partition").to_pylist(),
            rows.column("offset").to_pylist(),
            rows.column("key").to_pylist(),
            rows.column("value").to_pylist(),
        )
    )
    assert got == expected
    assert all(k != b"aborted" for _, _, k, _ in got)
    headers = {r["value"]: r["headers"] for r in rows.select(["value", "headers"]).to_pylist()}
    assert headers[b"v7"] == [{"key": "h", "value": b"x7"}]
    # the table's offsets: where each partition's next row starts
    table = catalog(broker.data_dir).load_table(f"kafka.{topic}")
    ends = {p: max(o for q, o, _, _ in expected if q == p) for p in (0, 1)}
    for p in (0, 1):
        assert int(table.properties[f"headrace.next-offset.{p}"]) >= ends[p] + 1
    assert "headrace.offsets" in table.current_snapshot().summary.additional_properties
    # DuckDB over what pyiceberg scans
    arrow = rows  # noqa: F841 (DuckDB finds it by name)
    counted = duckdb.sql(
        'select count(*), count(distinct (partition, "offset")),'
        " sum(case when key = 'aborted'::blob then 1 else 0 end) from arrow"
    ).fetchall()
    assert counted == [(230, 230, 0)]


def schema_topic(broker, topic: str):
    """A topic of one partition whose values carry schema ids, made into a table by their
    schemas: (the registry's client, the values' serialization context, a producer)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker.create_topic(topic, partitions=1, iceberg_mode="value_schema_id_prefix")
    url = f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    return client, ctx, Producer({"bootstrap.servers": broker.bootstrap})


AVRO_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
AVRO_V2 = {
    **AVRO_V1,
    "fields": [*AVRO_V1["fields"], {"name": "quantity", "type": "int", "default": 1}],
}


def test_avro_values_become_columns_and_a_new_version_adds_one(broker):
    from confluent_kafka.schema_registry.avro import AvroSerializer

    topic = "orders"
    client, ctx, producer = schema_topic(broker, topic)
    v1 = AvroSerializer(client, json.dumps(AVRO_V1))
    for i in range(5):
        producer.produce(topic, value=v1({"id": i, "item": f"i{i}"}, ctx), partition=0)
    producer.produce(topic, value=b"not in the wire format", partition=0)
    assert producer.flush(30) == 0
    wait_rows(broker.data_dir, topic, 6)
    v2 = AvroSerializer(client, json.dumps(AVRO_V2))
    for i in range(5, 8):
        producer.produce(
            topic, value=v2({"id": i, "item": f"i{i}", "quantity": i}, ctx), partition=0
        )
    assert producer.flush(30) == 0
    rows = wait_rows(broker.data_dir, topic, 9)
    table = catalog(broker.data_dir).load_table(f"kafka.{topic}")
    assert len(table.schemas()) >= 2  # a new schema version; the old files stay
    by_offset = {r["offset"]: r for r in rows.to_pylist()}
    assert by_offset[0]["value"] == {"id": 0, "item": "i0", "quantity": None}
    assert by_offset[5]["value"] is None and by_offset[5]["value_raw"] == b"not in the wire format"
    assert by_offset[8]["value"] == {"id": 7, "item": "i7", "quantity": 7}
    ids = {r["schema_id"] for r in rows.to_pylist() if r["schema_id"] is not None}
    assert len(ids) == 2


def test_a_kill_during_a_load_loses_and_duplicates_no_row(tmp_path):
    """The broker is killed (SIGKILL) while a producer (acks=all) writes and the translator
    commits; after the restart the table holds exactly what read_committed consumers get:
    every acknowledged record, once."""
    topic = "load"
    b = BrokerProcess(tmp_path / "b", {**SETTINGS, "iceberg.commit.interval.ms": 100}).start()
    acked: set[tuple[int, int]] = set()
    try:
        b.create_topic(topic, partitions=2, iceberg_mode="key_value")
        for round_ in range(2):
            stop = threading.Event()

            def produce(round_=round_, stop=stop) -> None:
                p = Producer(
                    {
                        "bootstrap.servers": b.bootstrap,
                        "acks": "all",
                        "linger.ms": 2,
                        "message.timeout.ms": 5000,
                    }
                )

                def done(err, msg) -> None:
                    if err is None:
                        acked.add((msg.partition(), msg.offset()))

                i = 0
                while not stop.is_set():
                    try:
                        p.produce(
                            topic, key=f"{round_}-{i}".encode(), value=b"x" * 100, on_delivery=done
                        )
                    except BufferError:
                        p.poll(0.05)
                    i += 1
                    if i % 100 == 0:
                        p.poll(0)
                        time.sleep(0.005)
                p.flush(10)

            t = threading.Thread(target=produce)
            t.start()
            time.sleep(1.0)
            b.kill()
            stop.set()
            t.join()
            b.start()
        expected = read_committed(b.bootstrap, topic, 2)
        rows = wait_rows(b.data_dir, topic, len(expected))
        time.sleep(0.5)
        rows = table_rows(b.data_dir, topic)
        got = sorted(
            zip(
                rows.column("partition").to_pylist(),
                rows.column("offset").to_pylist(),
                rows.column("key").to_pylist(),
                rows.column("value").to_pylist(),
            )
        )
        assert len(got) == len(set((p, o) for p, o, _, _ in got)), "duplicate rows"
        assert got == expected
        assert acked <= {(p, o) for p, o, _, _ in got}
        assert len(acked) > 200
    finally:
        b.kill()


def produce_while_failing(broker, topic: str, count: int) -> dict:
    """``count`` records produced (acks=all) in under 5 s while the topic's rounds fail; then
    the broker's /metrics once the topic has failed twice and is marked failing."""
    from tests.broker.test_metrics import scrape, value

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    started = time.monotonic()
    for i in range(count):
        producer.produce(topic, value=b"%d" % i)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        samples = scrape(broker.metrics_port)
        if value(samples, "headrace_iceberg_errors_total", topic=topic) >= 2:
            break
        time.sleep(0.1)
    assert value(samples, "headrace_iceberg_failing", topic=topic) == 1
    return samples


def test_a_failing_catalog_holds_back_no_produce_and_is_caught_up_later(tmp_path):
    """The catalog cannot be opened (its folder is a file): produce goes on as before, the
    topic's errors are counted and it is marked failing on /metrics; once the catalog can be
    opened, the table catches up with every record."""

    import headrace
    from tests.broker.test_metrics import scrape, value

    blocker = tmp_path / "catalog"
    blocker.write_text("not a folder")
    settings = {
        **SETTINGS,
        "metrics.port": 0,
        "iceberg.commit.interval.ms": 200,
        "iceberg.retry.backoff.max.ms": 500,
        "iceberg.catalog.uri": f"sqlite:///{blocker}/catalog.db",
        "iceberg.catalog.warehouse": str(tmp_path / "warehouse"),
    }
    with headrace.Broker(settings, data_dir=tmp_path / "data") as broker:
        broker.create_topic("held", partitions=1, iceberg_mode="key_value")
        samples = produce_while_failing(broker, "held", 100)
        assert value(samples, "headrace_iceberg_lag_seconds", topic="held") > 0
        blocker.unlink()  # the catalog can be made now
        from pyiceberg.catalog.sql import SqlCatalog

        deadline = time.monotonic() + 30
        count = 0
        while time.monotonic() < deadline and count < 100:
            time.sleep(0.3)
            if (blocker / "catalog.db").exists():
                try:
                    cat = SqlCatalog(
                        "headrace",
                        uri=f"sqlite:///{blocker}/catalog.db",
                        warehouse=(tmp_path / "warehouse").as_uri(),
                    )
                    count = cat.load_table("kafka.held").scan().to_arrow().num_rows
                except Exception:
                    count = 0
        assert count == 100
        samples = scrape(broker.metrics_port)
        assert value(samples, "headrace_iceberg_failing", topic="held") == 0
        assert value(samples, "headrace_iceberg_rows_total", topic="held") == 100
        assert value(samples, "headrace_iceberg_lag_seconds", topic="held") == 0


EVENT_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event",
    "type": "object",
    "properties": {
        "kind": {"type": "string"},
        "at": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {},
    },
    "required": ["kind"],
}


def test_json_schema_values_become_columns(broker):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    topic = "events"
    client, ctx, producer = schema_topic(broker, topic)
    serialize = JSONSerializer(json.dumps(EVENT_JSON), client)
    producer.produce(topic, value=serialize({"kind": "click", "at": 5, "tags": ["a"]}, ctx))
    producer.produce(topic, value=serialize({"kind": "view", "extra": {"x": 1}}, ctx))
    assert producer.flush(30) == 0
    rows = wait_rows(broker.data_dir, topic, 2).to_pylist()
    values = [r["value"] for r in sorted(rows, key=lambda r: r["offset"])]
    assert values == [
        {"kind": "click", "at": 5, "tags": ["a"], "extra": None},
        {"kind": "view", "at": None, "tags": None, "extra": '{"x":1}'},
    ]


PAYMENT_V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Payment {
  int64 id = 1;
  Status status = 2;
  repeated Line lines = 3;
  google.protobuf.Timestamp at = 4;
  map<string, string> tags = 5;
  message Line { string sku = 1; uint64 cents = 2; }
  enum Status { NEW = 0; PAID = 1; }
}
"""
PAYMENT_V2 = PAYMENT_V1.replace("  message Line", "  string note = 6;\n  message Line")


def payment_class(text: str):
    """A message class of ``text`` as protoc would make it (a pool of its own per version)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    from headrace.broker.registry.protobuf_text import to_descriptor

    pool = descriptor_pool.DescriptorPool()
    known = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(known)
    pool.Add(known)
    pool.Add(to_descriptor(text, "payment.proto"))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Payment"))


def test_protobuf_values_become_columns_and_a_new_version_adds_one(broker):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    topic = "payments"
    client, ctx, producer = schema_topic(broker, topic)
    v1_class = payment_class(PAYMENT_V1)
    v1 = ProtobufSerializer(v1_class, client)
    for i in range(3):
        payment = v1_class(id=i, status=i % 2, tags={"k": f"t{i}"})
        payment.lines.add(sku=f"s{i}", cents=2**64 - 1 - i)
        payment.at.seconds = 1_767_225_600 + i
        producer.produce(topic, value=v1(payment, ctx), partition=0)
    framed = v1(v1_class(id=9), ctx)
    producer.produce(
        topic, value=framed[:6] + b"\xff\xff", partition=0
    )  # a body that does not read
    assert producer.flush(30) == 0
    wait_rows(broker.data_dir, topic, 4)
    v2_class = payment_class(PAYMENT_V2)
    v2 = ProtobufSerializer(v2_class, client)
    producer.produce(topic, value=v2(v2_class(id=5, note="second"), ctx), partition=0)
    assert producer.flush(30) == 0
    rows = wait_rows(broker.data_dir, topic, 5)
    table = catalog(broker.data_dir).load_table(f"kafka.{topic}")
    assert len(table.schemas()) >= 2  # the new version's column; the old files stay
    value_type = table.schema().find_field("value").field_type
    types = {f.name: str(f.field_type) for f in value_type.fields}
    assert types == {
        "id": "long",
        "status": "string",  # (an enum: its value's name)
        "lines": types["lines"],
        "at": "timestamptz",
        "tags": "map<string, string>",
        "note": "string",  # (the new version's field)
    }
    assert (
        types["lines"].startswith("list<struct<")
        and "cents: optional decimal(20, 0)" in types["lines"]
    )
    by_offset = {r["offset"]: r for r in rows.to_pylist()}
    first = by_offset[1]["value"]
    assert first["id"] == 1 and first["status"] == "PAID" and first["note"] is None
    assert first["lines"] == [{"sku": "s1", "cents": 2**64 - 2}] and first["tags"] == [("k", "t1")]
    assert first["at"].timestamp() == 1_767_225_601
    assert by_offset[3]["value"] is None and by_offset[3]["value_raw"] == framed[:6] + b"\xff\xff"
    last = by_offset[4]["value"]
    assert (
        last["id"] == 5 and last["note"] == "second" and last["lines"] == [] and last["at"] is None
    )
    ids = {r["schema_id"] for r in rows.to_pylist() if r["schema_id"] is not None}
    assert len(ids) == 2


def test_a_topic_made_again_under_its_name_is_added_from_its_start(broker):
    from confluent_kafka.admin import AdminClient

    topic = "again"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    broker.create_topic(topic, partitions=1, iceberg_mode="key_value")
    for i in range(5):
        producer.produce(topic, value=b"old %d" % i)
    assert producer.flush(30) == 0
    wait_rows(broker.data_dir, topic, 5)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # (the deletion finishes a moment after its answer)
        try:
            broker.create_topic(topic, partitions=1, iceberg_mode="key_value")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for i in range(3):
        producer.produce(topic, value=b"new %d" % i)
    assert producer.flush(30) == 0
    rows = wait_rows(broker.data_dir, topic, 8)
    values = sorted(rows.column("value").to_pylist())
    assert values == sorted([b"old %d" % i for i in range(5)] + [b"new %d" % i for i in range(3)])
    table = catalog(broker.data_dir).load_table(f"kafka.{topic}")
    assert table.properties["headrace.next-offset.0"] == "3"


def test_old_snapshots_are_expired_and_the_rows_stay(tmp_path, monkeypatch):
    import headrace
    from headrace.broker.iceberg import translator

    monkeypatch.setattr(translator, "EXPIRE_EVERY_S", 0.0)  # (decided on the event loop)
    settings = {**SETTINGS, "iceberg.commit.interval.ms": 100, "iceberg.snapshot.retention.ms": 1}
    with headrace.Broker(settings, data_dir=tmp_path) as broker:
        broker.create_topic("expiring", partitions=1, iceberg_mode="key_value")
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(4):
            producer.produce("expiring", value=b"%d" % i)
            assert producer.flush(30) == 0
            wait_rows(tmp_path, "expiring", i + 1)
        table = catalog(tmp_path).load_table("kafka.expiring")
        assert len(table.snapshots()) <= 2  # (the newest, and at most one since the last expiry)
        assert table.properties["headrace.next-offset.0"] == "4"
        assert sorted(table.scan().to_arrow().column("value").to_pylist()) == [
            b"0",
            b"1",
            b"2",
            b"3",
        ]
        metadata = list(
            (tmp_path / "iceberg" / "warehouse" / "kafka" / "expiring").rglob("*.metadata.json")
        )
        assert metadata


def test_a_compacted_topic_as_upserts_holds_the_latest_record_of_each_key(broker):
    topic = "profiles"
    broker.create_topic(
        topic,
        partitions=1,
        iceberg_mode="key_value",
        cleanup_policy="compact",
        iceberg_upsert="true",
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")]:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    wait_rows(broker.data_dir, topic, 3)
    for key, value in [(b"b", None), (b"c", b"2"), (b"d", b"1")]:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        table = catalog(broker.data_dir).load_table(f"kafka.{topic}")
        if table.properties.get("headrace.next-offset.0") == "7":
            break
        time.sleep(0.2)
    rows = table.scan().to_arrow()
    got = sorted(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist()))
    assert got == [(b"a", b"2"), (b"c", b"2"), (b"d", b"1")]
