"""The schema registry against a hostile client: every table and input is bounded by a
setting (schema.registry.max.*), and what passes a bound is refused with Confluent's error
body, the broker serving on."""

from __future__ import annotations

import json

import pytest
import requests

from headrace.broker.tools.process import BrokerProcess

CT = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("registry-bounds"),
        {
            "schema.registry.listeners": "http://127.0.0.1:0",
            "schema.registry.max.schemas": 6,
            "schema.registry.max.subjects": 3,
            "schema.registry.max.schema.bytes": 4000,
            "schema.registry.max.request.bytes": 20000,
            "schema.registry.max.total.schema.bytes": 12000,
            "schema.registry.max.connections": 4,
        },
    ).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def url(broker):
    return f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"


@pytest.fixture(scope="module")
def broker_port(broker):
    return broker.port


def post(url: str, path: str, body) -> requests.Response:
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return requests.post(url + path, data=data, headers={"Content-Type": CT}, timeout=30)


def record(name: str, fields: int = 1) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": name,
            "fields": [{"name": f"f{i}", "type": "int", "default": 0} for i in range(fields)],
        }
    )


def error(r: requests.Response, status: int, code: int) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code, r.text
    return r.json()["message"]


def test_a_body_above_the_request_bound_is_413(url):
    r = post(url, "/subjects/big/versions", {"schema": "x" * 30000})
    error(r, 413, 413)
    assert requests.get(url + "/subjects", timeout=10).status_code == 200


def test_a_schema_above_the_schema_bound_is_42209(url):
    message = error(post(url, "/subjects/big/versions", {"schema": record("Big", 200)}), 422, 42209)
    assert "schema.registry.max.schema.bytes" in message


def test_metadata_and_rule_sets_count_towards_the_schema_bound(url):
    """A small text with metadata or rules that bring it past max.schema.bytes (4000) is 42209,
    whether the request or its subject's config brings them."""
    small = record("Small")
    properties = {f"k{i}": "v" * 40 for i in range(100)}  # about 5000 bytes
    body = {"schema": small, "metadata": {"properties": properties}}
    assert "schema.registry.max.schema.bytes" in error(
        post(url, "/subjects/big/versions", body), 422, 42209
    )
    rules = [{"name": f"r{i}", "type": "CEL", "expr": "x" * 40} for i in range(80)]
    body = {"schema": small, "ruleSet": {"domainRules": rules}}
    error(post(url, "/subjects/big/versions", body), 422, 42209)
    config = {"overrideMetadata": {"properties": properties}}
    assert requests.put(url + "/config/big", json=config, timeout=10).ok
    try:
        error(post(url, "/subjects/big/versions", {"schema": small}), 422, 42209)
    finally:
        assert requests.delete(url + "/config/big", timeout=10).ok
    assert requests.get(url + "/subjects/big/versions", timeout=10).status_code == 404


def test_nesting_bombs_are_refused_not_crashes(url):
    deep = "[" * 5000 + "]" * 5000
    error(post(url, "/subjects/deep/versions", deep), 400, 400)
    nested = '{"schema": ' + json.dumps("[" * 1500 + '"int"' + "]" * 1500) + "}"
    error(post(url, "/subjects/deep/versions", nested), 422, 42201)
    js = json.dumps({"schema": '{"items":' * 1500 + "{}" + "}" * 1500, "schemaType": "JSON"})
    r = post(url, "/subjects/deep/versions", js)
    assert r.status_code in (413, 422), r.text  # refused, whichever bound it meets first


