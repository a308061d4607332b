"""SASL listeners: real clients with PLAIN and SCRAM, Kafka's state machine on the wire
(requests before authentication, failures, the small frame cap, re-authentication and its
expiry), and SCRAM credentials managed with AlterUserScramCredentials and stored salted."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafkawire import WireClient
from scramp import ScramClient
from tlsfiles import make_pki

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch

MAP = "listener.security.protocol.map"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret"'
    ' user_admin="admin-secret" user_alice="alice-secret";'
)
HS, AU = messages.SaslHandshakeRequest, messages.SaslAuthenticateRequest


def sasl_broker(tmp_path, **more) -> BrokerProcess:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        **more,
    }
    return BrokerProcess(tmp_path / "data", settings)


def add_scram_user(bootstrap, user, password, mechanism=ScramMechanism.SCRAM_SHA_512):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), password.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)


def round_trip(conf: dict, kafka_python: dict, topic: str, n: int = 50) -> None:
    """confluent-kafka and kafka-python each produce ``n`` records and read all back."""
    producer = Producer({**conf, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=b"ck-%d" % i, partition=0)
    assert producer.flush(30) == 0
    kp = KafkaProducer(**kafka_python, acks="all")
    for i in range(n):
        kp.send(topic, value=b"kp-%d" % i, partition=0)
    kp.flush(30)
    kp.close()
    expected = {b"ck-%d" % i for i in range(n)} | {b"kp-%d" % i for i in range(n)}
    consumer = Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = set()
    deadline = time.monotonic() + 30
    while got != expected and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.add(m.value())
    consumer.close()
    assert got == expected
    kc = KafkaConsumer(topic, **kafka_python, group_id="kp", auto_offset_reset="earliest",
                       consumer_timeout_ms=10_000)
    read = {m.value for m in kc}
    kc.close()
    assert read == expected


def test_plain_over_sasl_plaintext_with_confluent_kafka_and_kafka_python(tmp_path):
    with sasl_broker(tmp_path) as broker:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        kafka_python = dict(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password="alice-secret",
        )
        round_trip(conf, kafka_python, "plain")
        with pytest.raises(KafkaException):
            AdminClient({**conf, "sasl.password": "wrong"}).list_topics(timeout=5)


def test_scram_sha_512_over_sasl_ssl_with_confluent_kafka_and_kafka_python(tmp_path):
    pki = make_pki(tmp_path / "pki")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": pki.broker,
    }
    with BrokerProcess(tmp_path / "data", settings) as broker:
        add_scram_user(broker.bootstrap, "carol", "carol-secret")
        port = broker.listener_ports["SASL_SSL"]
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "carol",
            "sasl.password": "carol-secret",
        }
        kafka_python = dict(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SASL_SSL",
            ssl_cafile=str(pki.ca),
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="carol",
            sasl_plain_password="carol-secret",
        )
        round_trip(conf, kafka_python, "scram")
        with pytest.raises(KafkaException):
            AdminClient({**conf, "sasl.password": "wrong"}).list_topics(timeout=5)
        with pytest.raises(KafkaException):  # a mechanism the listener does not offer
            AdminClient({**conf, "sasl.mechanism": "SCRAM-SHA-256"}).list_topics(timeout=5)


# the wire ------------------------------------------------------------------------------------


def handshake(c, mechanism="PLAIN"):
    return c.request(ApiKey.SASL_HANDSHAKE, 1, HS(mechanism=mechanism))


def plain(c, user, password, version=2):
    handshake(c)
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return c.request(ApiKey.SASL_AUTHENTICATE, version, AU(auth_bytes=token))


def metadata(c):
    return c.request(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))


def api_versions(c):
    return c.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
        client_software_name="wire", client_software_version="1"))


def test_wrong_passwords_and_unknown_users_fail_alike_after_a_delay(tmp_path):
    with sasl_broker(tmp_path) as broker:
        add_scram_user(broker.bootstrap, "carol", "carol-secret", ScramMechanism.SCRAM_SHA_256)
        port = broker.listener_ports["SASL_PLAINTEXT"]
        messages_seen = set()
        for user, password in (("alice", "wrong"), ("mallory", "whatever")):
            with WireClient(port) as c:
                started = time.monotonic()
                r = plain(c, user, password)
                assert time.monotonic() - started >= 0.1  # connection.failed.authentication.delay.ms
                assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                messages_seen.add(r.error_message)
                assert c.closed_by_peer()
        assert len(messages_seen) == 1 and "mallory" not in messages_seen.pop()
        with WireClient(port) as c:
            assert plain(c, "alice", "alice-secret").error_code == ErrorCode.NONE
            assert metadata(c).brokers

        # SCRAM: an unknown user gets a salt and iterations too and fails at the proof, with
        # the message a known user with a wrong password gets
        seen = []
        for user, password in (("carol", "wrong"), ("mallory", "whatever"), ("mallory", "x")):
            with WireClient(port) as c:
                assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.NONE
                client = ScramClient(["SCRAM-SHA-256"], user, password)
                first = c.request(ApiKey.SASL_AUTHENTICATE, 2,
                                  AU(auth_bytes=client.get_client_first().encode()))
                assert first.error_code == ErrorCode.NONE
                server_first = first.auth_bytes.decode()
                client.set_server_first(server_first)
                final = c.request(ApiKey.SASL_AUTHENTICATE, 2,
                                  AU(auth_bytes=client.get_client_final().encode()))
                assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                seen.append((final.error_message, server_first.split(",")[1]))  # s=<salt>
                assert c.closed_by_peer()
        assert len({m for m, _ in seen}) == 1
        assert seen[1][1] == seen[2][1]  # the same made-up salt for the same unknown user
        with WireClient(port) as c:  # and the right password works
            handshake(c, "SCRAM-SHA-256")
            client = ScramClient(["SCRAM-SHA-256"], "carol", "carol-secret")
            r = c.request(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=client.get_client_first().encode()))
            client.set_server_first(r.auth_bytes.decode())
            r = c.request(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=client.get_client_final().encode()))
            assert r.error_code == ErrorCode.NONE
            client.set_server_final(r.auth_bytes.decode())  # the server proved it knows the key
            assert metadata(c).brokers


def bare(c, token: bytes) -> bytes:
    """A SASL token as a bare frame (after SaslHandshake v0); the broker's bare answer."""
    c.send_raw(struct.pack(">i", len(token)) + token)
    return c.read_frame()


