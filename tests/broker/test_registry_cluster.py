"""The schema registry in a cluster of three brokers and one ZooKeeper (real processes): every
broker serves the same registry (writes forwarded to the leader of ``_schemas``, reads from
each broker's own replica, or forwarded by the broker that holds none; a write read back at
once where it was made), and a SIGKILL of that leader loses no schema and no id; writes work
again at the new leader."""

from __future__ import annotations

import json
import time

import pytest
import requests
from kafkawire import WireClient

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, messages

SESSION_MS = 4000
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


@pytest.fixture
def brokers(tmp_path, zk_connect):
    started = [
        BrokerProcess(
            tmp_path / f"node{node}",
            {
                "zookeeper.connect": zk_connect,
                "node.id": node,
                "zookeeper.session.timeout.ms": SESSION_MS,
                "replica.lag.time.max.ms": 4000,
                "schema.registry.listeners": "http://127.0.0.1:0",
                # two replicas of _schemas: one broker holds none and forwards its reads too
                "schema.registry.topic.replication.factor": 2,
            },
            args=["--workers", "1"],
        )
        for node in (1, 2, 3)
    ]
    for b in started:
        b.start()
    yield started
    for b in started:
        b.kill()


def url(b: BrokerProcess) -> str:
    return f"http://127.0.0.1:{b.listener_ports['SCHEMA_REGISTRY']}"


def schemas_leader(b: BrokerProcess) -> int:
    return schemas_partition(b)[0]


def schemas_partition(b: BrokerProcess) -> tuple[int, list[int]]:
    """(leader, replicas) of _schemas partition 0, as ``b`` tells them."""
    with WireClient(b.port) as c:
        md = c.request(
            ApiKey.METADATA,
            12,
            messages.MetadataRequest(
                topics=[messages.MetadataRequest.MetadataRequestTopic(name="_schemas")],
                allow_auto_topic_creation=False,
            ),
        )
    partitions = md.topics[0].partitions
    if not partitions:
        return -1, []
    return partitions[0].leader_id, list(partitions[0].replica_nodes)


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def record(namespace: str, extra: int = 0) -> str:
    """A record of ``namespace``; ``extra`` fields with defaults: a BACKWARD evolution each."""
    fields = [{"name": "a", "type": "int"}]
    fields += [{"name": f"f{k}", "type": "int", "default": k} for k in range(extra)]
    return json.dumps({"type": "record", "name": "R", "namespace": namespace, "fields": fields})


