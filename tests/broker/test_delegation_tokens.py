"""Delegation tokens: Kafka 4.4's ``kafka-delegation-tokens`` makes, describes, renews and
expires them for a SCRAM user, a Java client authenticates with one (SCRAM, tokenauth=true)
and acts as the token's owner, and the refusals come with Kafka's error codes. A session
authenticated with a token outlives the token; a new login with an expired one is refused."""

from __future__ import annotations

import base64
import json
import re
import time

from confluent_kafka.admin import ScramMechanism
from kafkawire import WireClient
from scramp import ScramClient
from test_cluster import wait_for
from test_features import KAFKA_4_4, java
from test_moves import _kafka_tool
from test_sasl import AU, add_scram_user, handshake, metadata, plain, sasl_broker

from headrace.protocol import ApiKey, ErrorCode, messages

SECRET = {"delegation.token.secret.key": "a secret every broker shares"}
TOKENS = "org.apache.kafka.tools.DelegationTokenCommand"
CD = messages.CreateDelegationTokenRequest


def client_properties(path, username: str, password: str, token: bool = False):
    extra = ' tokenauth="true"' if token else ""
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="{username}" password="{password}"{extra};\n'
    )
    return str(path)


def test_token_requests_need_sasl_and_a_secret(tmp_path):
    with sasl_broker(tmp_path) as broker:  # no secret key: tokens are off
        with WireClient(broker.port) as c:  # the PLAINTEXT listener: never
            r = c.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, CD(renewers=[], max_lifetime_ms=-1))
            assert r.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            r = c.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, messages.DescribeDelegationTokenRequest(owners=None))
            assert r.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        add_scram_user(broker.bootstrap, "alice", "alice-secret", ScramMechanism.SCRAM_SHA_256)
        sasl = f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}"
        props = client_properties(tmp_path / "alice.properties", "alice", "alice-secret")
        made = _kafka_tool(TOKENS, ["--bootstrap-server", sasl, "--command-config", props, "--create",
                                    "--max-life-time-period", "-1"], version=KAFKA_4_4)
        assert made.returncode != 0 and "Delegation Token feature is not enabled" in made.stdout + made.stderr


@java
def test_kafka_delegation_tokens_and_a_client_that_authenticates_with_one(tmp_path):
    with sasl_broker(tmp_path, **SECRET) as broker:
        add_scram_user(broker.bootstrap, "alice", "alice-secret", ScramMechanism.SCRAM_SHA_256)
        broker.create_topic("t", 1)
        sasl = f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}"
        alice = client_properties(tmp_path / "alice.properties", "alice", "alice-secret")

        def tool(*args, config=alice):
            done = _kafka_tool(TOKENS, ["--bootstrap-server", sasl, "--command-config", config, *args],
                               version=KAFKA_4_4)
            return done.returncode, done.stdout + done.stderr

        code, out = tool("--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob")
        assert code == 0, out
        token_id, hmac = re.search(r"\n(\S+)\s+(\S+)\s+User:alice\s+User:alice\s+\[User:bob\]", out).groups()
        # (without --owner-principal the tool asks for no owner and lists nothing, as from Kafka)
        code, out = tool("--describe", "--owner-principal", "User:alice")
        assert code == 0 and token_id in out and hmac in out

        # a client with the token is alice: it makes a topic and lists them
        as_token = client_properties(tmp_path / "token.properties", token_id, hmac, token=True)
        made = _kafka_tool("org.apache.kafka.tools.TopicCommand", [
            "--bootstrap-server", sasl, "--command-config", as_token, "--create", "--topic", "by-token"],
            version=KAFKA_4_4)
        assert made.returncode == 0, made.stdout + made.stderr
        listed = _kafka_tool("org.apache.kafka.tools.TopicCommand", [
            "--bootstrap-server", sasl, "--command-config", as_token, "--list"], version=KAFKA_4_4)
        assert listed.returncode == 0 and {"t", "by-token"} <= set(listed.stdout.split())
        # ... but may not make or see tokens with it (Kafka's rule)
        code, out = tool("--describe", "--owner-principal", "User:alice", config=as_token)
        assert code != 0 and "UnsupportedByAuthenticationException" in out
        # a wrong HMAC authenticates no one
        wrong = client_properties(tmp_path / "wrong.properties", token_id, "AAAA" + hmac[4:], token=True)
        listed = _kafka_tool("org.apache.kafka.tools.TopicCommand", [
            "--bootstrap-server", sasl, "--command-config", wrong, "--list"], timeout=60, version=KAFKA_4_4)
        assert listed.returncode != 0 and "Authentication failed" in listed.stdout + listed.stderr

        code, out = tool("--renew", "--hmac", hmac, "--renew-time-period", "3600000")
        assert code == 0 and "Completed renew operation" in out
        code, out = tool("--expire", "--hmac", hmac, "--expiry-time-period", "-1")
        assert code == 0, out
        code, out = tool("--describe", "--owner-principal", "User:alice")
        assert code == 0 and token_id not in out
        listed = _kafka_tool("org.apache.kafka.tools.TopicCommand", [
            "--bootstrap-server", sasl, "--command-config", as_token, "--list"], timeout=60, version=KAFKA_4_4)
        assert listed.returncode != 0  # an expired token authenticates no one