def test_handshake_v0_carries_tokens_in_bare_frames(tmp_path):
    """SaslHandshake v0 (before SaslAuthenticate existed): tokens and answers are bare frames;
    a failure closes the connection without an answer. ApiVersions offers versions 0-1
    (librdkafka decides from version 0 whether the broker speaks SASL at all)."""
    with sasl_broker(tmp_path) as broker:
        add_scram_user(broker.bootstrap, "carol", "carol-secret")
        port = broker.listener_ports["SASL_PLAINTEXT"]
        with WireClient(port) as c:
            offered = {k.api_key: k for k in api_versions(c).api_keys}[ApiKey.SASL_HANDSHAKE]
            assert (offered.min_version, offered.max_version) == (0, 1)
            r = c.request(ApiKey.SASL_HANDSHAKE, 0, HS(mechanism="PLAIN"))
            assert r.error_code == ErrorCode.NONE
            assert bare(c, b"\0alice\0alice-secret") == b""
            assert metadata(c).brokers  # requests with headers again, authenticated
        with WireClient(port) as c:
            assert c.request(ApiKey.SASL_HANDSHAKE, 0, HS(mechanism="SCRAM-SHA-512")).error_code == 0
            client = ScramClient(["SCRAM-SHA-512"], "carol", "carol-secret")
            client.set_server_first(bare(c, client.get_client_first().encode()).decode())
            client.set_server_final(bare(c, client.get_client_final().encode()).decode())
            assert metadata(c).brokers
        with WireClient(port) as c:  # a wrong password: closed after the delay, no answer
            c.request(ApiKey.SASL_HANDSHAKE, 0, HS(mechanism="PLAIN"))
            started = time.monotonic()
            c.send_raw(struct.pack(">i", 13) + b"\0alice\0wrong!")
            assert c.closed_by_peer()
            assert time.monotonic() - started >= 0.1
        with WireClient(port) as c:  # re-authentication needs v1
            c.request(ApiKey.SASL_HANDSHAKE, 0, HS(mechanism="PLAIN"))
            bare(c, b"\0alice\0alice-secret")
            c.send(ApiKey.SASL_HANDSHAKE, 0, HS(mechanism="PLAIN"))
            assert c.closed_by_peer()