def register(b: BrokerProcess, subject: str, schema: str) -> int:
    r = requests.post(
        f"{url(b)}/subjects/{subject}/versions",
        data=json.dumps({"schema": schema}),
        headers=CT,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


def everything(b: BrokerProcess) -> dict:
    """(subject, version) -> (id, schema) as broker ``b`` answers, soft-deleted ones too."""
    out = {}
    base = url(b)
    for subject in requests.get(f"{base}/subjects?deleted=true", timeout=10).json():
        versions = requests.get(f"{base}/subjects/{subject}/versions?deleted=true", timeout=10)
        for v in versions.json():
            got = requests.get(f"{base}/subjects/{subject}/versions/{v}?deleted=true", timeout=10)
            out[(subject, v)] = (got.json()["id"], got.json()["schema"])
    return out


def test_every_broker_serves_one_registry_and_a_leader_kill_loses_nothing(brokers):
    # writes at each broker (two of them forward to the leader); each reads its write back
    ids = {}
    for i, b in enumerate(brokers):
        for j in range(3):
            subject = f"t{i}-value"
            ids[(subject, j)] = register(b, subject, record(f"ns{i}", j))
            latest = requests.get(f"{url(b)}/subjects/{subject}/versions/latest", timeout=10)
            assert latest.json()["id"] == ids[(subject, j)]  # read-your-writes
    assert len(set(ids.values())) == len(ids)  # one id per schema, allocated once
    # every broker answers the Kafka cluster's id (the one without a replica too)
    cluster_ids = {
        requests.get(f"{url(b)}/v1/metadata/id", timeout=10).json()["scope"]["clusters"][
            "kafka-cluster"
        ]
        for b in brokers
    }
    assert len(cluster_ids) == 1 and cluster_ids != {""}
    # the same schema at another broker, under another subject: the same id
    assert register(brokers[2], "copy-value", record("ns0")) == ids[("t0-value", 0)]
    requests.delete(
        f"{url(brokers[1])}/subjects/t1-value/versions/1", timeout=10
    ).raise_for_status()
    reference = everything(brokers[0])
    assert len(reference) == 10
    for b in brokers[1:]:
        wait_for(lambda b=b: everything(b) == reference, 10, f"broker {b.port} to catch up")
    # SIGKILL the leader of _schemas
    leader, replicas = schemas_partition(brokers[0])
    assert leader in replicas and len(replicas) == 2
    victim = brokers[leader - 1]
    survivors = [b for b in brokers if b is not victim]
    victim.kill()  # (one survivor holds the other replica, the other none)
    wait_for(
        lambda: schemas_leader(survivors[0]) not in (-1, leader),
        SESSION_MS / 1000 + 20,
        "a new leader of _schemas",
    )
    for b in survivors:
        assert everything(b) == reference
    # writes work again, at the new leader and through the other survivor; ids go on
    fresh = register(survivors[0], "after-value", record("after"))
    assert fresh > max(ids.values())
    assert register(survivors[1], "after-value", record("after")) == fresh
    assert register(survivors[1], "t0-value", record("ns0")) == ids[("t0-value", 0)]
    # the killed broker comes back and serves the same registry
    victim.start()
    final = everything(survivors[0])
    wait_for(lambda: everything(victim) == final, 20, "the restarted broker to catch up")
    # records checked against the registry: each broker in its own view of _schemas; the
    # broker that holds no replica of it refuses, saying so
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    topic = NewTopic("checked", 3, replica_assignment=[[1], [2], [3]],
                     config={"confluent.value.schema.validation": "true"})
    admin.create_topics([topic])["checked"].result(30)
    checked = register(brokers[0], "checked-value", record("checked"))
    _, replicas = schemas_partition(brokers[0])
    for node in replicas:  # (their views have the schema: no race with the produce below)
        wait_for(lambda node=node: requests.get(
            f"{url(brokers[node - 1])}/subjects/checked-value/versions", timeout=10).ok,
            10, f"broker {node} to see the schema")
    producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "retries": 0,
                         "message.timeout.ms": 10_000})
    good = b"\x00" + checked.to_bytes(4, "big") + b"\x02"
    outcome = {}
    for partition in range(3):
        for value in (good, b"raw"):
            producer.produce("checked", value=value, partition=partition, on_delivery=lambda e, m, p=partition, v=value:
                             outcome.__setitem__((p + 1, v), e.code() if e else None))
            producer.flush(20)
    for node in (1, 2, 3):
        expected = None if node in replicas else KafkaError.INVALID_RECORD
        assert outcome[(node, good)] == expected, node
        assert outcome[(node, b"raw")] == KafkaError.INVALID_RECORD, node
    # a schema registered at the leader of _schemas and used at once at the follower: the
    # follower's view may not have it yet, and looks again once it has taken the record
    leader = schemas_leader(brokers[0])
    follower = next(node for node in replicas if node != leader)
    for extra in range(1, 4):
        fresh = register(brokers[leader - 1], "checked-value", record("checked", extra))
        value = b"\x00" + fresh.to_bytes(4, "big") + b"\x02"
        producer.produce("checked", value=value, partition=follower - 1, on_delivery=lambda e, m:
                         outcome.__setitem__(("fresh", extra), e.code() if e else None))
        producer.flush(20)
        assert outcome[("fresh", extra)] is None, extra


def test_contexts_are_one_registrys_at_every_broker(brokers):
    """Registrations in a context made at each broker (forwarded to the leader of
    ``_schemas``), the context's ids, its list and its deletion: every broker answers alike."""
    ids = [register(b, f":.shared:s{i}", record(f"cx{i}")) for i, b in enumerate(brokers)]
    assert ids == [1, 2, 3]  # the context's own ids, allocated once
    assert register(brokers[0], "plain", record("cx0")) == 1  # the default context's 1
    for b in brokers:
        wait_for(
            lambda b=b: requests.get(f"{url(b)}/contexts", timeout=10).json() == [".", ".shared"],
            10,
            f"broker {b.port} to list the context",
        )
        got = requests.get(f"{url(b)}/schemas/ids/2", params={"subject": ":.shared:"}, timeout=10)
        assert json.loads(got.json()["schema"])["namespace"] == "cx1"
    forwarder = next(b for node, b in enumerate(brokers, 1) if node != schemas_leader(b))
    # a write through the context path prefix, forwarded, then read back where it was made
    r = requests.post(f"{url(forwarder)}/contexts/.shared/subjects/s3/versions",
                      data=json.dumps({"schema": record("cx3")}), headers=CT, timeout=30)
    assert (r.status_code, r.json()["id"]) == (200, 4), r.text
    got = requests.get(f"{url(forwarder)}/contexts/.shared/subjects/s3/versions/1", timeout=10)
    assert (got.json()["subject"], got.json()["id"]) == (":.shared:s3", 4)
    for i in range(4):  # emptied, then deleted at a broker that forwards it (204)
        for q in ("", "?permanent=true"):
            assert requests.delete(f"{url(brokers[2])}/subjects/:.shared:s{i}{q}", timeout=30).ok
    r = requests.delete(f"{url(forwarder)}/contexts/.shared", timeout=30)
    assert (r.status_code, r.content) == (204, b"")
    for b in brokers:
        wait_for(
            lambda b=b: requests.get(f"{url(b)}/contexts", timeout=10).json() == ["."],
            10,
            f"broker {b.port} to drop the context",
        )
