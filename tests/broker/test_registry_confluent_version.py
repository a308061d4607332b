"""The metadata property ``confluent:version`` against a real broker, as Confluent's registry
keeps it: set to a version's number when a registration names a version or brings (or
inherits) the property; lookups and registrations find a version whose property is the only
difference. Plain HTTP (the sequence of Confluent's own ``testConfluentVersion``) and
confluent-kafka's ``SchemaRegistryClient``."""

from __future__ import annotations

import pytest
import registryhttp
from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    Schema,
    SchemaRegistryClient,
)
from registryhttp import call

CV = "confluent:version"
TEXT = '{"type":"record","name":"myrecord","fields":[{"name":"f1","type":"string"}]}'


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    b = registryhttp.start(tmp_path_factory.mktemp("registry-confluent-version"))
    yield registryhttp.url(b)
    b.kill()


def body(version=None, cv=None, **properties) -> dict:
    out: dict = {"schema": TEXT}
    if version is not None:
        out["version"] = version
    if cv is not None:
        properties[CV] = cv
    if cv is not None or properties:
        out["metadata"] = {"properties": properties}
    return out


def test_confluent_version_as_confluents_registry_keeps_it(base):
    def register(b: dict) -> tuple[int, int]:
        got = call(base, "POST", "/subjects/cv/versions", b)
        return got["id"], got["version"]

    def latest() -> tuple[int, dict | None]:
        got = call(base, "GET", "/subjects/cv/versions/latest")
        return got["version"], (got.get("metadata") or {}).get("properties")

    def lookup(b: dict) -> tuple[int, dict | None]:
        got = call(base, "POST", "/subjects/cv", b)
        return got["version"], (got.get("metadata") or {}).get("properties")

    id1, _ = register(body())
    assert latest() == (1, None)
    assert register(body(version=-1)) == (id1, 1)  # -1: the latest, found as sent
    id2, v2 = register(body(version=2))  # a version named: the property set to it
    assert (id2 != id1, v2, latest()) == (True, 2, (2, {CV: "2"}))
    assert register(body(version=-1)) == (id2, 2)  # the latest, differing only by the property
    # lookups: the same schema first (version 1), else one differing only by the property
    assert lookup(body()) == (1, None)
    assert lookup(body(cv="1")) == (1, None)  # (the property names the version it finds)
    assert lookup(body(cv="2")) == (2, {CV: "2"})
    call(base, "DELETE", "/subjects/cv/versions/1")
    assert lookup(body()) == (2, {CV: "2"})
    assert register(body()) == (id2, 2)
    id3, _ = register(body(version=3))
    assert register(body(version=-1))[1] == 3
    assert latest() == (3, {CV: "3"})
    # a version that is not the next one: Confluent's 42201
    error = call(base, "POST", "/subjects/cv/versions", body(version=3), status=422)
    assert error == {
        "error_code": 42201,
        "message": "Version is not one more than previous version",
    }
    assert register(body(version=4))[1] == 4
    assert lookup(body()) == (4, {CV: "4"})
    # the property in a registration: a version whose property it is answers; any other value
    # (each time) is replaced by the new version's number
    assert register(body(cv="-1"))[1] == 5
    assert latest() == (5, {CV: "5"})
    assert register(body(cv="2")) == (id2, 2)
    assert register(body(cv="3")) == (id3, 3)
    assert register(body(cv="0"))[1] == 6
    assert register(body(cv="not a number"))[1] == 7
    assert latest() == (7, {CV: "7"})
    assert register({**body(), "metadata": {"properties": {}}})[1] == 7  # (empty: none)
    # other metadata: a new version without the property; version -1 then adds it
    assert register(body(mykey="myvalue"))[1] == 8
    assert latest() == (8, {"mykey": "myvalue"})
    assert register(body(version=-1))[1] == 9
    assert latest() == (9, {CV: "9", "mykey": "myvalue"})  # (the latest's metadata inherited)
    assert lookup(body(mykey="myvalue")) == (8, {"mykey": "myvalue"})
    call(base, "DELETE", "/subjects/cv/versions/8")
    assert lookup(body(mykey="myvalue")) == (9, {CV: "9", "mykey": "myvalue"})
    # a version that is no Java int: 42201, nothing registered
    for bad in ("2", 2**31, 1.5, True, [1]):
        error = call(base, "POST", "/subjects/cv/versions", body(version=bad), status=422)
        assert error["error_code"] == 42201
    assert call(base, "GET", "/subjects/cv/versions") == [2, 3, 4, 5, 6, 7, 9]


def test_confluent_version_through_the_client(base):
    client = SchemaRegistryClient({"url": base})
    subject = "cv-client"
    first = client.register_schema(subject, Schema(TEXT, "AVRO"))
    # a registration naming version 1 through the property finds version 1
    named = Schema(TEXT, "AVRO", metadata=Metadata(None, MetadataProperties({CV: "1"}), None))
    assert SchemaRegistryClient({"url": base}).register_schema(subject, named) == first
    assert client.get_versions(subject) == [1]
    # any other value: a new version, whose property is its number
    other = Schema(TEXT, "AVRO", metadata=Metadata(None, MetadataProperties({CV: "0"}), None))
    second = client.register_schema(subject, other)
    assert second != first
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema.metadata.properties.properties) == (2, {CV: "2"})
    # (plain HTTP: confluent-kafka 2.16.1's get_latest_with_metadata quotes keys twice, so
    # "confluent:version" arrives as "confluent%3Aversion", at Confluent's registry too)
    by_property = call(base, "GET", f"/subjects/{subject}/metadata?key={CV}&value=2")
    assert (by_property["version"], by_property["id"]) == (2, second)
    # a lookup of the bare schema finds version 1 (the same schema) first
    found = SchemaRegistryClient({"url": base}).lookup_schema(subject, Schema(TEXT, "AVRO"))
    assert found.version == 1