def test_requests_before_authentication_close_the_connection(tmp_path):
    with sasl_broker(tmp_path) as broker:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        with WireClient(port) as c:  # anything but ApiVersions/SaslHandshake first
            c.send(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))
            assert c.closed_by_peer()
        with WireClient(port) as c:  # ApiVersions is answered, then the same
            assert api_versions(c).error_code == ErrorCode.NONE
            c.send(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))
            assert c.closed_by_peer()
        with WireClient(port) as c:  # after the handshake, only SaslAuthenticate
            assert handshake(c).error_code == ErrorCode.NONE
            c.send(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
                client_software_name="wire", client_software_version="1"))
            assert c.closed_by_peer()
        with WireClient(port) as c:  # SaslAuthenticate without a handshake
            c.send(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=b"\0alice\0alice-secret"))
            assert c.closed_by_peer()
        with WireClient(port) as c:  # a mechanism that is not enabled
            r = handshake(c, "GSSAPI")
            assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            assert sorted(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            assert c.closed_by_peer()
        with WireClient(port) as c:  # requests pipelined behind the handshake wait their turn
            c.send(ApiKey.SASL_HANDSHAKE, 1, HS(mechanism="PLAIN"))
            c.send(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=b"\0alice\0alice-secret"))
            c.send(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))
            assert c.receive(ApiKey.SASL_HANDSHAKE, 1)[1].error_code == ErrorCode.NONE
            assert c.receive(ApiKey.SASL_AUTHENTICATE, 2)[1].error_code == ErrorCode.NONE
            assert c.receive(ApiKey.METADATA, 12)[1].brokers
        # a listener without SASL answers SASL requests with ILLEGAL_SASL_STATE
        with WireClient(broker.port) as c:
            assert handshake(c).error_code == ErrorCode.ILLEGAL_SASL_STATE
            assert metadata(c).brokers


def produce_frame_of(c, size: int):
    """A Produce request of about ``size`` bytes."""
    P = messages.ProduceRequest
    batch = build_batch([Record(key=None, value=os.urandom(size))])
    c.send(ApiKey.PRODUCE, 9, P(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        P.TopicProduceData(name="big", partition_data=[
            P.PartitionProduceData(index=0, records=batch)])]))


