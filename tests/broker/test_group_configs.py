"""Group configs (the GROUP config resource): Kafka 4.4's ``kafka-configs --entity-type groups``
sets, describes, lists and deletes them (consumer and share group configs, checked with Kafka's
messages); the consumer group coordinator honours a group's own session timeout and heartbeat
interval (the share group one in test_share_groups.py); they are the whole cluster's and
bounded. Also the
two other 4.x admin APIs of this step: DescribeTopicPartitions (``kafka-topics --describe``)
and ListConfigResources."""

from __future__ import annotations

import time

from kafkawire import WireClient
from test_cluster import bootstrap, cluster, wait_for  # noqa: F401
from test_features import KAFKA_4_4, java
from test_group_consumer_protocol import hb
from test_group_protocol import create_topic
from test_moves import _kafka_tool

from headrace.protocol import ApiKey, ErrorCode, messages

CONFIGS = "org.apache.kafka.tools.ConfigCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
IA = messages.IncrementalAlterConfigsRequest
DC = messages.DescribeConfigsRequest
DTP = messages.DescribeTopicPartitionsRequest
GROUP, TOPIC, BROKER = 32, 2, 4
SET, DELETE = 0, 1
# what a group without configs of its own is described with (source DEFAULT_CONFIG)
DEFAULTS = {
    "consumer.heartbeat.interval.ms": ("5000", 5), "consumer.session.timeout.ms": ("45000", 5),
    "share.auto.offset.reset": ("latest", 5), "share.delivery.count.limit": ("5", 5),
    "share.heartbeat.interval.ms": ("5000", 5), "share.isolation.level": ("read_uncommitted", 5),
    "share.partition.max.record.locks": ("2000", 5), "share.record.lock.duration.ms": ("30000", 5),
    "share.session.timeout.ms": ("45000", 5), "streams.heartbeat.interval.ms": ("5000", 5),
    "streams.initial.rebalance.delay.ms": ("3000", 5), "streams.num.standby.replicas": ("0", 5),
    "streams.session.timeout.ms": ("45000", 5),
    "errors.deadletterqueue.topic.name": ("", 5), "errors.deadletterqueue.copy.record.enable": ("false", 5)}
# bounds low enough for a test to see a session end
QUICK = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "100",
         "group.consumer.session.timeout.ms": "30000"}


def alter(port: int, group: str, **configs):
    """IncrementalAlterConfigs of ``group``: name=value sets, name=None deletes."""
    resource = IA.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        IA.AlterableConfig(name=n.replace("_", "."), config_operation=SET if v is not None else DELETE,
                           value=None if v is None else str(v))
        for n, v in configs.items()])
    with WireClient(port) as c:
        r = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IA(resources=[resource], validate_only=False))
    return r.responses[0].error_code, r.responses[0].error_message


def described(port: int, group: str) -> dict[str, tuple[str, int]]:
    with WireClient(port) as c:
        r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, DC(resources=[
            DC.DescribeConfigsResource(resource_type=GROUP, resource_name=group, configuration_keys=None)],
            include_synonyms=True, include_documentation=False))
    assert r.results[0].error_code == ErrorCode.NONE, r.results[0].error_message
    return {e.name: (e.value, e.config_source) for e in r.results[0].configs}


def configs_tool(brokers, *args: str):
    return _kafka_tool(CONFIGS, ["--bootstrap-server", bootstrap(brokers), "--entity-type", "groups", *args],
                       version=KAFKA_4_4)


