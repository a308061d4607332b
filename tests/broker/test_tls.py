"""TLS listeners: real clients over SSL with mutual TLS, clients refused for the right
reasons, and every TLS misconfiguration refused at start-up naming its setting."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from tlsfiles import make_pki

from headrace.broker.tools.process import BrokerProcess
from headrace.broker.security.tls import certificate_principal, openssl_name
from headrace.protocol import ApiKey, RequestHeader, encode_request, encode_request_header, messages

MAP = "listener.security.protocol.map"
BIG = 200 * 1024  # records above 64 KiB are sent from the segment files (file chunks)


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki", password="key-secret")


def tls_settings(pki, **more) -> dict:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": pki.broker,
        "ssl.key.password": pki.password,
        "ssl.truststore.location": pki.ca,
        "listener.name.ssl.ssl.client.auth": "required",  # Kafka's per-listener prefix
        **more,
    }


def librdkafka(port, pki, cert=True, **more) -> dict:
    conf = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "socket.timeout.ms": 5000,
        **more,
    }
    if cert:
        conf["ssl.certificate.location"] = str(pki.client_cert)
        conf["ssl.key.location"] = str(pki.client_key)
    return conf


def values(n, size=BIG):
    return [bytes([i % 251]) * size for i in range(n)]


def test_confluent_kafka_and_kafka_python_over_mutual_tls(tmp_path, pki):
    with BrokerProcess(tmp_path / "data", tls_settings(pki)) as broker:
        port = broker.listener_ports["SSL"]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        described = admin.describe_configs([resource])[resource].result(30)
        password = described["ssl.key.password"]  # a password is flagged, never shown
        assert password.is_sensitive and password.value is None
        assert described["ssl.keystore.location"].value == str(pki.broker)
        conf = librdkafka(port, pki)
        # Metadata through the SSL listener gives the SSL listener's address
        brokers = AdminClient(conf).list_topics(timeout=10).brokers
        assert {(b.host, b.port) for b in brokers.values()} == {("127.0.0.1", port)}

        sent = values(20)
        producer = Producer({**conf, "acks": "all", "linger.ms": 5})
        for i, v in enumerate(sent):
            producer.produce("t", value=v, key=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0

        kp = KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SSL",
            ssl_cafile=str(pki.ca),
            ssl_certfile=str(pki.client_cert),
            ssl_keyfile=str(pki.client_key),
            acks="all",
        )
        more = values(10, BIG + 1)
        for v in more:
            kp.send("t", value=v, partition=0)
        kp.flush(30)
        kp.close()

        consumer = Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest",
                             "fetch.max.bytes": 8 << 20})
        consumer.assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        assert sorted(got) == sorted(sent + more)

        kc = KafkaConsumer(
            "t",
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SSL",
            ssl_cafile=str(pki.ca),
            ssl_certfile=str(pki.client_cert),
            ssl_keyfile=str(pki.client_key),
            auto_offset_reset="earliest",
            group_id="kp",
            consumer_timeout_ms=10_000,
        )
        read = [m.value for m in kc]
        kc.close()
        assert sorted(read) == sorted(sent + more)


def api_versions_frame() -> bytes:
    body = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "t")) + encode_request(
        ApiKey.API_VERSIONS, 3,
        messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    return struct.pack(">i", len(body)) + body


def answered(port, context: ssl.SSLContext) -> bool:
    """Whether a TLS client with ``context`` gets an ApiVersions answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(api_versions_frame())
                return len(s.recv(4)) == 4
    except (ssl.SSLError, ConnectionError, OSError):
        return False


def client_context(pki, cert=True, **attrs) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    for k, v in attrs.items():
        setattr(context, k, v)
    return context


def test_a_client_without_a_certificate_is_refused_when_required(tmp_path, pki):
    with BrokerProcess(tmp_path / "data", tls_settings(pki)) as broker:
        port = broker.listener_ports["SSL"]
        assert answered(port, client_context(pki))
        assert not answered(port, client_context(pki, cert=False))
        other = make_pki(tmp_path / "other", ca_name="another ca")  # a certificate from a CA
        stranger = ssl.create_default_context(cafile=str(pki.ca))  # the broker does not trust
        stranger.load_cert_chain(other.client_cert, other.client_key)
        assert not answered(port, stranger)
        admin = AdminClient(librdkafka(port, pki, cert=False))
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)
        # the plaintext listener beside it is unaffected
        assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)