def test_frames_stay_small_until_authenticated(tmp_path):
    with sasl_broker(tmp_path, **{"message.max.bytes": str(2 << 20)}) as broker:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        with WireClient(port) as c:
            assert api_versions(c).error_code == ErrorCode.NONE
            c.send_raw(struct.pack(">i", 600 * 1024) + b"\0" * 1024)  # announced, over 512 KiB
            assert c.closed_by_peer()
        with WireClient(port) as c:
            handshake(c)
            c.send_raw(struct.pack(">i", 600 * 1024) + b"\0" * 1024)  # during the exchange
            assert c.closed_by_peer()
        with WireClient(port) as c:
            assert plain(c, "alice", "alice-secret").error_code == ErrorCode.NONE
            M = messages.MetadataRequest
            c.request(ApiKey.METADATA, 12, M(topics=[M.MetadataRequestTopic(name="big")],
                                             allow_auto_topic_creation=True))
            produce_frame_of(c, 900 * 1024)  # once authenticated, the full size applies
            r = c.receive(ApiKey.PRODUCE, 9)[1]
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def test_a_session_that_is_not_renewed_in_time_is_closed(tmp_path):
    with sasl_broker(tmp_path, **{"connections.max.reauth.ms": "1000"}) as broker:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        with WireClient(port) as c:
            r = plain(c, "alice", "alice-secret")
            assert (r.error_code, r.session_lifetime_ms) == (ErrorCode.NONE, 1000)
            assert metadata(c).brokers
            time.sleep(1.2)
            c.send(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))
            assert c.closed_by_peer()
        with WireClient(port) as c:  # re-authenticated in time: served past the first lifetime
            assert plain(c, "alice", "alice-secret").error_code == ErrorCode.NONE
            time.sleep(0.6)
            r = plain(c, "alice", "alice-secret")
            assert (r.error_code, r.session_lifetime_ms) == (ErrorCode.NONE, 1000)
            time.sleep(0.6)
            assert metadata(c).brokers
        with WireClient(port) as c:  # re-authentication may not change the principal
            assert plain(c, "alice", "alice-secret").error_code == ErrorCode.NONE
            r = plain(c, "admin", "admin-secret")
            assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert "Cannot change principals" in r.error_message
            assert c.closed_by_peer()
        # librdkafka re-authenticates on its own (KIP-368) and keeps producing
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        expired = sum("expired without re-authentication" in line for line in broker.lines)
        assert expired == 1  # the first connection above
        producer = Producer({**conf, "acks": "all", "linger.ms": 0})
        errors = []
        end = time.monotonic() + 3.5
        sent = 0
        while time.monotonic() < end:
            producer.produce("reauth", value=b"%d" % sent, on_delivery=lambda e, m: e and errors.append(e))
            sent += 1
            producer.flush(10)
            time.sleep(0.05)
        assert producer.flush(10) == 0 and not errors and sent > 30
        # it renewed its session rather than being closed and reconnecting
        assert sum("expired without re-authentication" in line for line in broker.lines) == 1


# SCRAM credentials ---------------------------------------------------------------------------


