"""The registry's listener with the broker's authorizer on: HTTP Basic against the broker's
SCRAM users (confluent-kafka's SchemaRegistryClient with ``basic.auth.user.info``), the
broker's ACLs mapped to subjects (a ``<topic>-value`` subject as its topic, the global
settings as the cluster), Confluent's 401/40101 and 403/40301 (plain HTTP for the refusals)."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from headrace.broker.registry.auth import subject_topic
from headrace.broker.tools.process import BrokerProcess

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
SECRET = {"type": "record", "name": "Secret", "fields": [{"name": "s", "type": "string"}]}
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("registry-auth"),
        {
            "schema.registry.listeners": "http://127.0.0.1:0",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            # the test's admin client comes through PLAINTEXT, as User:ANONYMOUS
            "super.users": "User:admin;User:ANONYMOUS",
        },
    ).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), f"{user}-pw".encode())
        for user, mechanism in (
            ("admin", ScramMechanism.SCRAM_SHA_512),
            ("alice", ScramMechanism.SCRAM_SHA_512),
            ("bob", ScramMechanism.SCRAM_SHA_256),
        )
    ]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(30)

    def allow(t, name, user, op):
        return AclBinding(t, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                          AclPermissionType.ALLOW)

    grants = [
        allow(ResourceType.TOPIC, "orders", "alice", AclOperation.WRITE),
        allow(ResourceType.TOPIC, "orders", "bob", AclOperation.READ),
        allow(ResourceType.BROKER, "kafka-cluster", "bob", AclOperation.DESCRIBE_CONFIGS),
    ]
    for f in admin.create_acls(grants).values():
        f.result(30)
    yield b
    b.kill()


def url(broker) -> str:
    return f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"


def client(broker, user: str, password: str | None = None) -> SchemaRegistryClient:
    return SchemaRegistryClient(
        {"url": url(broker), "basic.auth.user.info": f"{user}:{password or user + '-pw'}"}
    )


def as_user(user: str) -> tuple[str, str]:
    return (user, f"{user}-pw")


def test_subjects_are_authorized_as_their_topics():
    assert subject_topic("orders-value") == "orders"
    assert subject_topic("orders-key") == "orders"
    assert subject_topic("shop.Order") == "shop.Order"
    assert subject_topic("-value") == "-value"


def test_users_register_and_read_what_their_acls_allow(broker):
    alice, bob = client(broker, "alice"), client(broker, "bob")
    serialize = AvroSerializer(alice, json.dumps(ORDER))  # auto-registers orders-value
    payload = serialize({"id": 1}, SerializationContext("orders", MessageField.VALUE))
    order_id = int.from_bytes(payload[1:5], "big")
    assert bob.get_latest_version("orders-value").schema_id == order_id  # READ: describe
    assert bob.get_schema(order_id).schema_str
    with pytest.raises(SchemaRegistryError) as refused:
        bob.register_schema("orders-value", Schema(json.dumps(SECRET), "AVRO", []))
    assert (refused.value.http_status_code, refused.value.error_code) == (403, 40301)
    # a super user does anything; others do not see what they may not describe
    secret_id = client(broker, "admin").register_schema("secret-value", Schema(json.dumps(SECRET), "AVRO"))
    assert sorted(client(broker, "admin").get_subjects()) == ["orders-value", "secret-value"]
    assert alice.get_subjects() == ["orders-value"]
    secret_guid = client(broker, "admin").get_latest_version("secret-value").guid
    order_guid = bob.get_latest_version("orders-value").guid
    assert bob.get_schema_by_guid(order_guid).schema_str  # by GUID: as by id
    for call in (
        lambda: alice.get_latest_version("secret-value"),
        lambda: alice.get_schema(secret_id),
        lambda: alice.get_schema_by_guid(secret_guid),
    ):
        with pytest.raises(SchemaRegistryError) as refused:
            call()
        assert refused.value.error_code == 40301
    ids_of = f"{url(broker)}/schemas/guids/{{}}/ids"
    ids = requests.get(ids_of.format(secret_guid), auth=("alice", "alice-pw"), timeout=10)
    assert (ids.status_code, ids.json()["error_code"]) == (403, 40301)
    ids = requests.get(ids_of.format(order_guid), auth=("bob", "bob-pw"), timeout=10)
    assert ids.json() == [{"context": ".", "id": order_id}]
    with pytest.raises(SchemaRegistryError) as refused:
        alice.delete_subject("orders-value")  # WRITE is not DELETE
    assert refused.value.error_code == 40301


def test_refusals_are_confluents_401_and_403(broker):
    base = url(broker)
    for auth in (None, ("alice", "wrong"), ("nobody", "nobody-pw"), ("bob", "alice-pw")):
        answer = requests.get(f"{base}/subjects", auth=auth, timeout=10)
        assert answer.status_code == 401, auth
        assert answer.json()["error_code"] == 40101
        assert answer.headers["WWW-Authenticate"].startswith("Basic")
    answer = requests.get(f"{base}/subjects", headers={"Authorization": "Bearer x"}, timeout=10)
    assert answer.status_code == 401
    assert requests.get(f"{base}/", auth=as_user("bob"), timeout=10).status_code == 200
    # the global settings are the cluster's: DESCRIBE_CONFIGS to read, ALTER_CONFIGS to change
    assert requests.get(f"{base}/config", auth=as_user("bob"), timeout=10).json() == {
        "compatibilityLevel": "BACKWARD"
    }
    answer = requests.get(f"{base}/config", auth=as_user("alice"), timeout=10)
    assert answer.status_code == 403 and answer.json()["error_code"] == 40301
    put = json.dumps({"compatibility": "FULL"})
    answer = requests.put(f"{base}/config", data=put, headers=CT, auth=as_user("bob"), timeout=10)
    assert answer.status_code == 403
    assert "denied operation AlterConfigs" in answer.json()["message"]
    answer = requests.put(f"{base}/mode/orders-value", data=json.dumps({"mode": "READONLY"}),
                          headers=CT, auth=as_user("alice"), timeout=10)
    assert answer.status_code == 403
    answer = requests.put(f"{base}/config", data=put, headers=CT, auth=as_user("admin"), timeout=10)
    assert answer.status_code == 200


def test_https_with_client_certificates(tmp_path):
    """An https listener (the TLS settings of listener SCHEMA_REGISTRY): a client certificate
    names the principal; without one, HTTP Basic is asked for."""
    from tlsfiles import make_pki

    pki = make_pki(tmp_path / "pki")
    settings = {
        "schema.registry.listeners": "https://127.0.0.1:0",
        "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.schema_registry.ssl.client.auth": "requested",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path / "data", settings) as broker:
        principal = f"User:{pki.client_subject}"
        grant = AclBinding(ResourceType.TOPIC, "certs", ResourcePatternType.LITERAL, principal, "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_acls([grant]).values():
            f.result(30)
        base = f"https://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"
        client = SchemaRegistryClient({
            "url": base,
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        })
        assert client.register_schema("certs-value", Schema(json.dumps(ORDER), "AVRO")) >= 1
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema("other-value", Schema(json.dumps(ORDER), "AVRO"))
        assert refused.value.error_code == 40301
        assert principal.removeprefix("User:") in refused.value.error_message
        answer = requests.get(f"{base}/subjects", verify=str(pki.ca), timeout=10)
        assert answer.status_code == 401 and answer.json()["error_code"] == 40101
        with pytest.raises(requests.exceptions.SSLError):  # a certificate the broker cannot check
            requests.get(f"{base}/subjects", timeout=10)


def test_a_forwarded_principal_is_taken_only_from_a_super_user(broker):
    """Brokers forward requests naming the principal they authenticated; only a super user's
    (a broker's) word is taken, so nobody else can pass for another user."""
    base, body = url(broker), json.dumps({"schema": json.dumps(ORDER)})
    as_bob = {**CT, "X-Headrace-Forwarded": "9", "X-Headrace-Principal": "User:bob",
              "X-Headrace-Host": "10.0.0.9"}
    answer = requests.post(f"{base}/subjects/orders-value/versions", data=body, headers=as_bob,
                           auth=as_user("admin"), timeout=10)
    assert answer.status_code == 403 and "User bob is denied" in answer.json()["message"]
    as_admin = {**as_bob, "X-Headrace-Principal": "User:admin"}
    answer = requests.post(f"{base}/subjects/secret-value/versions", data=body, headers=as_admin,
                           auth=as_user("alice"), timeout=10)
    assert answer.status_code == 403 and "User alice is denied" in answer.json()["message"]


def alice_may_write_prefixed(broker, prefix: str) -> None:
    """A PREFIXED ACL: alice may WRITE every topic (so subject) whose name starts ``prefix``."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    grant = AclBinding(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice",
                       "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([grant]).values():
        f.result(30)


def test_context_subjects_are_authorized_by_their_qualified_names(broker):
    """(Last: it adds subjects.) ``:.shop:orders-value`` is the topic ``:.shop:orders``, not
    ``orders``: WRITE on ``orders`` does not reach it, a PREFIXED ACL on ``:.shop:`` does;
    deleting a context is ALTER on the cluster."""
    base, order = url(broker), {"schema": json.dumps(ORDER)}
    answer = requests.post(f"{base}/subjects/:.shop:orders-value/versions", data=json.dumps(order),
                           headers=CT, auth=as_user("alice"), timeout=10)
    assert (answer.status_code, answer.json()) == (403, {"error_code": 40301, "message":
        "User alice is denied operation Write on Subject: :.shop:orders-value"})
    alice_may_write_prefixed(broker, ":.shop:")
    alice = client(broker, "alice")
    assert alice.register_schema(":.shop:orders-value", Schema(json.dumps(ORDER), "AVRO")) == 1
    assert ":.shop:orders-value" in alice.get_subjects()
    assert ":.shop:orders-value" not in client(broker, "bob").get_subjects()
    answer = requests.get(f"{base}/schemas/ids/1", params={"subject": ":.shop:orders-value"},
                          auth=as_user("bob"), timeout=10)
    assert (answer.status_code, answer.json()["error_code"]) == (403, 40301)
    answer = requests.delete(f"{base}/contexts/.shop", auth=as_user("alice"), timeout=10)
    assert (answer.status_code, answer.json()["error_code"]) == (403, 40301)


def test_a_context_prefix_is_authorized_as_the_qualified_subject(broker):
    """``/contexts/.pa/subjects/orders-value`` is ``:.pa:orders-value`` to the authorizer too:
    alice's WRITE on ``orders`` does not reach it, a PREFIXED ACL on ``:.pa:`` does; ids read
    through the prefix are checked in the context; ``/contexts/.pa/config`` is the context's
    own config (a subject's), ``/contexts/:.:/config`` the global one."""
    base, order = url(broker), json.dumps({"schema": json.dumps(ORDER)})
    register = f"{base}/contexts/.pa/subjects/orders-value/versions"
    answer = requests.post(register, data=order, headers=CT, auth=as_user("alice"), timeout=10)
    assert (answer.status_code, answer.json()) == (403, {"error_code": 40301, "message":
        "User alice is denied operation Write on Subject: :.pa:orders-value"})
    alice_may_write_prefixed(broker, ":.pa:")
    answer = requests.post(register, data=order, headers=CT, auth=as_user("alice"), timeout=10)
    assert (answer.status_code, answer.json()["id"]) == (200, 1)

    def get(path: str, user: str) -> requests.Response:
        return requests.get(f"{base}/contexts{path}", auth=as_user(user), timeout=10)

    assert get("/.pa/subjects", "alice").json() == [":.pa:orders-value"]
    assert get("/.pa/subjects", "bob").json() == []
    for path in ("/.pa/subjects/orders-value/versions", "/.pa/schemas/ids/1", "/.pa/config"):
        answer = get(path, "bob")
        assert (answer.status_code, answer.json()["error_code"]) == (403, 40301), path
    assert get("/.pa/subjects/orders-value/versions", "alice").json() == [1]
    assert get("/.pa/schemas/ids/1", "alice").json()["schema"] == json.dumps(ORDER).replace(" ", "")
    # bob may describe the global config (DESCRIBE_CONFIGS on the cluster), not .pa's
    global_config = requests.get(f"{base}/config", auth=as_user("bob"), timeout=10)
    assert get("/:.:/config", "bob").json() == global_config.json()
    assert "compatibilityLevel" in global_config.json()
