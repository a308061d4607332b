"""Security listeners in a cluster: three brokers and ZooKeeper (real processes on 127.0.0.1),
real clients over SASL_SSL, Metadata per listener, ACLs at every broker, and brokers that
reach each other over SASL_SSL."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tlsfiles import make_pki

from headrace.broker.tools.process import BrokerProcess

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="broker" password="broker-secret"'
    ' user_broker="broker-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


@pytest.fixture
def cluster(tmp_path, zk_connect):
    started: list[BrokerProcess] = []

    def start(count: int, settings: dict) -> list[BrokerProcess]:
        for node in range(1, count + 1):
            b = BrokerProcess(
                tmp_path / f"node{node}",
                {"zookeeper.connect": zk_connect, "node.id": node, **settings},
                args=["--workers", "1"],
            )
            started.append(b)
            b.start()
        return started

    yield start
    for b in started:
        b.kill()


def sasl_ssl(broker, pki, user: str, **more) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.listener_ports['EXTERNAL']}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        "socket.timeout.ms": 10_000,
        **more,
    }


def wait_for(check, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return value


def acl(principal, resource, name, operation) -> AclBinding:
    return AclBinding(
        resource, name, ResourcePatternType.LITERAL, principal, "*", operation,
        AclPermissionType.ALLOW,
    )


def test_sasl_ssl_clients_with_a_plaintext_inter_broker_listener(cluster, pki, zk_client):
    brokers = cluster(3, {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.external.ssl.keystore.location": pki.broker,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",  # the INTERNAL listener: brokers (and admins)
    })
    # every listener is in the registration, as Kafka writes it
    zk = zk_client()
    for node, b in enumerate(brokers, 1):
        registered = json.loads(zk.get(f"/brokers/ids/{node}")[0])
        assert registered["listener_security_protocol_map"] == {
            "INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL",
        }
        assert sorted(registered["endpoints"]) == sorted([
            f"EXTERNAL://127.0.0.1:{b.listener_ports['EXTERNAL']}",
            f"INTERNAL://127.0.0.1:{b.listener_ports['INTERNAL']}",
        ])
    internal = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    internal.create_topics([NewTopic("secure", 3, replication_factor=3,
                                     config={"min.insync.replicas": "3"})])["secure"].result(30)
    alice = "User:alice"
    for f in internal.create_acls([
        acl(alice, ResourceType.TOPIC, "secure", AclOperation.WRITE),
        acl(alice, ResourceType.TOPIC, "secure", AclOperation.READ),
        acl(alice, ResourceType.GROUP, "readers", AclOperation.READ),
    ]).values():
        f.result(30)

    # Metadata through each listener names the brokers' addresses on that listener
    def addresses(conf) -> dict[int, int]:
        md = AdminClient(conf).list_topics(timeout=20)
        return {b.id: b.port for b in md.brokers.values()}

    external = {n: b.listener_ports["EXTERNAL"] for n, b in enumerate(brokers, 1)}
    internal_ports = {n: b.listener_ports["INTERNAL"] for n, b in enumerate(brokers, 1)}
    for b in brokers:
        wait_for(lambda b=b: addresses(sasl_ssl(b, pki, "alice")) == external, 20, "3 brokers")
        assert addresses({"bootstrap.servers": b.bootstrap}) == internal_ports

    # alice produces (acks=all to an RF=3 topic whose ISR must be all three) and consumes
    producer = Producer(sasl_ssl(brokers[0], pki, "alice", acks="all"))
    failures = []
    for i in range(300):
        producer.produce("secure", value=b"v%d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(60) == 0 and failures == []
    consumer = Consumer(sasl_ssl(brokers[1], pki, "alice", **{
        "group.id": "readers", "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition("secure", p, 0) for p in range(3)])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < 300 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.add(m.value())
    consumer.close()
    assert got == {b"v%d" % i for i in range(300)}

    # bob has no ACL: refused at every broker, for Metadata and for a produce
    for b in brokers:
        md = AdminClient(sasl_ssl(b, pki, "bob")).list_topics(topic="secure", timeout=20)
        assert md.topics["secure"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    bob = Producer(sasl_ssl(brokers[2], pki, "bob", **{"message.timeout.ms": 10_000}))
    errors = []
    bob.produce("secure", b"no", on_delivery=lambda err, msg: errors.append(err))
    bob.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_brokers_reach_each_other_over_sasl_ssl(cluster, pki):
    """The inter-broker listener is SASL_SSL; its user is the only super user, and the
    clients' principal (ANONYMOUS on PLAINTEXT) may not CLUSTER_ACTION: replicas keep up only
    if the brokers authenticate as that user."""
    brokers = cluster(3, {
        "listeners": "BROKER://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "BROKER:SASL_SSL,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.broker.ssl.keystore.location": pki.broker,
        "listener.name.broker.ssl.truststore.location": pki.ca,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker",
    })
    client = {"bootstrap.servers": f"127.0.0.1:{brokers[0].listener_ports['CLIENT']}"}
    # ANONYMOUS needs the broker user to give it its rights (through the SASL_SSL listener)
    admin = AdminClient({
        "bootstrap.servers": f"127.0.0.1:{brokers[0].listener_ports['BROKER']}",
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "PLAIN", "sasl.username": "broker", "sasl.password": "broker-secret",
    })
    anonymous = "User:ANONYMOUS"
    for f in admin.create_acls([
        acl(anonymous, ResourceType.TOPIC, "*", AclOperation.ALL),
        acl(anonymous, ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE),
    ]).values():
        f.result(30)
    client_admin = AdminClient(client)
    client_admin.create_topics([NewTopic(
        "replicated", 3, replication_factor=3, config={"min.insync.replicas": "3"},
    )])["replicated"].result(30)
    producer = Producer({**client, "acks": "all", "message.timeout.ms": 30_000})
    failures = []
    for i in range(100):
        producer.produce("replicated", value=b"r%d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(60) == 0 and failures == []
    # the followers caught up over SASL_SSL: every ISR is the three brokers
    partitions = client_admin.list_topics(topic="replicated", timeout=20).topics[
        "replicated"
    ].partitions
    assert [sorted(partitions[p].isrs) for p in range(3)] == [[1, 2, 3]] * 3


def scram_admin(port: int, pki, user: str, password: str) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": password, "socket.timeout.ms": 5000,
    })


def logs_in(port: int, pki, user: str, password: str) -> bool:
    try:
        scram_admin(port, pki, user, password).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def test_scram_users_are_the_clusters_and_brokers_use_them_with_each_other(cluster, pki, zk_client):
    """A SCRAM user added at one broker logs in at every broker (Kafka's /config/users znode and
    change notifications); the brokers' own SCRAM user, added that way, carries replication
    over the SASL_SSL inter-broker listener; a deletion at one broker holds at the others."""
    brokers = cluster(3, {
        "listeners": "BROKER://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "BROKER:SASL_SSL,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.broker.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required"
            ' username="broker" password="broker-secret";',
        "ssl.keystore.location": pki.broker,
        "ssl.truststore.location": pki.ca,
    })
    first = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[0].listener_ports['CLIENT']}"})
    for user, password in (("broker", "broker-secret"), ("carol", "carol-secret")):
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
        for f in first.alter_user_scram_credentials([upsert]).values():
            f.result(30)
    ports = [b.listener_ports["BROKER"] for b in brokers]
    for port in ports:
        wait_for(lambda port=port: logs_in(port, pki, "carol", "carol-secret"), 20, "carol")
        assert not logs_in(port, pki, "carol", "wrong")
    # Kafka's layout: the salted credential, never the password
    zk = zk_client()
    config = json.loads(zk.get("/config/users/carol")[0])["config"]
    assert list(config) == ["SCRAM-SHA-512"] and "iterations=8192" in config["SCRAM-SHA-512"]
    assert "carol-secret" not in json.dumps(config)
    assert zk.get_children("/config/changes")
    third = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[2].listener_ports['CLIENT']}"})
    described = third.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [c.iterations for c in described.scram_credential_infos] == [8192]

    # the brokers replicate as "broker" over SCRAM: acks=all with all three in the ISR
    client = {"bootstrap.servers": f"127.0.0.1:{brokers[0].listener_ports['CLIENT']}"}
    first.create_topics([NewTopic("r", 3, replication_factor=3,
                                  config={"min.insync.replicas": "3"})])["r"].result(30)
    producer = Producer({**client, "acks": "all", "message.timeout.ms": 30_000})
    failures = []
    for i in range(60):
        producer.produce("r", value=b"%d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(60) == 0 and failures == []

    # deleted at the second broker: refused at the third, and at the first
    second = AdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[1].listener_ports['CLIENT']}"})
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    for f in second.alter_user_scram_credentials([deletion]).values():
        f.result(30)
    for port in (ports[2], ports[0]):
        wait_for(lambda port=port: not logs_in(port, pki, "carol", "carol-secret"), 20, "deleted")
    assert zk.exists("/config/users/carol") is None


def test_a_broker_with_a_wrong_inter_broker_password_cannot_follow(cluster, pki):
    """The other brokers check the inter-broker login: a broker whose JAAS entry has a wrong
    password is refused (it says so in its log) and drops out of the ISR of what it follows."""
    jaas = "listener.name.broker.plain.sasl.jaas.config"
    settings = {
        "listeners": "BROKER://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.sasl.enabled.mechanisms": "PLAIN",
        jaas: PLAIN_JAAS,
        "replica.lag.time.max.ms": 3000,
    }
    first, second = cluster(2, settings)[:2]
    second.stop()  # restarted with a wrong password in its own JAAS entry (its users are unchanged)
    second.overrides[jaas] = PLAIN_JAAS.replace('password="broker-secret"', 'password="wrong"')
    second.start()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{first.listener_ports['CLIENT']}"})
    admin.create_topics([NewTopic("two", 4, replication_factor=2)])["two"].result(30)
    wait_for(lambda: any("refused PLAIN authentication as broker" in line for line in second.lines),
             30, "the refusal in the log")
    assert not any("refused PLAIN authentication" in line for line in first.lines)

    def isrs():
        md = admin.list_topics(topic="two", timeout=20).topics["two"].partitions
        return {p.leader: sorted(p.isrs) for p in md.values()}

    # what the first broker leads, the second cannot follow; the reverse holds
    wait_for(lambda: isrs().get(1) == [1], 30, "the second broker out of the first's ISRs")
    assert isrs().get(2) in (None, [1, 2])
