"""Kafka's own configuration as Kafka users have it: Kafka's unmodified single-node
``server.properties`` starts Headrace (settings that change nothing here accepted with one
warning), Java's properties syntax, unknown names and bad log levels refused clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.settings import ConfigError
from headrace.broker.tools.process import BrokerProcess

KAFKA_PROPERTIES = Path(__file__).parent / "kafka_config" / "server.properties"
WARNING = "settings of Apache Kafka that change nothing in Headrace, ignored: "


def serve(*args: str) -> subprocess.CompletedProcess:
    """``headrace serve`` with arguments that make it exit at once (a bad setting)."""
    return subprocess.run(
        [sys.executable, "-m", "headrace", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_kafka_server_properties_starts_headrace(tmp_path):
    # the file as Kafka ships it; only where to listen and the data directory are moved
    # (its :9092 and /tmp/kraft-combined-logs), through overrides as Kafka's own --override
    broker = BrokerProcess(
        tmp_path / "data",
        {"advertised.listeners": "PLAINTEXT://127.0.0.1:0"},
        args=["--config", str(KAFKA_PROPERTIES)],
    )
    with broker:
        warnings = [line for line in broker.lines if WARNING in line]
        assert len(warnings) == 1, broker.lines
        listed = warnings[0].split(WARNING, 1)[1].split(", ")
        assert listed == sorted(listed)
        assert {
            "num.network.threads",
            "socket.receive.buffer.bytes",
            "process.roles",
            "controller.quorum.voters",
            "controller.listener.names",
        } <= set(listed)
        # settings with a meaning here now (a cluster's internal topics) are taken, not ignored
        assert not {
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
            "socket.send.buffer.bytes",
        } & set(listed)
        import confluent_kafka as ck
        from confluent_kafka.admin import AdminClient, ConfigResource

        producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
        producer.produce("from-kafka-config", b"value")
        assert producer.flush(30) == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        meta = admin.list_topics(timeout=10)
        assert list(meta.brokers) == [1]  # node.id=1 from the file
        assert list(meta.brokers.values())[0].port == broker.port  # no CONTROLLER listener
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([resource])[resource].result(10)
        assert configs["num.io.threads"].value == "8"  # the file's settings took effect
        assert configs["socket.send.buffer.bytes"].value == "102400"
        assert configs["log.retention.ms"].value == str(168 * 3600 * 1000)  # log.retention.hours


def test_kafka_units_and_precedence():
    config = BrokerConfig({"log.retention.hours": "2", "log.roll.hours": "1"})
    assert config["log.retention.ms"] == 2 * 3600 * 1000
    assert config["log.roll.ms"] == 3600 * 1000
    config = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert config["log.retention.ms"] == 3 * 60 * 1000  # minutes win over hours, as in Kafka
    config = BrokerConfig({"log.retention.minutes": "3", "log.retention.ms": "5"})
    assert config["log.retention.ms"] == 5
    assert BrokerConfig({"log.retention.hours": "-1"})["log.retention.ms"] == -1
    assert BrokerConfig({"num.network.threads": "3"}).ignored == ["num.network.threads"]
    assert BrokerConfig({"num.io.threads": "3"}).ignored == []  # Headrace's own: not ignored


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"num.netwrk.threads": "3"}, "unknown setting 'num.netwrk.threads'"),
        ({"authorizer.class.name": "X"}, "authorizer.class.name: 'X' is not an authorizer"),
        (
            {"process.roles": "broker", "controller.quorum.voters": "1@a:9093,2@b:9093"},
            "controller.quorum.voters",
        ),
        ({"process.roles": "controller"}, "Headrace runs brokers only"),
        ({"process.roles": "broker", "node.id": "2", "controller.quorum.voters": "1@c:9093"},
         "several nodes"),
        ({"log.retention.hours": "week"}, "log.retention.hours"),
        ({"log.flush.threads": "0"}, r"log.flush.threads: 0 is not in \[1, 64\]"),
        ({"log.flush.threads": "100000"}, r"log.flush.threads: 100000 is not in \[1, 64\]"),
        ({"iceberg.round.timeout.ms": "999"}, r"iceberg.round.timeout.ms: 999 is not in \[1000, "),
        ({"iceberg.worker.nice": "-1"}, r"iceberg.worker.nice: -1 is not in \[0, 19\]"),
        ({"iceberg.worker.nice": "20"}, r"iceberg.worker.nice: 20 is not in \[0, 19\]"),
    ],
)
def test_refused_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(settings)


def test_unknown_name_in_a_kafka_file_stops_the_start(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(KAFKA_PROPERTIES.read_text() + "\nnum.netwrk.threads=3\n")
    done = serve("--config", str(props), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    assert "unknown setting 'num.netwrk.threads'" in done.stderr
    assert "Traceback" not in done.stderr


def test_java_properties_syntax(tmp_path):
    props = tmp_path / "server.properties"
    props.write_bytes(
        b"# comment\n"
        b"! another comment\n"
        b"num.partitions : 4\n"  # ':' separator with spaces
        b"node.id 7\n"  # whitespace separator
        b"log.dirs=/data/one,\\\n"  # a continuation line
        b"          /data/two\n"
        b"broker.rack=r\\u00e4ck\\tA\n"  # escapes
        b"  num.io.threads=2\n"
        b"num.io.threads=3\n"  # a later line wins
        b"delete.topic.enable\n"  # a key alone: the empty value...
    )
    with pytest.raises(ConfigError, match="delete.topic.enable: '' is not a valid boolean"):
        BrokerConfig.load(props, [])
    props.write_bytes(props.read_bytes().replace(b"delete.topic.enable\n", b""))
    config = BrokerConfig.load(props, [])
    assert config["num.partitions"] == 4
    assert config["node.id"] == 7
    assert config["log.dirs"] == "/data/one,/data/two"
    assert config["broker.rack"] == "r\u00e4ck\tA"
    assert config["num.io.threads"] == 3
    props.write_bytes(b"broker.rack=\\u12\n")
    with pytest.raises(ConfigError, match="properties file"):
        BrokerConfig.load(props, [])


def test_bad_log_level_is_a_clear_error():
    done = serve("--log-level", "loud")
    assert done.returncode == 2
    assert "--log-level: 'loud' is not a log level" in done.stderr
    assert "Traceback" not in done.stderr


def test_log4j_level_names_are_accepted(tmp_path):
    with BrokerProcess(tmp_path / "data", args=["--log-level", "warn"]) as broker:
        assert broker.alive
        assert not any(" INFO " in line for line in broker.lines)  # WARN: no info lines
