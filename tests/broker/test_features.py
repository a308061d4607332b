"""Feature versions (KIP-584): ApiVersions lists the supported and finalized levels, Kafka 4.4's
``kafka-features`` describes, upgrades, downgrades and disables them, the levels are the whole
cluster's (one broker changes them, every broker answers with them, restarts keep them), and the
group coordinator honours ``group.version``."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from confluent_kafka import Consumer, KafkaError
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, wait_for  # noqa: F401
from test_moves import _kafka_tool

from headrace.protocol import ApiKey, ErrorCode, messages

FEATURES = "org.apache.kafka.tools.FeatureCommand"
KAFKA_4_4 = "4.4.0"
UF = messages.UpdateFeaturesRequest
FINAL = {  # a new cluster's
    "group.version": (1, 1), "share.version": (2, 2), "streams.version": (1, 1), "transaction.version": (2, 2)}
ONLY_TV = {"share.version": (2, 2), "streams.version": (1, 1), "transaction.version": (2, 2)}  # group.version 0
java = pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")


def api_versions(port: int, version: int = 4):
    with WireClient(port) as c:
        r = c.request(ApiKey.API_VERSIONS, version, messages.ApiVersionsRequest(
            client_software_name="wire-test", client_software_version="1"))
    assert r.error_code == ErrorCode.NONE
    return (
        {f.name: (f.min_version, f.max_version) for f in r.supported_features},
        {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features},
        r.finalized_features_epoch,
    )


def update(port: int, version: int, level: int, upgrade_type: int = 1, validate_only: bool = False,
           allow_downgrade: bool = False, feature: str = "group.version"):
    item = UF.FeatureUpdateKey(feature=feature, max_version_level=level, allow_downgrade=allow_downgrade,
                               upgrade_type=upgrade_type)
    with WireClient(port) as c:
        return c.request(ApiKey.UPDATE_FEATURES, version,
                         UF(timeout_ms=10000, feature_updates=[item], validate_only=validate_only))


def features_tool(brokers, *args: str):
    return _kafka_tool(FEATURES, ["--bootstrap-server", bootstrap(brokers), *args], version=KAFKA_4_4)


def heartbeat_error(port: int) -> int:
    request = messages.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[])
    with WireClient(port) as c:
        return c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, request).error_code


def test_api_versions_lists_features_and_update_features_changes_them(broker):
    supported, finalized, epoch = api_versions(broker.port)
    # the KRaft-only features are not among them
    assert supported == {
        "group.version": (0, 1), "share.version": (0, 2), "streams.version": (0, 1), "transaction.version": (0, 2)}
    assert finalized == FINAL and epoch == 0
    # below v4 a feature supported from level 0 is left out (older clients refuse a minimum of 0)
    assert api_versions(broker.port, 3) == ({}, FINAL, 0)

    # validate_only checks and writes nothing; a refusal names the reason in Kafka's words
    r = update(broker.port, 1, 0, upgrade_type=2, validate_only=True)
    assert r.error_code == ErrorCode.NONE and [x.feature for x in r.results] == ["group.version"]
    assert api_versions(broker.port)[1:] == (FINAL, 0)
    r = update(broker.port, 2, 0)
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and r.error_message.endswith(
        "without setting the upgrade type to either safe or unsafe downgrade.")
    r = update(broker.port, 2, 2)
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert r.error_message == ("Invalid update version 2 for feature group.version. "
                               "Local controller 1 only supports versions 0-1")
    r = update(broker.port, 2, 1, feature="metadata.version")
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "does not support this feature" in r.error_message
    r = update(broker.port, 1, 1, upgrade_type=9)
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and r.results == []
    assert heartbeat_error(broker.port) == ErrorCode.NONE

    # v0's allow_downgrade: group.version 0 turns KIP-848's protocol off, the epoch grows
    r = update(broker.port, 0, 0, allow_downgrade=True)
    assert r.error_code == ErrorCode.NONE and r.results[0].error_code == ErrorCode.NONE
    assert api_versions(broker.port)[1:] == (ONLY_TV, 1)  # a level of 0 is not listed
    assert heartbeat_error(broker.port) == ErrorCode.UNSUPPORTED_VERSION
    errors = []  # librdkafka stops the consumer with a fatal error
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "group.protocol": "consumer",
                         "error_cb": errors.append})
    consumer.subscribe(["t"])

    def failed():
        m = consumer.poll(0.2)
        return errors or (m is not None and m.error() and [m.error()])

    error = wait_for(failed, 20, "the consumer's error")[0]
    assert error.code() == KafkaError._FATAL and "ConsumerGroupHeartbeat" in error.str()
    consumer.close()

    broker.restart()  # the levels are kept in the data directory
    assert api_versions(broker.port)[1:] == (ONLY_TV, 1)
    assert update(broker.port, 2, 1).error_code == ErrorCode.NONE
    assert api_versions(broker.port)[1:] == (FINAL, 2)
    assert heartbeat_error(broker.port) == ErrorCode.NONE


def test_api_versions_v5_sends_a_client_that_meant_another_broker_to_rebootstrap(broker):
    with WireClient(broker.port) as c:
        md = c.request(ApiKey.METADATA, 12, messages.MetadataRequest(topics=[]))
        ask = messages.ApiVersionsRequest
        r = c.request(ApiKey.API_VERSIONS, 5, ask(cluster_id=md.cluster_id, node_id=1))
        assert r.error_code == ErrorCode.NONE and r.api_keys
        for wrong in (ask(cluster_id=md.cluster_id, node_id=2), ask(cluster_id="another", node_id=1)):
            r = c.request(ApiKey.API_VERSIONS, 5, wrong)
            assert (r.error_code, r.api_keys) == (ErrorCode.REBOOTSTRAP_REQUIRED, [])
        # without a cluster id (a client on its first connection) nothing is checked
        assert c.request(ApiKey.API_VERSIONS, 5, ask(node_id=7)).error_code == ErrorCode.NONE


def test_update_features_needs_alter_on_the_cluster(broker_factory):
    broker = broker_factory({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    r = update(broker.port, 2, 0, upgrade_type=2)
    assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert api_versions(broker.port)[1:] == (FINAL, 0)


@java
def test_kafka_features_tool_describes_upgrades_and_disables(broker):
    b = [broker]
    shown = features_tool(b, "describe")
    assert shown.returncode == 0
    assert [line.split() for line in shown.stdout.splitlines()] == [
        ["Feature:", "group.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "1",
         "FinalizedVersionLevel:", "1", "Epoch:", "0"],
        ["Feature:", "share.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "2",
         "FinalizedVersionLevel:", "2", "Epoch:", "0"],
        ["Feature:", "streams.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "1",
         "FinalizedVersionLevel:", "1", "Epoch:", "0"],
        ["Feature:", "transaction.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "2",
         "FinalizedVersionLevel:", "2", "Epoch:", "0"]]
    done = features_tool(b, "disable", "--feature", "group.version")
    assert done.returncode == 0 and "group.version was disabled." in done.stdout
    refused = features_tool(b, "upgrade", "--feature", "group.version=2")
    assert refused.returncode != 0
    assert "Could not upgrade group.version to 2. Invalid update version 2 for feature group.version." in refused.stdout
    refused = features_tool(b, "upgrade", "--feature", "share.version=3")
    assert refused.returncode != 0 and "only supports versions 0-2" in refused.stdout
    refused = features_tool(b, "upgrade", "--feature", "streams.version=2")
    assert refused.returncode != 0 and "only supports versions 0-1" in refused.stdout
    done = features_tool(b, "upgrade", "--feature", "group.version=1")
    assert done.returncode == 0 and "group.version was upgraded to 1." in done.stdout
    assert "FinalizedVersionLevel: 1" in features_tool(b, "describe").stdout
    assert api_versions(broker.port)[1:] == (FINAL, 2)


@java
def test_the_cluster_shares_one_set_of_levels(cluster):
    brokers = cluster(3)
    controller = _controller(brokers)
    other = next(b for b in brokers if b is not controller)
    assert update(other.port, 2, 0, upgrade_type=2).error_code == ErrorCode.NOT_CONTROLLER
    # the admin client finds the controller from any broker
    done = features_tool([other], "downgrade", "--feature", "group.version=0")
    assert done.returncode == 0, done.stdout + done.stderr
    for b in brokers:
        wait_for(lambda b=b: api_versions(b.port)[1:] == (ONLY_TV, 1), 10, "every broker sees level 0")
        assert heartbeat_error(b.port) == ErrorCode.UNSUPPORTED_VERSION
    late = cluster(1)[0]  # a broker that joins later reads the cluster's levels
    assert api_versions(late.port)[1:] == (ONLY_TV, 1)
    for b in brokers:
        b.restart()
    assert update(_controller([*brokers, late]).port, 2, 1).error_code == ErrorCode.NONE
    for b in [*brokers, late]:
        wait_for(lambda b=b: api_versions(b.port)[1:] == (FINAL, 2), 10,
                 "every broker sees level 1")


def _controller(brokers):
    """The controller among ``brokers`` (the cluster fixture's node n is ``brokers[n - 1]``)."""

    def find():
        with WireClient(brokers[-1].port) as c:
            r = c.request(ApiKey.DESCRIBE_CLUSTER, 0, messages.DescribeClusterRequest(
                include_cluster_authorized_operations=False))
        return brokers[r.controller_id - 1] if 0 < r.controller_id <= len(brokers) else None

    return wait_for(find, 20, "a controller")


def test_a_level_every_live_broker_must_support(tmp_path):
    """The controller checks each live broker's registered features (a broker of an older
    release registers fewer) before it writes a level; nothing is written on a refusal."""
    from headrace.broker.cluster.documents import FileDocument
    from headrace.broker.cluster.features import FeatureUpdateError, Features, registration

    async def run():
        features = Features(FileDocument("features", tmp_path), node_id=1)
        await features.start()
        old = {1: registration(), 2: ()}  # broker 2 knows no features
        await features.update({"group.version": (0, 2)}, old, validate_only=False)  # off: always possible
        assert (features.levels, features.epoch) == ({"share.version": 2, "streams.version": 1, "transaction.version": 2}, 1)
        up = {"group.version": (1, 1)}
        for live, reason in [
            (old, "Broker 2 does not support this feature."),
            ({1: registration(), 3: (("group.version", 2, 3),)}, "Broker 3 only supports versions 2-3"),
        ]:
            with pytest.raises(FeatureUpdateError) as refused:
                await features.update(up, live, validate_only=False)
            assert refused.value.code == ErrorCode.INVALID_UPDATE_VERSION
            assert refused.value.message.endswith(reason)
        assert (features.levels, features.epoch) == ({"share.version": 2, "streams.version": 1, "transaction.version": 2}, 1)
        await features.update(up, {1: registration(), 2: (("group.version", 0, 1),)}, validate_only=False)
        levels = {"group.version": 1, "share.version": 2, "streams.version": 1, "transaction.version": 2}
        assert (features.levels, features.epoch) == (levels, 2)
        assert json.loads((tmp_path / "features.json").read_text()) == {"epoch": 2, "levels": levels}

    asyncio.run(run())