@java
def test_kafka_configs_sets_describes_lists_and_deletes_group_configs(broker):
    b = [broker]
    done = configs_tool(b, "--entity-name", "orders", "--alter", "--add-config", "consumer.session.timeout.ms=50000")
    assert done.returncode == 0 and "Completed updating config for group orders." in done.stdout
    shown = configs_tool(b, "--entity-name", "orders", "--describe")
    assert "consumer.session.timeout.ms=50000" in shown.stdout
    assert "DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000" in shown.stdout
    listed = configs_tool(b, "--describe")  # every group with configs (ListConfigResources)
    assert "Dynamic configs for group orders are:" in listed.stdout
    refused = configs_tool(b, "--entity-name", "orders", "--alter", "--add-config", "consumer.session.timeout.ms=5")
    assert refused.returncode != 0
    assert "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive." in refused.stderr
    refused = configs_tool(b, "--entity-name", "orders", "--alter", "--add-config", "no.such.config=1")
    assert refused.returncode != 0 and "Unknown group config name: no.such.config" in refused.stderr
    assert described(broker.port, "orders")["consumer.session.timeout.ms"] == ("50000", 8)  # GROUP_CONFIG

    broker.restart()  # kept in the data directory
    assert described(broker.port, "orders")["consumer.session.timeout.ms"] == ("50000", 8)
    done = configs_tool(b, "--entity-name", "orders", "--alter", "--delete-config", "consumer.session.timeout.ms")
    assert done.returncode == 0
    assert described(broker.port, "orders") == DEFAULTS

    # share group configs: ints within the group.share.* bounds, and two strings
    done = configs_tool(b, "--entity-name", "orders", "--alter", "--add-config",
                        "share.record.lock.duration.ms=20000,share.auto.offset.reset=by_duration:PT1H30M,"
                        "share.isolation.level=read_committed")
    assert done.returncode == 0, done.stderr
    shown = configs_tool(b, "--entity-name", "orders", "--describe")
    assert "share.auto.offset.reset=by_duration:PT1H30M" in shown.stdout
    assert "share.record.lock.duration.ms=20000" in shown.stdout
    assert "DEFAULT_CONFIG:group.share.record.lock.duration.ms=30000" in shown.stdout
    for bad, message in [
        ("share.record.lock.duration.ms=90000",
         "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
        ("share.auto.offset.reset=none",
         "Invalid value none for configuration share.auto.offset.reset: Invalid value `none` for configuration"
         " share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format"
         " 'by_duration:<PnDTnHnMn.nS>'."),
        ("share.isolation.level=READ_COMMITTED",
         "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of:"
         " read_committed, read_uncommitted"),
    ]:
        refused = configs_tool(b, "--entity-name", "orders", "--alter", "--add-config", bad)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr


def test_the_coordinator_honours_a_groups_session_timeout_and_heartbeat_interval(broker_factory):
    broker = broker_factory(QUICK)
    assert alter(broker.port, "quick", consumer_session_timeout_ms=1500, consumer_heartbeat_interval_ms=200) == (0, None)
    assert alter(broker.port, "quick", consumer_session_timeout_ms=150)[0] == ErrorCode.INVALID_CONFIG  # <= heartbeat
    with WireClient(broker.port) as c:
        create_topic(c, "t", 2)
        quick = hb(c, "q", 0, ["t"], group="quick")
        slow = hb(c, "s", 0, ["t"], group="slow")
        assert quick.heartbeat_interval_ms == 200 and slow.heartbeat_interval_ms == 5000
        time.sleep(3)  # past the quick group's session of 1.5 s; the slow one's is 30 s

        def members(group):
            r = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, messages.ConsumerGroupDescribeRequest(group_ids=[group]))
            return [m.member_id for m in r.groups[0].members]

        assert members("quick") == [] and members("slow") == ["s"]
        # a change applies from the next heartbeat
        assert alter(broker.port, "slow", consumer_heartbeat_interval_ms=300) == (0, None)
        assert hb(c, "s", slow.member_epoch, group="slow").heartbeat_interval_ms == 300


