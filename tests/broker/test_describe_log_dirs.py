"""DescribeLogDirs: kafka-python's admin client against one broker and against a cluster of
three (each broker lists only its own partitions); every version on the wire."""

from __future__ import annotations

import os
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, create, metadata  # noqa: F401 (cluster: a fixture)

from headrace.protocol import ApiKey, ErrorCode, messages

Q = messages.DescribeLogDirsRequest


def on_disk(data_dir: Path) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the sum of its segment files' sizes, read from the directory."""
    sizes = {}
    for d in data_dir.iterdir():
        topic, _, index = d.name.rpartition("-")
        if d.is_dir() and topic and index.isdigit():
            sizes[(topic, int(index))] = sum(f.stat().st_size for f in d.glob("*.log"))
    return sizes


def reported(log_dir: dict) -> dict[tuple[str, int], int]:
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }


def produce(bootstrap_servers: str, topic: str, counts: dict[int, int], size: int = 100) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    try:
        for partition, n in counts.items():
            for i in range(n):
                producer.send(topic, b"%d-" % i + b"v" * size, partition=partition)
        producer.flush(30)
    finally:
        producer.close(30)


def test_describe_log_dirs_on_one_broker(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics(
        [
            NewTopic("small", 3, 1),
            # one partition over two segments
            NewTopic("rolled", 1, 1, topic_configs={"segment.bytes": str(1 << 20)}),
        ]
    )
    produce(broker.bootstrap, "small", {0: 10, 1: 200, 2: 0})
    produce(broker.bootstrap, "rolled", {0: 3000}, size=500)
    assert len(list((broker.data_dir / "rolled-0").glob("*.log"))) >= 2

    answers = admin.describe_log_dirs()
    assert [a["broker"] for a in answers] == [1]
    (log_dir,) = answers[0]["log_dirs"]
    assert log_dir["error_code"] == ErrorCode.NONE
    assert Path(log_dir["log_dir"]) == broker.data_dir.resolve()
    sizes = reported(log_dir)
    assert sizes == on_disk(broker.data_dir)  # every partition, internal ones too
    assert sizes[("small", 2)] == 0 and 0 < sizes[("small", 0)] < sizes[("small", 1)]
    assert sizes[("rolled", 0)] > 1 << 20
    assert all(
        p["offset_lag"] == 0 and p["is_future_key"] is False
        for t in log_dir["topics"]
        for p in t["partitions"]
    )
    st = os.statvfs(broker.data_dir)
    assert log_dir["total_bytes"] == st.f_blocks * st.f_frsize
    assert abs(log_dir["usable_bytes"] - st.f_bavail * st.f_frsize) < 512 << 20

    # a filter: the named partitions that exist here, nothing else
    (answer,) = admin.describe_log_dirs({"small": [1, 7], "rolled": [0], "missing": [0]})
    assert reported(answer["log_dirs"][0]) == {
        ("small", 1): sizes[("small", 1)],
        ("rolled", 0): sizes[("rolled", 0)],
    }
    admin.close()


def test_describe_log_dirs_versions_on_the_wire(broker):
    create([broker], "w", 2)
    with WireClient(broker.port) as c:
        listed = c.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest()).api_keys
        assert {k.api_key: (k.min_version, k.max_version) for k in listed}[
            ApiKey.DESCRIBE_LOG_DIRS
        ] == (1, 5)
        for version in range(1, 6):
            r = c.request(ApiKey.DESCRIBE_LOG_DIRS, version, Q(topics=None))
            (result,) = r.results
            assert result.error_code == ErrorCode.NONE
            got = {(t.name, p.partition_index) for t in result.topics for p in t.partitions}
            assert got == {("w", 0), ("w", 1)}
            # before v4 the volume's sizes are not on the wire: the decoder's default, -1
            assert (result.total_bytes > 0) == (version >= 4), (version, result.total_bytes)
            assert (result.usable_bytes > 0) == (version >= 4)
            assert result.is_cordoned is False  # (v5: one directory, never cordoned)
            # an empty list of topics (not null) asks for none
            (empty,) = c.request(ApiKey.DESCRIBE_LOG_DIRS, version, Q(topics=[])).results
            assert empty.topics == []


def test_describe_log_dirs_in_a_cluster_each_broker_lists_its_own(cluster):  # noqa: F811
    brokers = cluster(3)
    create(brokers, "spread", 12)
    produce(bootstrap(brokers), "spread", {p: 5 + p for p in range(12)})
    md = metadata(brokers[0])  # every topic
    leader = {(t.name, p.partition_index): p.leader_id for t in md.topics for p in t.partitions}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap(brokers[:1]))
    answers = {a["broker"]: a["log_dirs"] for a in admin.describe_log_dirs()}
    admin.close()
    assert sorted(answers) == [1, 2, 3]
    spread: dict[int, set[int]] = {}
    for node, b in enumerate(brokers, 1):
        (log_dir,) = answers[node]
        assert Path(log_dir["log_dir"]) == b.data_dir.resolve()
        sizes = reported(log_dir)
        assert sizes == on_disk(b.data_dir)
        assert all(leader[tp] == node for tp in sizes), (node, sizes)
        spread[node] = {p for (t, p) in sizes if t == "spread"}
        assert spread[node] == {p for (t, p), n in leader.items() if t == "spread" and n == node}
        assert all(sizes[("spread", p)] > 0 for p in spread[node])
    assert all(spread.values())  # 12 partitions over 3 brokers: each holds some
    assert sorted(p for s in spread.values() for p in s) == list(range(12))


def test_alter_replica_log_dirs_with_one_directory(broker, tmp_path):
    create([broker], "w", 2)
    A = messages.AlterReplicaLogDirsRequest
    with WireClient(broker.port) as c:
        here = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, Q(topics=None)).results[0].log_dir

        def alter(path, partitions):
            r = c.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, A(dirs=[A.AlterReplicaLogDir(
                path=path, topics=[A.AlterReplicaLogDirTopic(name="w", partitions=partitions)])]))
            return {p.partition_index: p.error_code for p in r.results[0].partitions}

        assert alter(here, [0, 1, 7]) == {0: ErrorCode.NONE, 1: ErrorCode.NONE, 7: ErrorCode.REPLICA_NOT_AVAILABLE}
        assert alter(str(tmp_path / "elsewhere"), [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
        assert alter("relative/dir", [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
        # nothing moved
        r = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, Q(topics=None))
        assert [(x.log_dir, sorted(p.partition_index for t in x.topics for p in t.partitions)) for x in r.results] == [
            (here, [0, 1])]
