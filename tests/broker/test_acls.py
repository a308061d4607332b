"""ACLs end to end: real clients (confluent-kafka, kafka-python) as SASL users are refused
what their ACLs do not allow, with Kafka's error codes; Metadata hides topics; Kafka's own
``kafka-acls`` adds, lists and removes ACLs; ACLs survive a restart, and a change applies to
connections already open."""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafkawire import WireClient
from test_cluster import bootstrap, cluster, create, wait_for  # noqa: F401 (a fixture)
from test_moves import _kafka_tool

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
ACL_TOOL = "kafka.admin.AclCommand"


def secured(tmp_path, **more) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            **more,
        },
    )


def conf(broker, user: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def kafka_python(broker, user: str) -> dict:
    return dict(
        bootstrap_servers=f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=f"{user}-secret",
    )


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for f in admin.create_acls(list(bindings)).values():
        f.result(30)


def allow(t, name, principal, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(t, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def produce_error(conf: dict, topic: str, **more) -> KafkaError | None:
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 10_000, **more})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1
    return errors[0]


def consume(conf: dict, topic: str, group: str, expect: int, timeout: float = 20) -> list:
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, errors = [], []
    deadline = time.monotonic() + timeout
    while len(got) < expect and not errors and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            continue
        (errors if m.error() else got).append(m.error() or m.value())
    consumer.close()
    return errors or got


def test_denials_for_produce_consume_group_transactional_id_and_topic_creation(tmp_path):
    with secured(tmp_path) as broker:
        admin = AdminClient(conf(broker, "admin"))
        for f in admin.create_topics([NewTopic("orders", 1), NewTopic("secret", 1)]).values():
            f.result(30)
        alice = "User:alice"
        grant(
            admin,
            allow(ResourceType.TOPIC, "orders", alice, AclOperation.WRITE),
            allow(ResourceType.TOPIC, "orders", alice, AclOperation.READ),
            allow(ResourceType.GROUP, "ok-", alice, AclOperation.READ, ResourcePatternType.PREFIXED),
            allow(ResourceType.TRANSACTIONAL_ID, "tx-ok", alice, AclOperation.WRITE),
        )
        a = conf(broker, "alice")
        assert produce_error(a, "orders") is None
        assert produce_error(a, "secret").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_error(conf(broker, "bob"), "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        # kafka-python: the same refusal, with its exception type
        kp = KafkaProducer(**kafka_python(broker, "alice"), max_block_ms=10_000)
        kp.send("orders", b"kp").get(20)
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send("secret", b"kp").get(20)
        kp.close()

        # consume: group READ and topic READ
        assert consume(a, "orders", "ok-1", expect=2) == [b"x", b"kp"]
        denied = consume(a, "orders", "other-group", expect=1)
        assert [e.code() for e in denied] == [KafkaError.GROUP_AUTHORIZATION_FAILED]
        kc = KafkaConsumer(**kafka_python(broker, "alice"), group_id="other-group")
        kc.subscribe(["orders"])
        with pytest.raises(GroupAuthorizationFailedError):
            kc.poll(10_000)
        kc.close()
        grant(admin, allow(ResourceType.TOPIC, "secret", alice, AclOperation.DESCRIBE))
        denied = consume(a, "secret", "ok-2", expect=1)  # may see it, may not read it
        assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

        # transactional ids
        tx = Producer({**a, "transactional.id": "tx-ok"})
        tx.init_transactions(20)
        tx.begin_transaction()
        tx.produce("orders", b"in-txn")
        tx.commit_transaction(20)
        bad = Producer({**a, "transactional.id": "tx-other"})
        with pytest.raises(KafkaException) as e:
            bad.init_transactions(20)
        assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        # topic creation needs CREATE (cluster or topic)
        alice_admin = AdminClient(a)
        f = alice_admin.create_topics([NewTopic("new-topic", 1)])["new-topic"]
        with pytest.raises(KafkaException) as e:
            f.result(30)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(admin, allow(ResourceType.TOPIC, "new-", alice, AclOperation.CREATE, ResourcePatternType.PREFIXED))
        alice_admin.create_topics([NewTopic("new-topic", 1)])["new-topic"].result(30)

        # an ALTER of the cluster is the admin's: alice may not create ACLs
        with pytest.raises(KafkaException) as e:
            grant(alice_admin, allow(ResourceType.TOPIC, "secret", alice, AclOperation.READ))
        assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def _sasl_wire(broker, user: str) -> WireClient:
    """A wire client on the SASL listener, authenticated as ``user`` with PLAIN."""
    client = WireClient(broker.listener_ports["SASL_PLAINTEXT"])
    client.request(ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))
    token = f"\0{user}\0{user}-secret".encode()
    answer = client.request(
        ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(auth_bytes=token)
    )
    assert answer.error_code == ErrorCode.NONE
    return client


def test_metadata_hides_topics_and_fills_authorized_operations(tmp_path):
    with secured(tmp_path, **{"auto.create.topics.enable": "true"}) as broker:
        admin = AdminClient(conf(broker, "admin"))
        for f in admin.create_topics([NewTopic("seen", 1), NewTopic("hidden", 1)]).values():
            f.result(30)
        grant(admin, allow(ResourceType.TOPIC, "seen", "User:alice", AclOperation.READ))
        alice_admin = AdminClient(conf(broker, "alice"))
        assert set(alice_admin.list_topics(timeout=10).topics) == {"seen"}
        assert {"seen", "hidden"} <= set(admin.list_topics(timeout=10).topics)

        M = messages.MetadataRequest
        with _sasl_wire(broker, "alice") as client:
            names = ["seen", "hidden", "made-up"]
            answer = client.request(
                ApiKey.METADATA,
                11,
                M(
                    topics=[M.MetadataRequestTopic(name=n) for n in names],
                    allow_auto_topic_creation=True,
                    include_topic_authorized_operations=True,
                ),
            )
            codes = {t.name: t.error_code for t in answer.topics}
            assert codes == {
                "seen": ErrorCode.NONE,
                "hidden": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "made-up": ErrorCode.TOPIC_AUTHORIZATION_FAILED,  # no DESCRIBE, no CREATE
            }
            seen = next(t for t in answer.topics if t.name == "seen")
            assert seen.topic_authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE
            D = messages.DescribeClusterRequest
            cluster = client.request(
                ApiKey.DESCRIBE_CLUSTER, 1, D(include_cluster_authorized_operations=True)
            )
            assert cluster.cluster_authorized_operations == 0
            G = messages.DescribeGroupsRequest
            grant(admin, allow(ResourceType.GROUP, "mine", "User:alice", AclOperation.READ))
            groups = client.request(
                ApiKey.DESCRIBE_GROUPS, 5, G(groups=["mine", "theirs"], include_authorized_operations=True)
            ).groups
            assert [g.error_code for g in groups] == [ErrorCode.NONE, ErrorCode.GROUP_AUTHORIZATION_FAILED]
            assert groups[0].authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE
        assert "made-up" not in admin.list_topics(timeout=10).topics

        with _sasl_wire(broker, "admin") as client:
            D = messages.DescribeClusterRequest
            cluster = client.request(
                ApiKey.DESCRIBE_CLUSTER, 1, D(include_cluster_authorized_operations=True)
            )
            # a super user: every cluster operation
            assert cluster.cluster_authorized_operations == sum(
                1 << op for op in (5, 7, 8, 9, 10, 11, 12)
            )


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn")
def test_kafka_acls_adds_lists_and_removes_and_acls_survive_a_restart(tmp_path):
    # the tool comes through the PLAINTEXT listener, as User:ANONYMOUS, here a super user
    broker = secured(tmp_path, **{"super.users": "User:admin;User:ANONYMOUS"})
    with broker:
        b = ["--bootstrap-server", broker.bootstrap]
        done = _kafka_tool(ACL_TOOL, [*b, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders"])
        assert done.returncode == 0, done.stderr
        done = _kafka_tool(ACL_TOOL, [*b, "--add", "--deny-principal", "User:alice", "--operation", "Read",
                                      "--topic", "logs-", "--resource-pattern-type", "prefixed"])
        assert done.returncode == 0, done.stderr
        listed = _kafka_tool(ACL_TOOL, [*b, "--list", "--topic", "orders"])
        assert listed.returncode == 0
        for op in ("WRITE", "DESCRIBE", "CREATE"):
            assert f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" in listed.stdout
        broker.create_topic("orders")
        assert produce_error(conf(broker, "alice"), "orders") is None

    with broker:  # restarted: the ACLs are read back
        b = ["--bootstrap-server", broker.bootstrap]
        listed = _kafka_tool(ACL_TOOL, [*b, "--list"])
        assert "resourceType=TOPIC, name=orders, patternType=LITERAL" in listed.stdout
        assert "resourceType=TOPIC, name=logs-, patternType=PREFIXED" in listed.stdout
        assert "operation=READ, permissionType=DENY" in listed.stdout
        a = conf(broker, "alice")
        assert produce_error(a, "orders") is None
        done = _kafka_tool(ACL_TOOL, [*b, "--remove", "--force", "--allow-principal", "User:alice",
                                      "--producer", "--topic", "orders"])
        assert done.returncode == 0, done.stderr
        # the decision cached for alice's connections is gone with the ACL
        assert produce_error(a, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        listed = _kafka_tool(ACL_TOOL, [*b, "--list", "--topic", "orders"])
        assert "User:alice" not in listed.stdout


def test_acl_apis_answer_security_disabled_without_an_authorizer_and_the_count_is_bounded(tmp_path):
    with BrokerProcess(tmp_path / "plain") as broker, WireClient(broker.port) as client:
        D = messages.DescribeAclsRequest
        answer = client.request(
            ApiKey.DESCRIBE_ACLS,
            3,
            D(resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1),
        )
        assert answer.error_code == ErrorCode.SECURITY_DISABLED
    with secured(tmp_path, **{"authorizer.acls.max.count": "3", "super.users": "User:ANONYMOUS"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        grant(admin, *(allow(ResourceType.TOPIC, f"t{i}", "User:alice", AclOperation.READ) for i in range(3)))
        with pytest.raises(KafkaException) as e:
            grant(admin, allow(ResourceType.TOPIC, "t3", "User:alice", AclOperation.READ))
        assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
        grant(admin, allow(ResourceType.TOPIC, "t0", "User:alice", AclOperation.READ))  # exists already
        found = admin.describe_acls(
            AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:alice", None,
                             AclOperation.ANY, AclPermissionType.ANY)
        ).result(30)
        assert sorted(b.name for b in found) == ["t0", "t1", "t2"]
        deleted = admin.delete_acls(
            [AclBindingFilter(ResourceType.TOPIC, "t1", ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)]
        )
        assert [b.name for f in deleted.values() for b in f.result(30)] == ["t1"]


def test_acls_live_in_zookeeper_and_every_broker_applies_them(cluster):
    # a cluster's brokers reach each other through its PLAINTEXT listener, as User:ANONYMOUS,
    # the principal of its clients too: resources with no ACL stay open here
    brokers = cluster(2, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    })
    create(brokers, "open", 2)
    create(brokers, "closed", 2)
    first = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    grant(first, AclBinding(ResourceType.TOPIC, "closed", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                            "*", AclOperation.WRITE, AclPermissionType.DENY))
    second = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    anything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    wait_for(lambda: len(second.describe_acls(anything).result(30)) == 1, 10, "the ACL at broker 2")
    everyone = {"bootstrap.servers": bootstrap(brokers), "acks": "all"}
    assert produce_error(everyone, "open") is None
    for b in brokers:  # each partition's leader refuses
        for p in (0, 1):
            errors = []
            producer = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 10_000})
            try:
                producer.produce(
                    "closed", b"x", partition=p, on_delivery=lambda e, m: errors.append(e)
                )
            except KafkaException as e:  # (refused at once: the client already knew)
                errors.append(e.args[0])
            producer.flush(20)
            assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    first.delete_acls([anything])[anything].result(30)
    wait_for(lambda: not second.describe_acls(anything).result(30), 10, "the ACL gone at broker 2")
    assert produce_error(everyone, "closed") is None
