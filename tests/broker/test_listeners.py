"""Listeners: several at once, each answering with its own advertised address; every
misconfiguration refused at start-up with a message naming the setting."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafkawire import WireClient

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.settings import ConfigError
from headrace.broker.client.inter_broker import client_security
from headrace.broker.config.listeners import inter_broker, listeners
from headrace.broker.security.sasl import PLAIN_MODULE, SCRAM_MODULE
from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, messages


def serve(tmp_path, *overrides, timeout=30):
    args = [sys.executable, "-m", "headrace", "serve", "--data-dir", str(tmp_path / "data")]
    for item in overrides:
        args += ["--override", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


MAP = "listener.security.protocol.map"


@pytest.mark.parametrize(
    "overrides, setting, words",
    [
        # an unsupported protocol, for a listener or in the map
        ({"listeners": "GSSAPI://127.0.0.1:0"}, MAP, "no security protocol for listener GSSAPI"),
        ({"listeners": "X://127.0.0.1:0", MAP: "X:KERBEROS"}, MAP, "KERBEROS"),
        # a listener the map does not name
        ({"listeners": "INTERNAL://127.0.0.1:0"}, MAP, "INTERNAL"),
        # advertised or inter-broker names that are no listener
        (
            {"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "SSL://h:1"},
            "advertised.listeners",
            "SSL is not a listener",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "INTERNAL"},
            "inter.broker.listener.name",
            "INTERNAL is not a listener",
        ),
        # wildcard binds without an advertised address
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "listeners", "advertised.listeners"),
        ({"listeners": "PLAINTEXT://:9092"}, "listeners", "every interface"),
        ({"listeners": "PLAINTEXT://[::]:9092"}, "listeners", "advertised.listeners"),
        (
            {"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            "advertised.listeners",
            "advertised.listeners",
        ),
        # two listeners on one port, one name twice, a malformed entry
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.2:9092"},
            "listeners",
            "both use port 9092",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,plaintext://127.0.0.1:9093"},
            "listeners",
            "given twice",
        ),
        ({"listeners": "127.0.0.1:9092"}, "listeners", "NAME://host:port"),
        # a per-listener setting for a listener that does not exist
        (
            {"listener.name.ssl.ssl.client.auth": "required"},
            "listener.name.ssl.ssl.client.auth",
            "no listener SSL",
        ),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth", "sometimes"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "PEM"),
    ],
)
def test_misconfigured_listeners_are_refused(overrides, setting, words):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({k: str(v) for k, v in overrides.items()})
    assert setting in str(e.value) and words in str(e.value)


def test_headrace_serve_refuses_them_at_start_up(tmp_path):
    result = serve(tmp_path, "listeners=SSL://0.0.0.0:0")
    assert result.returncode == 2
    assert "listeners: listener SSL binds 0.0.0.0" in result.stderr
    assert "advertised.listeners" in result.stderr
    result = serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0")
    assert result.returncode == 2 and MAP in result.stderr and "SASL" in result.stderr


def test_a_port_already_taken_names_the_listener(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(
            tmp_path,
            f"listeners=PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:{port}",
            f"{MAP}=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        )
    assert result.returncode == 3
    assert f"listeners: cannot listen on OTHER://127.0.0.1:{port}" in result.stderr


def test_defaults_are_one_plaintext_listener_on_loopback():
    (only,) = listeners(BrokerConfig())
    assert (only.name, only.protocol, only.host, only.port) == ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    assert (only.advertised_host, only.advertised_port) == ("127.0.0.1", 9092)


def test_a_wildcard_bind_with_an_advertised_address_is_fine():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092,INTERNAL://:9093",
            "advertised.listeners": "PLAINTEXT://kafka.example:9092,INTERNAL://10.0.0.5:9093",
            MAP: "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "inter.broker.listener.name": "internal",
        }
    )
    plain, internal = listeners(config)
    assert (plain.advertised_host, internal.protocol, internal.advertised_host) == (
        "kafka.example",
        "SASL_SSL",
        "10.0.0.5",
    )


def test_the_inter_broker_listener_and_its_client_security():
    two = {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
           MAP: "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT"}
    config = BrokerConfig({**two, "security.inter.broker.protocol": "PLAINTEXT",
                           "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                           MAP: "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT"})
    assert inter_broker(config, listeners(config)).name == "PLAINTEXT"
    with pytest.raises(ConfigError, match="security.inter.broker.protocol: give it or"):
        BrokerConfig({**two, "inter.broker.listener.name": "INTERNAL",
                      "security.inter.broker.protocol": "SSL"})
    with pytest.raises(ConfigError, match="security.inter.broker.protocol: no listener named SSL"):
        BrokerConfig({**two, "security.inter.broker.protocol": "SSL"})
    sasl = {**two, "inter.broker.listener.name": "EXTERNAL", "sasl.enabled.mechanisms": "PLAIN"}
    config = BrokerConfig(sasl)  # Kafka's default mechanism, GSSAPI, is not spoken
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol: GSSAPI"):
        client_security(config, listeners(config))
    config = BrokerConfig({**sasl, "sasl.mechanism.inter.broker.protocol": "PLAIN",
                           "sasl.jaas.config": PLAIN_MODULE + ' required user_a="b";'})
    with pytest.raises(ConfigError, match='sasl.jaas.config: .* needs the brokers\' username='):
        client_security(config, listeners(config))
    config = BrokerConfig({
        **sasl, "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.external.scram-sha-512.sasl.jaas.config":
            SCRAM_MODULE + ' required username="broker" password="pw";',
    })
    security = client_security(config, listeners(config))
    assert (security.listener, security.mechanism, security.username, security.principal) == (
        "EXTERNAL", "SCRAM-SHA-512", "broker", "User:broker")


def test_each_listener_answers_with_its_own_advertised_address(tmp_path):
    """Metadata, DescribeCluster and FindCoordinator give the address of the listener the
    client came through (as Kafka does), whatever the other listeners advertise."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        MAP: "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "advertised.listeners": "EXTERNAL://localhost:0",
    }
    with BrokerProcess(tmp_path / "data", overrides) as broker:
        ports = broker.listener_ports
        assert set(ports) == {"PLAINTEXT", "EXTERNAL"} and ports["PLAINTEXT"] == broker.port
        expected = {"PLAINTEXT": "127.0.0.1", "EXTERNAL": "localhost"}
        for name, port in ports.items():
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            brokers = admin.list_topics(timeout=10).brokers
            assert {(b.host, b.port) for b in brokers.values()} == {(expected[name], port)}
            cluster = admin.describe_cluster().result(10)
            assert [(n.host, n.port) for n in cluster.nodes] == [(expected[name], port)]
            with WireClient(port) as c:
                r = c.request(ApiKey.FIND_COORDINATOR, 3, messages.FindCoordinatorRequest(key="g"))
                assert (r.error_code, r.host, r.port) == (0, expected[name], port)
            k = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
            try:  # kafka-python follows the advertised address
                assert k.list_topics() is not None
                (node,) = k._client.cluster.brokers()
                assert (node.host, node.port) == (expected[name], port)
            finally:
                k.close()
