"""The documents a cluster shares in ZooKeeper, across three brokers: a delegation token made at
one broker logs a client in at the others and, expired at one, at none; a group config set at one
broker is described by the others; a document another writer left unreadable is logged by every
broker, which keeps what it knew."""

from __future__ import annotations

from kafkawire import WireClient
from test_cluster import cluster, wait_for  # noqa: F401
from test_delegation_tokens import CD, SECRET, token_login
from test_group_configs import QUICK, alter, described
from test_sasl import JAAS, plain

from headrace.protocol import ApiKey, ErrorCode, messages

SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
}


def logs_in(broker, token_id: str, hmac: bytes) -> bool:
    with WireClient(broker.listener_ports["SASL_PLAINTEXT"]) as c:
        return token_login(c, token_id, hmac) == ErrorCode.NONE


def as_alice(broker, api_key: int, version: int, request):
    with WireClient(broker.listener_ports["SASL_PLAINTEXT"]) as c:
        assert plain(c, "alice", "alice-secret").error_code == ErrorCode.NONE
        return c.request(api_key, version, request)


def test_tokens_and_group_configs_reach_every_broker(cluster, zk_client):  # noqa: F811
    brokers = cluster(3, **SASL, **SECRET, **QUICK)
    one, two, three = brokers

    made = as_alice(one, ApiKey.CREATE_DELEGATION_TOKEN, 3, CD(
        owner_principal_type=None, owner_principal_name=None, renewers=[], max_lifetime_ms=-1))
    assert made.error_code == ErrorCode.NONE
    for b in (two, three, one):
        wait_for(lambda b=b: logs_in(b, made.token_id, made.hmac), 10, "a token login at every broker")
    expired = as_alice(three, ApiKey.EXPIRE_DELEGATION_TOKEN, 2, messages.ExpireDelegationTokenRequest(
        hmac=made.hmac, expiry_time_period_ms=-1))
    assert expired.error_code == ErrorCode.NONE
    for b in brokers:
        wait_for(lambda b=b: not logs_in(b, made.token_id, made.hmac), 10, "the token gone everywhere")

    assert alter(one.port, "g", consumer_session_timeout_ms=20000) == (0, None)
    for b in (two, three):
        wait_for(lambda b=b: described(b.port, "g")["consumer.session.timeout.ms"] == ("20000", 8), 10,
                 "the group config at every broker")

    # another writer leaves the document unreadable: each broker says so and keeps what it knew
    zk_client().set("/group_configs", b"[1]")
    for b in brokers:
        wait_for(lambda b=b: any("group configs in /group_configs in ZooKeeper unreadable" in line
                                 for line in b.lines), 10, "the unreadable document logged")
        assert described(b.port, "g")["consumer.session.timeout.ms"] == ("20000", 8)