def test_versions_and_subjects_are_bounded(url):
    for i in range(3):
        assert post(url, "/subjects/s1/versions", {"schema": record("R", i + 1)}).ok
    for subject in ("s2", "s3"):
        assert post(url, f"/subjects/{subject}/versions", {"schema": record("R", 1)}).ok
    message = error(post(url, "/subjects/s4/versions", {"schema": record("R", 1)}), 422, 42205)
    assert "schema.registry.max.subjects" in message
    assert post(url, "/subjects/s1/versions", {"schema": record("R", 4)}).ok  # the 6th version
    message = error(post(url, "/subjects/s1/versions", {"schema": record("R", 5)}), 422, 42205)
    assert "schema.registry.max.schemas" in message
    # subject-level settings are bounded too: three subjects may have one
    for subject in ("c1", "c2", "c3"):
        r = requests.put(url + f"/config/{subject}", json={"compatibility": "NONE"}, timeout=10)
        assert r.ok, r.text
    r = requests.put(url + "/config/c4", json={"compatibility": "NONE"}, timeout=10)
    error(r, 422, 42205)
    # deleting for good makes room again
    for path in ("/subjects/s3", "/subjects/s3?permanent=true"):
        assert requests.delete(url + path, timeout=10).ok
    assert post(url, "/subjects/s4/versions", {"schema": record("R", 1)}).ok


def test_the_bytes_of_all_schemas_are_bounded(url):
    """(After the tests above.) Distinct schema texts add up to at most 12000 bytes."""
    for path in ("/subjects/s1", "/subjects/s1?permanent=true"):  # room for versions
        assert requests.delete(url + path, timeout=10).ok
    sizes = [len(record("R", 80 + i)) for i in range(4)]
    assert all(3000 < n < 4000 for n in sizes)  # each within max.schema.bytes
    for i in range(3):
        assert post(url, "/subjects/s1/versions", {"schema": record("R", 80 + i)}).ok
    r = post(url, "/subjects/s1/versions", {"schema": record("R", 83)})
    assert "schema.registry.max.total.schema.bytes" in error(r, 422, 42205)


def test_records_written_to_schemas_by_a_client_cannot_break_the_registry(url, broker_port):
    """Junk produced straight to _schemas is skipped; the registry reads on and serves."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker_port}"})
    for key, value in [
        (b"junk", b"{"),
        (b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}', b"[]"),
        (b'{"keytype":"SCHEMA","subject":"x"}', b'{"subject":"x"}'),
        (b'{"keytype":"WHATEVER","magic":9}', b"{}"),
        (None, b"no key"),
    ]:
        producer.produce("_schemas", key=key, value=value)
    assert producer.flush(10) == 0
    # (a write waits until the leader's view holds the whole log: the junk is read by then)
    assert post(url, "/subjects/s2/versions", {"schema": record("R", 1)}).ok
    r = requests.get(url + "/subjects", timeout=10)
    assert r.status_code == 200 and "x" not in r.json()


def test_contexts_are_bounded(url):
    """(After the tests above.) At most three contexts are recorded (max.subjects): a context
    stays recorded when its subjects go, so a fourth is refused until one is deleted."""
    for subject in ("s2", "s4"):  # room for subjects
        for path in (f"/subjects/{subject}", f"/subjects/{subject}?permanent=true"):
            assert requests.delete(url + path, timeout=10).ok
    for i in (1, 2, 3):
        assert post(url, f"/subjects/:.b{i}:s/versions", {"schema": record("R", 1)}).ok
        for path in (f"/subjects/:.b{i}:s", f"/subjects/:.b{i}:s?permanent=true"):
            assert requests.delete(url + path, timeout=10).ok
    r = post(url, "/subjects/:.b4:s/versions", {"schema": record("R", 1)})
    assert "3 contexts" in error(r, 422, 42205)
    assert requests.delete(url + "/contexts/.b1", timeout=10).status_code == 204
    assert post(url, "/subjects/:.b4:s/versions", {"schema": record("R", 1)}).ok
    contexts = requests.get(url + "/contexts", timeout=10).json()
    assert contexts == [".", ".b2", ".b3", ".b4"]


def test_connections_are_bounded(url):
    """Four connections may be open at once; a fifth is closed without an answer, and once
    one of the four goes, a new one is served."""
    import socket
    import time

    port = int(url.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        for s in held:  # each one answered (and kept alive): the registry has counted it
            s.settimeout(5)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(5)
        extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            assert extra.recv(100) == b""  # closed
        except ConnectionResetError:
            pass
        extra.close()
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            r = requests.get(url + "/", timeout=5)
            break
        except requests.ConnectionError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert r.json() == {}