def test_scram_credentials_are_managed_and_stored_salted(tmp_path):
    A = messages.AlterUserScramCredentialsRequest
    D = messages.DescribeUserScramCredentialsRequest
    with sasl_broker(tmp_path) as broker:
        add_scram_user(broker.bootstrap, "carol", "carol-secret")
        add_scram_user(broker.bootstrap, "carol", "carol-256", ScramMechanism.SCRAM_SHA_256)
        with WireClient(broker.port) as c:
            r = c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, D(users=None))
            (carol,) = r.results
            assert sorted((i.mechanism, i.iterations) for i in carol.credential_infos) == [
                (1, 8192), (2, 8192)]
            r = c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, D(users=[
                D.UserName(name="nobody"), D.UserName(name="carol"), D.UserName(name="carol")]))
            assert [(x.user, x.error_code) for x in r.results] == [
                ("nobody", ErrorCode.RESOURCE_NOT_FOUND), ("carol", ErrorCode.DUPLICATE_RESOURCE)]

            def upsert(name, mechanism=1, iterations=4096, salted=32, salt=16):
                return A.ScramCredentialUpsertion(name=name, mechanism=mechanism,
                                                  iterations=iterations, salt=b"s" * salt,
                                                  salted_password=b"p" * salted)
            r = c.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, A(
                deletions=[A.ScramCredentialDeletion(name="nobody", mechanism=1)],
                upsertions=[upsert("few", iterations=100), upsert("many", iterations=20000),
                            upsert("odd", mechanism=9), upsert(""), upsert("short", salted=5),
                            upsert("twice"), upsert("twice"), upsert("fine"),
                            upsert("salt11", salt=11)]))  # scramp could never use it
            assert [(x.user, x.error_code) for x in r.results] == [
                ("nobody", ErrorCode.RESOURCE_NOT_FOUND),
                ("few", ErrorCode.UNACCEPTABLE_CREDENTIAL),
                ("many", ErrorCode.UNACCEPTABLE_CREDENTIAL),
                ("odd", ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                ("", ErrorCode.UNACCEPTABLE_CREDENTIAL),
                ("short", ErrorCode.UNACCEPTABLE_CREDENTIAL),
                ("twice", ErrorCode.DUPLICATE_RESOURCE),
                ("fine", ErrorCode.NONE),
                ("salt11", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ]
        path = tmp_path / "data" / "scram-credentials.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        text = path.read_text()
        assert "carol-secret" not in text and "carol-256" not in text
        stored = json.loads(text)["users"]
        assert sorted(stored) == ["carol", "fine"]
        assert set(stored["carol"]["SCRAM-SHA-512"]) == {"salt", "stored_key", "server_key",
                                                         "iterations"}
        broker.restart()  # kept across restarts
        port = broker.listener_ports["SASL_PLAINTEXT"]
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
                "sasl.password": "carol-secret"}
        assert AdminClient(conf).list_topics(timeout=10).brokers
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
        for f in admin.alter_user_scram_credentials([deletion]).values():
            f.result(30)
        with pytest.raises(KafkaException):
            AdminClient(conf).list_topics(timeout=5)


def test_sasl_misconfigurations_stop_the_start(tmp_path):
    def start(**settings):
        args = ["serve", "--data-dir", str(tmp_path / "data")]
        for k, v in settings.items():
            args += ["--override", f"{k}={v}"]
        import sys
        return subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True,
                              text=True, timeout=30)

    listener = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    r = start(**listener, **{"sasl.enabled.mechanisms": "GSSAPI"})
    assert r.returncode == 3 and "sasl.enabled.mechanisms: GSSAPI" in r.stderr
    r = start(**listener, **{"sasl.enabled.mechanisms": "PLAIN"})
    assert r.returncode == 3 and "plain.sasl.jaas.config" in r.stderr
    r = start(**listener, **{"sasl.enabled.mechanisms": "PLAIN",
                             "sasl.jaas.config": 'x.Y required user_a="b";'})
    assert r.returncode == 3 and "sasl.jaas.config: PLAIN needs" in r.stderr
    r = start(**{"listeners": "SASL_SSL://127.0.0.1:0"})
    assert r.returncode == 3 and "ssl.keystore.location" in r.stderr


@pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None
    or os.environ.get("HEADRACE_COMPAT") == "0",
    reason="Kafka's tools need Java and Maven (and the compatibility suite on)",
)
def test_kafka_configs_adds_and_deletes_a_scram_user(tmp_path):
    from bench import apache_kafka

    def configs(bootstrap, *args):
        cmd = ["java", *apache_kafka.TOOL_JVM_FLAGS,
               *apache_kafka.log_flags(apache_kafka.KAFKA_VERSION, tool=True),
               "-cp", apache_kafka.classpath(), "kafka.admin.ConfigCommand",
               "--bootstrap-server", bootstrap, *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    with sasl_broker(tmp_path) as broker:
        out = configs(broker.bootstrap, "--alter", "--add-config",
                      "SCRAM-SHA-256=[iterations=8192,password=alice-scram]",
                      "--entity-type", "users", "--entity-name", "alice")
        assert "Completed updating config for user alice" in out
        port = broker.listener_ports["SASL_PLAINTEXT"]
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                "sasl.password": "alice-scram"}
        assert AdminClient(conf).list_topics(timeout=10).brokers
        configs(broker.bootstrap, "--alter", "--delete-config", "SCRAM-SHA-256",
                "--entity-type", "users", "--entity-name", "alice")
        with pytest.raises(KafkaException):
            AdminClient(conf).list_topics(timeout=5)