def test_share_group_configs_are_checked_as_kafka_checks_them(broker):
    for name, value, message in [
        ("share.record.lock.duration.ms", 500,
         "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
        ("share.delivery.count.limit", 11, "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
        ("share.partition.max.record.locks", "x",
         "Invalid value x for configuration share.partition.max.record.locks: Not a number of type INT"),
        ("share.session.timeout.ms", 5000, "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
        ("share.auto.offset.reset", "by_duration:-PT1H", "Invalid value `by_duration:-PT1H`"),
        ("share.auto.offset.reset", "by_duration:", "by_duration:<PnDTnHnMn.nS>"),
        ("share.auto.offset.reset", "Earliest", "must be either 'earliest', 'latest'"),
        ("share.renew.acknowledge.enable", "true", "Unknown group config name: share.renew.acknowledge.enable"),
    ]:
        code, got = alter(broker.port, "g", **{name.replace(".", "_"): value})
        assert code == ErrorCode.INVALID_CONFIG and message in got, got
    assert alter(broker.port, "g", share_heartbeat_interval_ms=15000, share_session_timeout_ms=45000) == (0, None)
    code, got = alter(broker.port, "g", share_session_timeout_ms=None, share_heartbeat_interval_ms=None)
    assert code == 0
    for value in ("earliest", "latest", "by_duration:P1DT2.5S", "by_duration:PT0S"):
        assert alter(broker.port, "g", share_auto_offset_reset=value) == (0, None)
    assert described(broker.port, "g")["share.auto.offset.reset"] == ("by_duration:PT0S", 8)
    assert alter(broker.port, "g", share_auto_offset_reset=None) == (0, None)
    assert described(broker.port, "g") == DEFAULTS


def test_group_configs_values_are_typed():
    """What the share-partitions read: an int for an int config, a str for a string one."""
    from headrace.broker.config.config import BrokerConfig
    from headrace.broker.coordinator.group.group_configs import (
        SHARE_AUTO_OFFSET_RESET, SHARE_DELIVERY_COUNT_LIMIT, SHARE_ISOLATION_LEVEL, GroupConfigs, auto_offset_reset,
        duration_ms)

    configs = GroupConfigs(BrokerConfig({"group.share.delivery.count.limit": "7"}))
    assert configs.value("g", SHARE_DELIVERY_COUNT_LIMIT) == 7
    assert configs.value("g", SHARE_AUTO_OFFSET_RESET) == "latest"
    configs.replace({"g": {SHARE_DELIVERY_COUNT_LIMIT: "3", SHARE_ISOLATION_LEVEL: "read_committed"}})
    assert configs.value("g", SHARE_DELIVERY_COUNT_LIMIT) == 3
    assert configs.value("g", SHARE_ISOLATION_LEVEL) == "read_committed"
    assert configs.value("other", SHARE_ISOLATION_LEVEL) == "read_uncommitted"
    assert auto_offset_reset("by_duration:PT1H") == ("by_duration", 3_600_000)
    assert (duration_ms("P1DT0.5S"), duration_ms("PT-1M"), duration_ms("PT"), duration_ms("P")) == (
        86_400_500, -60_000, None, None)


def test_share_group_broker_settings_are_checked_at_start():
    import pytest

    from headrace.broker.config.config import BrokerConfig, ConfigError

    for settings, message in [
        ({"group.share.max.size": "0"}, "Invalid value 0 for configuration group.share.max.size: Value must be at least 1"),
        ({"group.share.max.size": "1001"}, "Value must be no more than 1000"),
        ({"group.share.session.timeout.ms": "1000"},
         "group.share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        ({"group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "1000",
          "group.share.min.heartbeat.interval.ms": "1000", "group.share.heartbeat.interval.ms": "1000"},
         "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
        ({"group.share.delivery.count.limit": "9", "group.share.max.delivery.count.limit": "8"},
         "group.share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ]:
        with pytest.raises(ConfigError) as refused:
            BrokerConfig(settings)
        assert message in str(refused.value)


def test_group_configs_are_bounded(broker_factory):
    broker = broker_factory({**QUICK, "group.config.max.groups": "2"})
    for group in ("a", "b"):
        assert alter(broker.port, group, consumer_heartbeat_interval_ms=1000) == (0, None)
    code, message = alter(broker.port, "c", consumer_heartbeat_interval_ms=1000)
    assert code == ErrorCode.INVALID_REQUEST and "group.config.max.groups" in message
    assert alter(broker.port, "a", consumer_heartbeat_interval_ms=None) == (0, None)  # the last one: a is gone
    assert alter(broker.port, "c", consumer_heartbeat_interval_ms=1000) == (0, None)
    code, message = alter(broker.port, "", consumer_heartbeat_interval_ms=1000)
    assert code == ErrorCode.INVALID_REQUEST and message == "Group name must not be empty"
    with WireClient(broker.port) as c:  # the legacy AlterConfigs does not take groups
        r = c.request(ApiKey.ALTER_CONFIGS, 2, messages.AlterConfigsRequest(resources=[
            messages.AlterConfigsRequest.AlterConfigsResource(resource_type=GROUP, resource_name="d", configs=[])],
            validate_only=False))
        assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST


def test_a_group_config_set_at_one_broker_applies_at_every_broker(cluster):
    brokers = cluster(2, **QUICK)
    assert alter(brokers[1].port, "g", consumer_session_timeout_ms=20000) == (0, None)
    wait_for(lambda: described(brokers[0].port, "g")["consumer.session.timeout.ms"] == ("20000", 8), 10,
             "the other broker applies it")


def test_list_config_resources(broker_factory):
    broker = broker_factory(QUICK)
    assert alter(broker.port, "g", consumer_heartbeat_interval_ms=1000) == (0, None)
    with WireClient(broker.port) as c:
        create_topic(c, "t", 1)
        r = c.request(ApiKey.LIST_CONFIG_RESOURCES, 1, messages.ListConfigResourcesRequest(resource_types=[]))
        assert r.error_code == 0
        got = {(x.resource_name, x.resource_type) for x in r.config_resources}
        assert got == {("g", GROUP), ("1", BROKER), ("t", TOPIC)}
        r = c.request(ApiKey.LIST_CONFIG_RESOURCES, 1, messages.ListConfigResourcesRequest(resource_types=[GROUP]))
        assert [(x.resource_name, x.resource_type) for x in r.config_resources] == [("g", GROUP)]
        r = c.request(ApiKey.LIST_CONFIG_RESOURCES, 1, messages.ListConfigResourcesRequest(resource_types=[1]))
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
        r = c.request(ApiKey.LIST_CONFIG_RESOURCES, 0, messages.ListConfigResourcesRequest())
        assert r.error_code == 0 and r.config_resources == []  # no client-metrics subscriptions


def describe_partitions(port, topics, limit=2000, cursor=None):
    request = DTP(topics=[DTP.TopicRequest(name=t) for t in topics], response_partition_limit=limit,
                  cursor=None if cursor is None else DTP.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    with WireClient(port) as c:
        return c.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, request)


def test_describe_topic_partitions_pages_by_cursor(broker):
    with WireClient(broker.port) as c:
        create_topic(c, "a", 3)
        create_topic(c, "b", 2)
    seen, cursor = [], None
    while True:  # every topic, two partitions a page
        r = describe_partitions(broker.port, [], limit=2, cursor=cursor)
        seen += [(t.name, p.partition_index, p.leader_id) for t in r.topics for p in t.partitions]
        if r.next_cursor is None:
            break
        cursor = (r.next_cursor.topic_name, r.next_cursor.partition_index)
    assert seen == [("a", 0, 1), ("a", 1, 1), ("a", 2, 1), ("b", 0, 1), ("b", 1, 1)]
    r = describe_partitions(broker.port, ["b", "nope", "a"], limit=100)
    assert [(t.name, t.error_code, len(t.partitions)) for t in r.topics] == [
        ("a", 0, 3), ("b", 0, 2), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)]
    assert r.next_cursor is None
    r = describe_partitions(broker.port, ["a"], cursor=("b", 0))  # a cursor on a topic not asked for
    assert [(t.name, t.error_code) for t in r.topics] == [("a", ErrorCode.INVALID_REQUEST)]


@java
def test_kafka_topics_describe_uses_describe_topic_partitions(broker):
    with WireClient(broker.port) as c:
        create_topic(c, "a", 3)
    shown = _kafka_tool(TOPICS, ["--bootstrap-server", broker.bootstrap, "--describe", "--topic", "a",
                                 "--partition-size-limit-per-response", "1"], version=KAFKA_4_4)
    assert shown.returncode == 0
    rows = [line.split() for line in shown.stdout.splitlines() if "Partition:" in line]
    assert [(r[3], r[5]) for r in rows] == [("0", "1"), ("1", "1"), ("2", "1")]


def test_streams_group_configs_are_checked_as_kafka_checks_them(broker):
    for name, value, message in [
        ("streams.session.timeout.ms", 1000, "streams.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
        ("streams.heartbeat.interval.ms", 20000,
         "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
        ("streams.num.standby.replicas", 3, "streams.num.standby.replicas must be less than or equal to 2"),
        ("streams.num.standby.replicas", -1,
         "Invalid value -1 for configuration streams.num.standby.replicas: Value must be at least 0"),
        ("streams.initial.rebalance.delay.ms", -5,
         "Invalid value -5 for configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
        ("streams.assignment.interval.ms", 0, "Unknown group config name: streams.assignment.interval.ms"),
    ]:
        code, got = alter(broker.port, "g", **{name.replace(".", "_"): value})
        assert code == ErrorCode.INVALID_CONFIG and message in got, got
    assert alter(broker.port, "g", streams_num_standby_replicas=2, streams_initial_rebalance_delay_ms=0) == (0, None)
    shown = described(broker.port, "g")
    assert shown["streams.num.standby.replicas"] == ("2", 8) and shown["streams.initial.rebalance.delay.ms"] == ("0", 8)
    assert alter(broker.port, "g", streams_num_standby_replicas=None, streams_initial_rebalance_delay_ms=None)[0] == 0
    assert described(broker.port, "g") == DEFAULTS