def test_requested_client_auth_takes_clients_without_certificates(tmp_path, pki):
    settings = tls_settings(pki, **{"listener.name.ssl.ssl.client.auth": "requested"})
    with BrokerProcess(tmp_path / "data", settings) as broker:
        port = broker.listener_ports["SSL"]
        assert answered(port, client_context(pki, cert=False))
        assert answered(port, client_context(pki))
        other = make_pki(tmp_path / "other", ca_name="another ca")
        stranger = ssl.create_default_context(cafile=str(pki.ca))
        stranger.load_cert_chain(other.client_cert, other.client_key)
        assert not answered(port, stranger)  # given, so checked


def test_enabled_protocols_and_cipher_suites_are_enforced(tmp_path, pki):
    settings = tls_settings(
        pki,
        **{
            "listener.name.ssl.ssl.client.auth": "none",
            "ssl.enabled.protocols": "TLSv1.2",
            "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        },
    )
    tls12 = ssl.TLSVersion.TLSv1_2
    tls13 = ssl.TLSVersion.TLSv1_3
    with BrokerProcess(tmp_path / "data", settings) as broker:
        port = broker.listener_ports["SSL"]
        assert answered(port, client_context(pki, cert=False))
        assert not answered(port, client_context(pki, cert=False, minimum_version=tls13))
        suite = client_context(pki, cert=False, maximum_version=tls12)
        suite.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
        assert answered(port, suite)
        other = client_context(pki, cert=False, maximum_version=tls12)
        other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
        assert not answered(port, other)
    settings["ssl.enabled.protocols"] = "TLSv1.3"
    del settings["ssl.cipher.suites"]
    with BrokerProcess(tmp_path / "data", settings) as broker:
        port = broker.listener_ports["SSL"]
        assert answered(port, client_context(pki, cert=False))
        assert not answered(port, client_context(pki, cert=False, maximum_version=tls12))


def serve(tmp_path, settings: dict):
    args = [sys.executable, "-m", "headrace", "serve", "--data-dir", str(tmp_path / "data")]
    for k, v in settings.items():
        args += ["--override", f"{k}={v}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"ssl.keystore.location": ""}, "ssl.keystore.location: listener SSL (SSL) needs"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location: no file"),
        ({"ssl.key.password": "wrong"}, "ssl.key.password: cannot decrypt"),
        ({"ssl.key.password": ""}, "ssl.key.password: cannot decrypt"),
        ({"ssl.truststore.location": ""}, "ssl.truststore.location: ssl.client.auth=required"),
        ({"ssl.truststore.location": "/nonexistent.pem"}, "ssl.truststore.location: cannot"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols: TLSv1.1"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "ssl.cipher.suites: TLS_AES_128_GCM"),
        ({"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "ssl.cipher.suites: TLS_NO_SUCH_SUITE"),
        (
            {"listener.name.ssl.ssl.keystore.location": "/nonexistent.pem"},
            "listener.name.ssl.ssl.keystore.location: no file",
        ),
    ],
)
def test_tls_misconfigurations_stop_the_start_naming_the_setting(tmp_path, pki, change, words):
    result = serve(tmp_path, {**tls_settings(pki), **change})
    assert result.returncode == 3, result.stderr
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_the_certificate_subject_is_the_principal(pki):
    decoded = ssl._ssl._test_decode_cert(str(pki.client_cert))  # what getpeercert() gives
    assert certificate_principal(decoded) == "User:" + pki.client_subject
    assert certificate_principal({}) is None


def test_iana_suite_names_become_openssl_names():
    assert openssl_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == (
        "ECDHE-ECDSA-CHACHA20-POLY1305"
    )
    assert openssl_name("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert openssl_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"


def test_closed_tls_connections_are_freed_without_the_collector(tmp_path, pki):
    """A TLS transport keeps sizeable buffers; the broker raises the collector's thresholds,
    so a closed connection must not wait for a collection to be freed (the fuzzer's long run
    saw the broker grow ~26 KiB per TLS connection, 256 KiB under plain asyncio)."""
    import gc

    from headrace import Broker
    from headrace.pipeline.connection import Connection

    broker = Broker(tls_settings(pki, **{"listener.name.ssl.ssl.client.auth": "none"}),
                    data_dir=tmp_path / "data").start()
    try:
        port = broker._server.bound["SSL"]
        context = ssl.create_default_context(cafile=str(pki.ca))
        gc.collect()
        gc.disable()
        try:
            for _ in range(50):
                assert answered(port, context)
            time.sleep(0.5)  # the broker's side of the last ones closes
            alive = [o for o in gc.get_objects() if isinstance(o, Connection) and o.closed]
        finally:
            gc.enable()
        assert len(alive) < 10
    finally:
        broker.stop()