@java
def test_tokens_are_bounded_and_expired_ones_removed(tmp_path):
    settings = {**SECRET, "delegation.token.max.count": "1", "delegation.token.expiry.check.interval.ms": "200"}
    with sasl_broker(tmp_path, **settings) as broker:
        add_scram_user(broker.bootstrap, "alice", "alice-secret", ScramMechanism.SCRAM_SHA_256)
        sasl = f"127.0.0.1:{broker.listener_ports['SASL_PLAINTEXT']}"
        alice = client_properties(tmp_path / "alice.properties", "alice", "alice-secret")

        def create(lifetime_ms: int):
            done = _kafka_tool(TOKENS, ["--bootstrap-server", sasl, "--command-config", alice, "--create",
                                        "--max-life-time-period", str(lifetime_ms)], version=KAFKA_4_4)
            return done.returncode, done.stdout + done.stderr

        assert create(8000)[0] == 0  # (a JVM takes seconds to start: time to try a second)
        code, out = create(-1)  # a second one: over delegation.token.max.count
        assert code != 0 and "InvalidRequestException" in out
        stored = tmp_path / "data" / "delegation_tokens.json"
        wait_for(lambda: json.loads(stored.read_text()) == {}, 15, "the expired token removed")
        assert create(-1)[0] == 0  # room again


def token_login(c, token_id: str, hmac: bytes) -> int:
    """SCRAM-SHA-256 with Kafka's ``tokenauth=true`` extension, as a Java client sends it (the
    client's proof covers the extension): the error code of the exchange."""
    assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.NONE
    client = ScramClient(["SCRAM-SHA-256"], token_id, base64.b64encode(hmac).decode())
    first = client.get_client_first() + ",tokenauth=true"
    client.client_first_bare += ",tokenauth=true"
    r = c.request(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=first.encode()))
    if r.error_code:
        return r.error_code
    client.set_server_first(r.auth_bytes.decode())
    r = c.request(ApiKey.SASL_AUTHENTICATE, 2, AU(auth_bytes=client.get_client_final().encode()))
    if r.error_code == ErrorCode.NONE:
        client.set_server_final(r.auth_bytes.decode())  # the broker knew the token's keys
    return r.error_code


def test_a_session_outlives_its_token_but_no_new_login_does(tmp_path):
    lifetime_ms = 2000
    with sasl_broker(tmp_path, **SECRET) as broker:
        port = broker.listener_ports["SASL_PLAINTEXT"]
        with WireClient(port) as alice:
            assert plain(alice, "alice", "alice-secret").error_code == ErrorCode.NONE
            made = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, CD(
                owner_principal_type=None, owner_principal_name=None, renewers=[],
                max_lifetime_ms=lifetime_ms))
        assert made.error_code == ErrorCode.NONE
        token_id, hmac = made.token_id, made.hmac
        with WireClient(port) as by_token:
            assert token_login(by_token, token_id, hmac) == ErrorCode.NONE
            assert metadata(by_token).brokers
            with WireClient(port) as again:  # a second login with the live token
                assert token_login(again, token_id, hmac) == ErrorCode.NONE
            time.sleep(max(0.0, made.max_timestamp_ms / 1000 - time.time()) + 0.5)

            # expired: the session stays (until it re-authenticates, as in Kafka) ...
            assert metadata(by_token).brokers
            # ... but a new login is refused, and the connection closed
            with WireClient(port) as late:
                assert token_login(late, token_id, hmac) == ErrorCode.SASL_AUTHENTICATION_FAILED
                assert late.closed_by_peer()
            assert metadata(by_token).brokers
