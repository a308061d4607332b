"""A live broker under hostile frames over real sockets: on a PLAINTEXT listener, on a
SASL_PLAINTEXT listener before authentication and after a PLAIN authentication, over TLS on a
SASL_SSL listener before and after a SCRAM authentication, and SCRAM exchanges whose client
messages are mutated. Every request
version the broker serves, built valid, then mutated (bit flips, truncations, huge length
prefixes, negative counts, hostile frame sizes). Afterwards the broker still answers
ApiVersions, no handler failed (UNKNOWN_SERVER_ERROR), its RSS stayed bounded, and kafka-python
still produces and fetches. The long run is ``python -m bench.fuzz --target broker``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import fuzz  # noqa: E402
from headrace.broker.tools.process import BrokerProcess  # noqa: E402

EXAMPLES = 200


@pytest.fixture
def started(tmp_path):
    settings, ca = fuzz.broker_settings(tmp_path / "pki")
    with BrokerProcess(tmp_path / "data", settings) as b:
        yield b, ca


@pytest.fixture
def broker(started):
    return started[0]


def test_hostile_frames_before_and_after_authentication_leave_the_broker_serving(started):
    broker, ca = started
    fuzz.well_behaved_client(broker.bootstrap)  # warm: RSS is measured from here
    run = fuzz.BrokerFuzz(broker, ca)
    run.property(EXAMPLES, derandomize=True)()
    print(f"{run.tried} inputs tried: {run.kinds}")
    assert run.tried >= EXAMPLES
    kinds = ("plaintext", "sasl", "authenticated", "tls", "tls-authenticated", "tls-port-plain",
             "scram", "scram-tls")
    assert all(run.kinds.get(k) for k in kinds), run.kinds
    run.check()  # ApiVersions answered, no handler failure, RSS within the bound
    assert broker.alive
    fuzz.well_behaved_client(broker.bootstrap)


def test_the_fuzz_checks_see_an_authenticated_connection_and_a_closed_one(broker):
    """What the harness relies on: PLAIN succeeds for its user, and garbage before
    authentication is met with a closed connection rather than an answer."""
    import socket

    with socket.create_connection(("127.0.0.1", broker.listener_ports["SASL_PLAINTEXT"]), 10) as s:
        fuzz.authenticate(s)
        resp = fuzz._call(s, 18, 0, fuzz.messages.ApiVersionsRequest())
        assert resp[4:6] == b"\x00\x00"
    with socket.create_connection(("127.0.0.1", broker.listener_ports["SASL_PLAINTEXT"]), 10) as s:
        s.sendall(fuzz.frame(3, 12, 1, b"\xff" * 8))  # Metadata before authentication
        s.settimeout(10)
        assert s.recv(100) == b""


def test_the_fuzz_checks_see_scram_over_tls_accept_its_user_and_refuse_a_forged_proof(started):
    """What the SCRAM and TLS cases rely on: the harness's user authenticates with SCRAM over
    TLS, and a client-final message with a proof of its own making is refused."""
    broker, ca = started
    run = fuzz.BrokerFuzz(broker, ca)
    with run._connect("tls-authenticated") as s:
        assert fuzz.scram_exchange(s, "SCRAM-SHA-512", None, None)
        resp = fuzz._call(s, 18, 0, fuzz.messages.ApiVersionsRequest())
        assert resp[4:6] == b"\x00\x00"
    with run._connect("sasl") as s:
        assert fuzz.scram_exchange(s, "SCRAM-SHA-256", None, None)
    with run._connect("scram-tls") as s:
        # the right nonce is not known here, so any forged final message must fail
        assert not fuzz.scram_exchange(s, "SCRAM-SHA-256", None, b"c=biws,r=forged,p=" + b"A" * 44)


def test_metadata_before_v12_with_a_nameless_topic_closes_the_connection(broker):
    """Found by the fuzzer: a v10/v11 topic given by ID alone (name null) made the broker fail
    encoding its response (the name is not nullable before v12) and log UNKNOWN_SERVER_ERROR.
    Kafka refuses such a request; Headrace closes the connection and keeps serving."""
    import socket
    import uuid

    topic = fuzz.messages.MetadataRequest.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())
    for version in (10, 11):
        with socket.create_connection(("127.0.0.1", broker.port), 10) as s:
            body = fuzz.encode_request(3, version, fuzz.messages.MetadataRequest(topics=[topic]))
            s.sendall(fuzz.frame(3, version, 1, body))
            s.settimeout(10)
            assert s.recv(100) == b""
    assert not [line for line in broker.lines if fuzz.FAILED in line]
    assert fuzz.answers_api_versions(broker.port)
