"""The topic table is bounded by ``max.broker.partitions``: CreateTopics, CreatePartitions and
auto-creation beyond it are refused, and the broker keeps serving."""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

from headrace.broker.tools.process import BrokerProcess
from kafkawire import WireClient

C = messages.CreateTopicsRequest
CP = messages.CreatePartitionsRequest
M = messages.MetadataRequest


def create(c, *topics):
    return [t.error_code for t in c.request(ApiKey.CREATE_TOPICS, 7, C(topics=[
        C.CreatableTopic(name=n, num_partitions=p, replication_factor=1)
        for n, p in topics])).topics]


def test_partitions_past_max_broker_partitions_are_refused(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"max.broker.partitions": "10"}).start()
    try:
        with WireClient(b.port) as c:
            assert create(c, ("a", 6), ("b", 5), ("c", 4)) == [
                ErrorCode.NONE, ErrorCode.POLICY_VIOLATION, ErrorCode.NONE]
            r = c.request(ApiKey.CREATE_PARTITIONS, 3, CP(timeout_ms=1000, topics=[
                CP.CreatePartitionsTopic(name="a", count=7, assignments=None)]))
            assert r.results[0].error_code == ErrorCode.POLICY_VIOLATION
            assert "max.broker.partitions" in r.results[0].error_message
            # a client asking for made-up topics (auto-creation is on) makes none
            names = [f"made-up-{i}" for i in range(50)]
            r = c.request(ApiKey.METADATA, 12, M(
                topics=[M.MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=True))
            assert {t.error_code for t in r.topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            r = c.request(ApiKey.METADATA, 12, M(topics=None, allow_auto_topic_creation=False))
            assert sorted((t.name, len(t.partitions)) for t in r.topics) == [("a", 6), ("c", 4)]
        assert not any(p.name.startswith("made-up") for p in (tmp_path / "data").iterdir())
    finally:
        b.kill()
