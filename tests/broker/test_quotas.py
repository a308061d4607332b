"""Client quotas: Kafka's ``kafka-configs`` sets and describes them (AlterClientQuotas,
DescribeClientQuotas), they survive a restart, a producer over its byte rate is held to it
by throttling (throttle_time_ms, and the connection not read meanwhile), and the entity a
quota applies to is found in Kafka's order."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafkawire import WireClient
from test_moves import _kafka_tool

from headrace.broker.tools.process import BrokerProcess
from headrace.broker.config.config import BrokerConfig
from headrace.broker.security.quotas import DEFAULT, FETCH, PRODUCE, REQUEST, ClientQuotas, resolve
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

CONFIGS = "kafka.admin.ConfigCommand"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' user_alice="alice-secret" user_bob="bob-secret";'
)
java = pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")


def test_the_quota_of_a_client_is_found_in_kafkas_order():
    entries = {
        (None, DEFAULT, None): {PRODUCE: 8.0},
        (None, "app", None): {PRODUCE: 7.0},
        (DEFAULT, None, None): {PRODUCE: 6.0, FETCH: 60.0},
        (DEFAULT, DEFAULT, None): {PRODUCE: 5.0},
        (DEFAULT, "app", None): {PRODUCE: 4.0},
        ("alice", None, None): {PRODUCE: 3.0},
        ("alice", DEFAULT, None): {PRODUCE: 2.0},
        ("alice", "app", None): {PRODUCE: 1.0},
    }
    order = [("alice", "app"), ("alice", DEFAULT), ("alice", None), (DEFAULT, "app"), (DEFAULT, DEFAULT),
             (DEFAULT, None), (None, "app"), (None, DEFAULT)]
    for i, key in enumerate(order):
        quota, counted = resolve(entries, "alice", "app", PRODUCE)
        assert quota == i + 1
        # usage is counted per entity matched; a default part counts the client's own name
        assert counted == tuple(None if k is None else v for k, v in zip(key, ("alice", "app")))
        del entries[(*key, None)][PRODUCE]
    assert resolve(entries, "alice", "app", PRODUCE) is None
    assert resolve(entries, "bob", "x", FETCH) == (60.0, ("bob", None))  # each kind on its own
    assert resolve(entries, "bob", "x", REQUEST) is None


class Who:
    def __init__(self, user: str) -> None:
        self.user = user


def test_throttle_times_are_kafkas_for_a_burst_and_hold_the_rate_over_time():
    quotas = ClientQuotas(BrokerConfig({"quota.window.num": "11", "quota.window.size.seconds": "1"}))
    quotas.replace({("alice", None, None): {PRODUCE: 1000.0}})
    alice = Who("alice")
    # a new client may send 10 windows' worth at once (Kafka's minimum window of 10 s) ...
    assert quotas.throttle_ms(alice, "c", PRODUCE, 10_000, now=100.0) == 0
    # ... and past it, Kafka's (rate - quota) / quota x window: (15000/10 - 1000) / 1000 x 10 s
    assert quotas.throttle_ms(alice, "c", PRODUCE, 5_000, now=100.0) == 5000
    # however the bytes come, over time they are held to the quota
    sent, now = 0, 100.0
    while now < 200.0:
        now += quotas.throttle_ms(alice, "c", PRODUCE, 2_500, now) / 1000 + 0.01
        sent += 2_500
    assert abs(sent / 100.0 - 1000) < 100
    assert quotas.throttle_ms(Who("bob"), "c", PRODUCE, 10**9, now) == 0  # no quota for bob
    assert quotas.tracked() == 1


def test_a_fetch_over_the_quota_is_not_counted_unless_it_could_never_fit():
    quotas = ClientQuotas(BrokerConfig({"quota.window.num": "3", "quota.window.size.seconds": "1"}))
    quotas.replace({("alice", None, None): {FETCH: 1000.0}})
    alice = Who("alice")
    assert quotas.fetch_throttle_ms(alice, "c", 2_000, now=10.0) == (0, True)  # the allowance
    # over: throttled, not sent, and not counted: the same fetch fits once the throttle passed
    assert quotas.fetch_throttle_ms(alice, "c", 1_500, now=10.0) == (1500, False)
    assert quotas.fetch_throttle_ms(alice, "c", 1_500, now=11.5) == (0, True)
    # a response larger than the 2 s allowance would never fit: sent whole, with its throttle
    assert quotas.fetch_throttle_ms(alice, "c", 5_000, now=30.0) == (3000, True)
    ms, sent = quotas.fetch_throttle_ms(alice, "c", 1, now=30.0)  # counted: the next one waits
    assert ms >= 3000 and not sent


def quota_broker(tmp_path, **more) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            **more,
        },
    )


def user_conf(broker, user: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


@java
def test_kafka_configs_sets_and_describes_quotas_and_they_survive_a_restart(tmp_path):
    broker = quota_broker(tmp_path)
    with broker:
        b = ["--bootstrap-server", broker.bootstrap]
        done = _kafka_tool(CONFIGS, [*b, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                                     "--entity-type", "users", "--entity-name", "alice"])
        assert done.returncode == 0, done.stderr
        done = _kafka_tool(CONFIGS, [*b, "--alter", "--add-config", "request_percentage=50",
                                     "--entity-type", "clients", "--entity-default"])
        assert done.returncode == 0, done.stderr
        done = _kafka_tool(CONFIGS, [*b, "--alter", "--add-config", "producer_byte_rate=1024",
                                     "--entity-type", "users", "--entity-name", "bob", "--entity-type", "clients",
                                     "--entity-name", "bobs-app"])
        assert done.returncode == 0, done.stderr
        bad = _kafka_tool(CONFIGS, [*b, "--alter", "--add-config", "producer_byte_rate=-5",
                                    "--entity-type", "users", "--entity-name", "carol"])
        assert bad.returncode != 0
    with broker:  # read back after a restart
        b = ["--bootstrap-server", broker.bootstrap]
        shown = _kafka_tool(CONFIGS, [*b, "--describe", "--entity-type", "users", "--entity-name", "alice"])
        assert "producer_byte_rate=1048576.0" in shown.stdout and "consumer_byte_rate=2097152.0" in shown.stdout
        shown = _kafka_tool(CONFIGS, [*b, "--describe", "--entity-type", "clients", "--entity-default"])
        assert "request_percentage=50.0" in shown.stdout
        shown = _kafka_tool(CONFIGS, [*b, "--describe", "--entity-type", "users", "--entity-name", "bob",
                                      "--entity-type", "clients", "--entity-name", "bobs-app"])
        assert "producer_byte_rate=1024.0" in shown.stdout
        done = _kafka_tool(CONFIGS, [*b, "--alter", "--delete-config", "producer_byte_rate",
                                     "--entity-type", "users", "--entity-name", "alice"])
        assert done.returncode == 0, done.stderr
        shown = _kafka_tool(CONFIGS, [*b, "--describe", "--entity-type", "users", "--entity-name", "alice"])
        assert "producer_byte_rate" not in shown.stdout and "consumer_byte_rate=2097152.0" in shown.stdout


def set_quota(bootstrap_port: int, entity: list[tuple[str, str | None]], **values: float) -> None:
    A = messages.AlterClientQuotasRequest
    with WireClient(bootstrap_port) as client:
        answer = client.request(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            A(
                entries=[
                    A.EntryData(
                        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                        ops=[A.OpData(key=k, value=v, remove=False) for k, v in values.items()],
                    )
                ],
                validate_only=False,
            ),
        )
    assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]


def test_a_producer_byte_rate_quota_holds_a_producer_within_ten_percent(tmp_path):
    rate = 1024 * 1024
    with quota_broker(tmp_path, **{"quota.window.num": 4}) as broker:
        broker.create_topic("q", 1)
        set_quota(broker.port, [("user", "alice")], producer_byte_rate=rate)
        acked: list[tuple[float, int]] = []
        lock = threading.Lock()

        def delivered(err, msg):
            if err is None:
                with lock:
                    acked.append((time.monotonic(), len(msg.value())))

        producer = Producer({**user_conf(broker, "alice"), "linger.ms": 5, "batch.size": 65536,
                             "queue.buffering.max.kbytes": 4096})  # small batches: acks spread evenly
        value = b"v" * 10_000
        start = time.monotonic()
        while time.monotonic() - start < 14:
            try:
                producer.produce("q", value, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(30)
        # the steady state, after the first windows (a new client may burst at first)
        steady = [n for t, n in acked if start + 6 <= t < start + 14]
        measured = sum(steady) / 8
        print(f"quota {rate} B/s, measured {measured:.0f} B/s ({measured / rate:.3f})")
        assert abs(measured - rate) <= 0.10 * rate
        # another user is not held by alice's quota
        other = Producer(user_conf(broker, "bob"))
        t0 = time.monotonic()
        for _ in range(400):
            while True:
                try:
                    other.produce("q", value)
                    break
                except BufferError:
                    other.poll(0.05)
        assert other.flush(30) == 0
        assert 400 * len(value) / (time.monotonic() - t0) > 2 * rate


def test_a_throttled_client_gets_throttle_time_ms_and_is_not_read_meanwhile(tmp_path):
    with BrokerProcess(tmp_path / "data", {"quota.window.num": 2}) as broker:
        broker.create_topic("t", 1)
        set_quota(broker.port, [("client-id", None)], producer_byte_rate=20_000)  # every client
        P = messages.ProduceRequest
        batch = build_batch([Record(value=b"x" * 50_000)])
        request = P(
            acks=1,
            timeout_ms=5000,
            topic_data=[P.TopicProduceData(name="t", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
        )
        with WireClient(broker.port) as client:
            answer = client.request(ApiKey.PRODUCE, 9, request)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            # 50 kB against 20 kB/s, measured over at least 1 s: 30 kB/s over, 30/20 x 1 s
            assert 1400 <= answer.throttle_time_ms <= 1600
            throttle_s = answer.throttle_time_ms / 1000
            t0 = time.monotonic()
            client.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
                client_software_name="t", client_software_version="1"))
            assert time.monotonic() - t0 >= throttle_s * 0.9  # its next request waited
        with WireClient(broker.port) as other:  # a new connection is read at once
            t0 = time.monotonic()
            other.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
                client_software_name="t", client_software_version="1"))
            assert time.monotonic() - t0 < throttle_s


def test_a_throttled_fetch_is_sent_empty_and_the_records_come_after_the_throttle(tmp_path):
    """Kafka's throttled fetch: over consumer_byte_rate, the answer has the throttle time and
    no records (and its bytes are not counted); the same fetch after the throttle gets them."""
    with BrokerProcess(tmp_path / "data", {"quota.window.num": 2}) as broker:
        broker.create_topic("f", 1)
        P = messages.ProduceRequest
        with WireClient(broker.port) as client:
            for i in range(2):  # two batches of 15 kB
                batch = build_batch([Record(value=bytes([i]) * 15_000)])
                answer = client.request(ApiKey.PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[
                    P.TopicProduceData(name="f", partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
                assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        # 20 kB/s with 1 s of allowance: the first batch fits, the second not yet
        set_quota(broker.port, [("client-id", None)], consumer_byte_rate=20_000)
        F = messages.FetchRequest

        def fetch(offset):
            return F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                     topics=[F.FetchTopic(topic="f", partitions=[F.FetchPartition(
                         partition=0, fetch_offset=offset, partition_max_bytes=16_000)])])

        with WireClient(broker.port) as client:
            first = client.request(ApiKey.FETCH, 11, fetch(0))
            assert first.throttle_time_ms == 0
            assert len(first.responses[0].partitions[0].records) > 15_000
            throttled = client.request(ApiKey.FETCH, 11, fetch(1))
            assert throttled.throttle_time_ms > 0 and throttled.responses == []
            again = client.request(ApiKey.FETCH, 11, fetch(1))  # held until the throttle ends
            assert again.throttle_time_ms == 0
            records = again.responses[0].partitions[0].records
            assert bytes(records[:8]) == (1).to_bytes(8, "big") and b"\x01" * 15_000 in bytes(records)


def test_an_ip_quota_holds_the_connection_creation_rate_of_an_address(tmp_path):
    """kafka-configs --entity-type ips: connection_creation_rate through AlterClientQuotas and
    DescribeClientQuotas; connections from the address over it are closed unanswered, and the
    rate is paid back over time."""
    A = messages.AlterClientQuotasRequest
    D = messages.DescribeClientQuotasRequest
    with BrokerProcess(tmp_path / "data", {"quota.window.num": 2}) as broker:
        with WireClient(broker.port) as client:
            answer = client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, A(entries=[A.EntryData(
                entity=[A.EntityData(entity_type="ip", entity_name="127.0.0.1")],
                ops=[A.OpData(key="connection_creation_rate", value=1.0, remove=False)])], validate_only=False))
            assert answer.entries[0].error_code == ErrorCode.NONE
            shown = client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, D(
                components=[D.ComponentData(entity_type="ip", match_type=0, match="127.0.0.1")], strict=True))
            assert [(e.entity[0].entity_name, [(v.key, v.value) for v in e.values]) for e in shown.entries] == [
                ("127.0.0.1", [("connection_creation_rate", 1.0)])]
            # (this connection was admitted before the quota)
        answered = []
        for _ in range(12):  # at once: 1 s of allowance at 1/s and this one, then refused
            with WireClient(broker.port) as c:
                answered.append(fuzz_answers(c))
        assert answered[0] and not all(answered)
        time.sleep(2.5)  # paid back
        with WireClient(broker.port) as c:
            assert fuzz_answers(c)


def fuzz_answers(client) -> bool:
    try:
        client.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
    except (ConnectionError, OSError, EOFError):
        return False
    return True


def test_quota_requests_that_kafka_refuses_are_refused(tmp_path):
    A = messages.AlterClientQuotasRequest
    D = messages.DescribeClientQuotasRequest
    with BrokerProcess(tmp_path / "data", {"client.quota.max.entities": 2}) as broker, WireClient(broker.port) as client:
        def alter(entity, key="producer_byte_rate", value=1000.0):
            answer = client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, A(entries=[A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[A.OpData(key=key, value=value, remove=False)])], validate_only=False))
            return answer.entries[0].error_code

        assert alter([("user", "a")], key="nonsense") == ErrorCode.INVALID_REQUEST
        assert alter([("user", "a")], value=0) == ErrorCode.INVALID_REQUEST
        assert alter([("user", "a"), ("user", "b")]) == ErrorCode.INVALID_REQUEST
        assert alter([("ip", "10.0.0.1")]) == ErrorCode.INVALID_REQUEST  # not a key of ips
        assert alter([("ip", "ten")], key="connection_creation_rate") == ErrorCode.INVALID_REQUEST
        assert alter([("ip", None), ("user", "a")], key="connection_creation_rate") == ErrorCode.INVALID_REQUEST
        assert alter([("user", "a")], key="connection_creation_rate") == ErrorCode.INVALID_REQUEST
        assert alter([("user", "a")]) == ErrorCode.NONE
        assert alter([("user", "b")]) == ErrorCode.NONE
        assert alter([("user", "c")]) == ErrorCode.INVALID_REQUEST  # client.quota.max.entities
        answer = client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, D(
            components=[D.ComponentData(entity_type="user", match_type=2, match=None)], strict=True))
        assert sorted(e.entity[0].entity_name for e in answer.entries) == ["a", "b"]


def test_a_consumer_byte_rate_quota_holds_a_consumer(tmp_path):
    rate = 1024 * 1024
    with quota_broker(tmp_path, **{"quota.window.num": 2}) as broker:
        broker.create_topic("c", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        value = b"v" * 10_000
        for _ in range(700):  # 7 MB, written at full speed (no produce quota)
            producer.produce("c", value)
        assert producer.flush(30) == 0
        set_quota(broker.port, [("user", "alice")], consumer_byte_rate=rate)
        consumer = Consumer({**user_conf(broker, "alice"), "group.id": "g", "auto.offset.reset": "earliest",
                             "max.partition.fetch.bytes": 256 * 1024})
        consumer.subscribe(["c"])
        got, first, last = 0, None, None
        deadline = time.monotonic() + 60
        while got < 700 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                first = first or time.monotonic()
                last = time.monotonic()
                got += 1
        consumer.close()
        assert got == 700
        # 7 MB at 1 MiB/s, the first second's worth (quota.window.num - 1 windows) at once
        took = last - first
        print(f"consumed 7 MB in {took:.1f} s with a quota of {rate} B/s")
        assert took >= 0.9 * (7_000_000 - rate) / rate


def test_a_request_percentage_quota_throttles_a_busy_client(tmp_path):
    with BrokerProcess(tmp_path / "data", {"quota.window.num": 2}) as broker:
        set_quota(broker.port, [("client-id", "busy")], request_percentage=0.01)  # 0.1 ms a second
        M = messages.MetadataRequest
        throttles = []
        with WireClient(broker.port) as client:
            for _ in range(20):
                client.send(ApiKey.METADATA, 12, M(topics=None, allow_auto_topic_creation=False),
                            client_id="busy")
                throttles.append(client.receive(ApiKey.METADATA, 12)[1].throttle_time_ms)
                if throttles[-1]:
                    break
        assert throttles[-1] > 0
        with WireClient(broker.port) as client:  # another client id: no quota
            for _ in range(20):
                client.send(ApiKey.METADATA, 12, M(topics=None, allow_auto_topic_creation=False),
                            client_id="calm")
                assert client.receive(ApiKey.METADATA, 12)[1].throttle_time_ms == 0


def test_usage_is_tracked_for_a_bounded_number_of_entities():
    quotas = ClientQuotas(BrokerConfig({"client.quota.max.entities": "2"}))
    quotas.replace({(DEFAULT, None, None): {PRODUCE: 1000.0}})  # every user on their own
    for i in range(10):
        quotas.throttle_ms(Who(f"user{i}"), "c", PRODUCE, 100, now=float(i))
        assert quotas.tracked() <= 2
    assert quotas.tracked() == 2


def test_a_shared_document_is_bounded_and_a_refused_change_leaves_the_file(tmp_path):
    import asyncio

    from headrace.broker.cluster.documents import MAX_BYTES, DocumentTooLarge, FileDocument

    async def run():
        doc = FileDocument("quotas", tmp_path)
        await doc.change(lambda value: {"small": 1})
        with pytest.raises(DocumentTooLarge):
            await doc.change(lambda value: {"big": "x" * MAX_BYTES})
        return doc.load()

    assert asyncio.run(run()) == {"small": 1}
