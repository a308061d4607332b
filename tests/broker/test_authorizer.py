"""The authorizer's decisions, as Kafka's AclAuthorizer makes them: literal, wildcard and
prefixed patterns, deny over allow, the operations an ALLOW implies, super users, the
no-ACL rule, filters, and the bounded decision cache that ACL changes empty."""

from __future__ import annotations

import pytest

from headrace.broker.security.authorizer import (
    CLUSTER,
    CLUSTER_NAME,
    GROUP,
    TOPIC,
    Acl,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    invalid,
)
from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.settings import ConfigError

ON = "kafka.security.authorizer.AclAuthorizer"
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


class Who:
    """What the authorizer reads of a session: principal and host."""

    def __init__(self, principal: str, host: str = "10.0.0.1") -> None:
        self.principal, self.host = principal, host


def authorizer(*acls: Acl, **settings) -> Authorizer:
    a = Authorizer(BrokerConfig({"authorizer.class.name": ON, **settings}))
    a.replace(acls)
    return a


def acl(name, op, principal="User:alice", perm=ALLOW, pattern=LIT, host="*", t=TOPIC):
    return Acl(t, name, pattern, principal, host, op, perm)


ALICE, BOB = Who("User:alice"), Who("User:bob")


def test_without_an_authorizer_everything_is_allowed():
    a = Authorizer(BrokerConfig({}))
    assert not a.enabled
    assert a.allows(ALICE, Operation.WRITE, TOPIC, "t")
    assert a.operations(ALICE, TOPIC, "t") == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def test_kafkas_authorizer_names_turn_it_on_and_others_are_refused():
    for name in (ON, "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        assert Authorizer(BrokerConfig({"authorizer.class.name": name})).enabled
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        BrokerConfig({"super.users": "alice"})


def test_no_acl_means_denied_unless_allow_everyone_if_no_acl_found():
    assert not authorizer().allows(ALICE, Operation.READ, TOPIC, "t")
    open_ = authorizer(**{"allow.everyone.if.no.acl.found": "true"})
    assert open_.allows(ALICE, Operation.READ, TOPIC, "t")
    # once any ACL names the resource, the rule no longer applies to it
    open_.replace([acl("t", Operation.READ, "User:bob")])
    assert not open_.allows(ALICE, Operation.READ, TOPIC, "t")
    assert open_.allows(ALICE, Operation.READ, TOPIC, "other")


def test_literal_wildcard_and_prefixed_patterns():
    a = authorizer(
        acl("orders", Operation.READ),
        acl("*", Operation.WRITE, "User:bob"),
        acl("logs-", Operation.READ, pattern=PRE),
    )
    assert a.allows(ALICE, Operation.READ, TOPIC, "orders")
    assert not a.allows(ALICE, Operation.READ, TOPIC, "orders2")
    assert a.allows(BOB, Operation.WRITE, TOPIC, "anything")
    assert a.allows(ALICE, Operation.READ, TOPIC, "logs-app")
    assert not a.allows(ALICE, Operation.READ, TOPIC, "logs")
    assert not a.allows(ALICE, Operation.READ, GROUP, "orders")  # another resource type


def test_deny_wins_over_allow_and_matches_the_wildcard_principal_and_hosts():
    a = authorizer(
        acl("orders", Operation.ALL),
        acl("orders", Operation.WRITE, "User:*", perm=DENY, host="10.0.0.9"),
    )
    assert a.allows(ALICE, Operation.WRITE, TOPIC, "orders")
    assert not a.allows(Who("User:alice", "10.0.0.9"), Operation.WRITE, TOPIC, "orders")
    assert a.allows(Who("User:alice", "10.0.0.9"), Operation.READ, TOPIC, "orders")
    b = authorizer(acl("o", Operation.READ), acl("o", Operation.ALL, perm=DENY, pattern=PRE))
    assert not b.allows(ALICE, Operation.READ, TOPIC, "orders")


def test_implied_operations():
    a = authorizer(
        acl("t", Operation.WRITE),
        acl("c", Operation.ALTER_CONFIGS),
        acl("r", Operation.READ, perm=DENY),
        acl("r", Operation.DESCRIBE),
    )
    assert a.allows(ALICE, Operation.DESCRIBE, TOPIC, "t")
    assert not a.allows(ALICE, Operation.READ, TOPIC, "t")
    assert a.allows(ALICE, Operation.DESCRIBE_CONFIGS, TOPIC, "c")
    assert not a.allows(ALICE, Operation.DESCRIBE, TOPIC, "c")
    # a DENY of READ does not deny DESCRIBE
    assert a.allows(ALICE, Operation.DESCRIBE, TOPIC, "r")
    ops = a.operations(ALICE, TOPIC, "t")
    assert ops == (1 << Operation.WRITE) | (1 << Operation.DESCRIBE)


def test_super_users_and_the_cluster_resource():
    a = authorizer(acl(CLUSTER_NAME, Operation.IDEMPOTENT_WRITE, t=CLUSTER), **{"super.users": "User:root;User:broker"})
    assert a.allows(Who("User:root"), Operation.DELETE, TOPIC, "anything")
    assert a.allows_cluster(ALICE, Operation.IDEMPOTENT_WRITE)
    assert not a.allows_cluster(BOB, Operation.IDEMPOTENT_WRITE)
    assert a.operations(ALICE, CLUSTER, CLUSTER_NAME) == 1 << Operation.IDEMPOTENT_WRITE


def test_write_on_some_topic_as_kafka_3_allows_idempotent_producers():
    a = authorizer(acl("orders", Operation.WRITE))
    assert a.allows_any(ALICE, Operation.WRITE, TOPIC)
    assert not a.allows_any(BOB, Operation.WRITE, TOPIC)
    a.replace([acl("orders", Operation.WRITE), acl("*", Operation.WRITE, perm=DENY)])
    assert not a.allows_any(ALICE, Operation.WRITE, TOPIC)


def test_the_decision_cache_is_bounded_and_emptied_when_acls_change():
    a = authorizer(acl("t", Operation.READ), **{"authorizer.cache.max.entries": "3"})
    for i in range(10):
        a.allows(ALICE, Operation.READ, TOPIC, f"t{i}")
        assert a.cached_decisions() <= 3
    assert a.cached_decisions() == 3
    assert a.allows(ALICE, Operation.READ, TOPIC, "t")
    a.replace([acl("t", Operation.READ, perm=DENY)])
    assert a.cached_decisions() == 0
    assert not a.allows(ALICE, Operation.READ, TOPIC, "t")


def test_filters_as_describe_and_delete_use_them():
    acls = [
        acl("orders", Operation.READ),
        acl("ord", Operation.WRITE, pattern=PRE),
        acl("*", Operation.DESCRIBE, "User:bob"),
        acl("g", Operation.READ, t=GROUP),
    ]
    a = authorizer(*acls)

    def find(t=ResourceType.ANY, name=None, pattern=PatternType.ANY, principal=None):
        f = AclFilter(t, name, pattern, principal, None, Operation.ANY, Permission.ANY)
        return {(x.name, x.operation) for x in a.find(f)}

    assert len(find()) == 4
    assert find(TOPIC, "orders") == {("orders", Operation.READ)}
    assert find(TOPIC, "orders", PatternType.MATCH) == {
        ("orders", Operation.READ), ("ord", Operation.WRITE), ("*", Operation.DESCRIBE)
    }
    assert find(TOPIC, None, PRE) == {("ord", Operation.WRITE)}
    assert find(principal="User:bob") == {("*", Operation.DESCRIBE)}


def test_invalid_acls_are_named():
    assert invalid(acl("t", Operation.READ)) is None
    assert "pattern" in invalid(acl("t", Operation.READ, pattern=PatternType.MATCH))
    assert "operation" in invalid(acl("t", Operation.ANY))
    assert "principal" in invalid(acl("t", Operation.READ, principal="alice"))
    assert "kafka-cluster" in invalid(acl("other", Operation.ALTER, t=CLUSTER))
    assert "resource type" in invalid(acl("t", Operation.READ, t=ResourceType.ANY))
