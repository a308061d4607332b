"""Confluent's data contracts on the schema registry, with confluent-kafka's own client and
serializers (no mocks): metadata and rule sets kept with a version and read back every way,
part of a schema's identity, found by ``get_latest_with_metadata``, completed by a config's
defaults and overrides, used by a serializer with ``use.latest.with.metadata``, kept across
restarts; shapes that are not Confluent's refused; and the READONLY_OVERRIDE mode.
"""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    MetadataTags,
    Rule,
    RuleKind,
    RuleMode,
    RuleParams,
    RuleSet,
    Schema,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.schema_registry_client import ServerConfig
from confluent_kafka.serialization import MessageField, SerializationContext

# the registry's broker of test_registry_clients (a broker of this module's own)
from tests.broker.test_registry_clients import (  # noqa: F401
    broker,
    every_version,
    kept_across_restarts,
    registry_url,
    round_trip,
)


def record(name: str, *optional: str) -> str:
    fields = [{"name": "id", "type": "long"}]
    fields += [{"name": f, "type": "string", "default": ""} for f in optional]
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": fields})


def metadata(properties: dict[str, str], tags=None, sensitive=()) -> Metadata:
    """As the client reads metadata back (no tags: None; no sensitive: [])."""
    return Metadata(
        MetadataTags(tags) if tags else None, MetadataProperties(properties), list(sensitive)
    )


def rule(name: str, **kw) -> Rule:
    fields = {"doc": None, "kind": None, "mode": None, "type": "CEL", "tags": None,
              "params": None, "expr": None, "on_success": None, "on_failure": None,
              "disabled": None}  # fmt: skip
    return Rule(name=name, **{**fields, **kw})


def domain_rules(*rules: Rule) -> RuleSet:
    """As the client reads a rule set back (no rules of a kind: [])."""
    return RuleSet(migration_rules=[], domain_rules=list(rules), encoding_rules=[])


def fresh(b) -> SchemaRegistryClient:
    """A client with nothing cached: what it reads comes from the registry."""
    return SchemaRegistryClient({"url": registry_url(b)})


def refused(call, status: int, code: int) -> None:
    with pytest.raises(SchemaRegistryError) as e:
        call()
    assert (e.value.http_status_code, e.value.error_code) == (status, code), e.value


def test_metadata_and_rule_sets_are_kept_and_read_back_every_way(broker):  # noqa: F811
    md = metadata({"owner": "ann", "app.version": "1"}, {"id": ["PII"]}, ["id"])
    rules = domain_rules(
        rule("checkId", kind=RuleKind.CONDITION, mode=RuleMode.WRITE, expr="message.id > 0"),
        rule(
            "mask",
            kind=RuleKind.TRANSFORM,
            mode=RuleMode.WRITEREAD,
            tags=["PII"],
            params=RuleParams({"k": "v"}),
            disabled=True,
        ),
    )
    schema = Schema(record("Kept"), "AVRO", metadata=md, rule_set=rules)
    schema_id = fresh(broker).register_schema("kept-value", schema)

    def same(got: Schema) -> None:
        assert got.metadata == md
        assert got.rule_set == rules

    c = fresh(broker)
    same(c.get_version("kept-value", 1).schema)
    same(fresh(broker).get_latest_version("kept-value").schema)
    same(fresh(broker).get_schema(schema_id))
    assert fresh(broker).lookup_schema("kept-value", schema).version == 1
    # as Confluent writes them: keys sorted, a rule's kind and mode filled in
    body = requests.get(f"{registry_url(broker)}/subjects/kept-value/versions/1", timeout=10).json()
    assert body["metadata"] == {
        "properties": {"app.version": "1", "owner": "ann"},
        "sensitive": ["id"],
        "tags": {"id": ["PII"]},
    }
    assert body["ruleSet"]["domainRules"][1] == {
        "disabled": True,
        "kind": "TRANSFORM",
        "mode": "WRITEREAD",
        "name": "mask",
        "params": {"k": "v"},
        "tags": ["PII"],
        "type": "CEL",
    }


def test_the_same_text_with_other_metadata_is_another_version_and_id(broker):  # noqa: F811
    c = fresh(broker)
    v1 = Schema(record("Same"), "AVRO", metadata=metadata({"app": "1"}))
    v2 = Schema(record("Same"), "AVRO", metadata=metadata({"app": "2"}))
    first = c.register_schema("same-value", v1)
    assert fresh(broker).register_schema("same-value", v1) == first  # the same: no new version
    second = fresh(broker).register_schema("same-value", v2)
    assert second != first
    with_rules = Schema(
        record("Same"), "AVRO", metadata=v2.metadata, rule_set=domain_rules(rule("r"))
    )
    third = fresh(broker).register_schema("same-value", with_rules)
    assert third not in (first, second)
    assert fresh(broker).get_versions("same-value") == [1, 2, 3]
    # the text alone takes the latest version's metadata and rules, as in Confluent's: no new
    # version
    assert fresh(broker).register_schema("same-value", Schema(record("Same"), "AVRO")) == third
    # one id for one (text, metadata, rule set) in every subject
    assert fresh(broker).register_schema("other-value", v1) == first


def test_get_latest_with_metadata(broker):  # noqa: F811
    c = fresh(broker)
    for i, (text, app) in enumerate([(record("L"), "1"), (record("L", "a"), "2"),
                                     (record("L", "a", "b"), "1")]):  # fmt: skip
        c.register_schema(
            "latest-value", Schema(text, "AVRO", metadata=metadata({"app": app, "n": str(i)}))
        )
    found = fresh(broker).get_latest_with_metadata("latest-value", {"app": "1"})
    assert (found.version, found.schema.metadata.properties.properties["n"]) == (3, "2")
    found = fresh(broker).get_latest_with_metadata("latest-value", {"app": "2", "n": "1"})
    assert found.version == 2
    refused(
        lambda: fresh(broker).get_latest_with_metadata("latest-value", {"app": "3"}), 404, 40403
    )
    refused(lambda: fresh(broker).get_latest_with_metadata("nobody", {"app": "1"}), 404, 40401)


def test_a_configs_defaults_and_overrides_complete_a_registration(broker):  # noqa: F811
    c = fresh(broker)
    c.set_config(
        "configured-value",
        ServerConfig(
            default_metadata=metadata({"owner": "team", "tier": "2"}),
            override_metadata=metadata({"tier": "1"}),
            default_rule_set=domain_rules(rule("checked")),
        ),
    )
    config = fresh(broker).get_config("configured-value")
    assert config.override_metadata == metadata({"tier": "1"})
    assert config.compatibility_level.value == "BACKWARD"
    # brought nothing: the defaults, under the overrides
    c.register_schema("configured-value", Schema(record("C"), "AVRO"))
    got = fresh(broker).get_latest_version("configured-value").schema
    assert got.metadata.properties.properties == {"owner": "team", "tier": "1"}
    assert [r.name for r in got.rule_set.domain_rules] == ["checked"]
    # brought its own: merged over the defaults, the overrides over both
    own = Schema(record("C", "x"), "AVRO", metadata=metadata({"owner": "ann", "tier": "3"}))
    c.register_schema("configured-value", own)
    got = fresh(broker).get_latest_version("configured-value").schema
    assert got.metadata.properties.properties == {"owner": "ann", "tier": "1"}
    # a lookup of what was sent finds the version it became
    assert fresh(broker).lookup_schema("configured-value", own).version == 2
    # the global config applies to subjects without their own
    c.set_config(config=ServerConfig(override_metadata=metadata({"domain": "shop"})))
    try:
        c.register_schema("global-value", Schema(record("G"), "AVRO"))
        got = fresh(broker).get_latest_version("global-value").schema
        assert got.metadata.properties.properties == {"domain": "shop"}
    finally:
        requests.put(f"{registry_url(broker)}/config", json={"overrideMetadata": None}, timeout=10)
    assert (
        "overrideMetadata" not in requests.get(f"{registry_url(broker)}/config", timeout=10).json()
    )


def test_a_compatibility_group_compares_within_its_group(broker):  # noqa: F811
    c = fresh(broker)
    c.set_config("grouped-value", ServerConfig(compatibility_group="major"))
    c.register_schema(
        "grouped-value", Schema(record("G"), "AVRO", metadata=metadata({"major": "1"}))
    )
    breaking = json.dumps({"type": "record", "name": "G", "namespace": "shop",
                           "fields": [{"name": "id", "type": "string"}]})  # fmt: skip
    refused(
        lambda: fresh(broker).register_schema(
            "grouped-value", Schema(breaking, "AVRO", metadata=metadata({"major": "1"}))
        ),
        409,
        409,
    )
    major2 = Schema(breaking, "AVRO", metadata=metadata({"major": "2"}))
    # POST /compatibility compares within the group of the metadata the request brings
    assert not c.test_compatibility(
        "grouped-value", Schema(breaking, "AVRO", metadata=metadata({"major": "1"}))
    )
    assert c.test_compatibility("grouped-value", major2)
    assert fresh(broker).register_schema("grouped-value", major2) > 0


def test_a_serializer_writes_with_the_version_its_metadata_names(broker):  # noqa: F811
    c = fresh(broker)
    subject, topic = "pinned-value", "pinned"
    ids = [
        c.register_schema(subject, Schema(text, "AVRO", metadata=metadata({"app.version": v})))
        for text, v in [(record("P"), "1"), (record("P", "note"), "2")]
    ]
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"auto.register.schemas": False, "use.latest.with.metadata": {"app.version": "1"}}
    serializer = AvroSerializer(fresh(broker), None, conf=conf)
    payloads = [serializer({"id": i}, ctx) for i in range(3)]
    assert {int.from_bytes(p[1:5], "big") for p in payloads} == {ids[0]}
    got = round_trip(broker, topic, payloads)
    reader = AvroDeserializer(
        fresh(broker), None, conf={"use.latest.with.metadata": {"app.version": "2"}}
    )
    assert [reader(v, ctx) for v in got] == [{"id": i, "note": ""} for i in range(3)]


def test_shapes_that_are_not_confluents_are_refused_with_its_codes(broker):  # noqa: F811
    c = fresh(broker)
    bad_rule = Schema(record("Bad"), "AVRO", rule_set=domain_rules(rule("not a name")))
    refused(lambda: c.register_schema("bad-value", bad_rule), 422, 42210)
    dup = Schema(record("Bad"), "AVRO", rule_set=domain_rules(rule("r"), rule("r")))
    refused(lambda: c.register_schema("bad-value", dup), 422, 42210)
    migration = RuleSet(migration_rules=[rule("up", mode=RuleMode.WRITE)], domain_rules=None)
    refused(
        lambda: c.register_schema("bad-value", Schema(record("Bad"), "AVRO", rule_set=migration)),
        422,
        42210,
    )
    url = registry_url(broker)
    for body, code in [
        ({"schema": record("Bad"), "metadata": {"properties": {"n": 1}}}, 42201),
        ({"schema": record("Bad"), "metadata": ["x"]}, 42201),
        ({"schema": record("Bad"), "ruleSet": {"domainRules": [{"name": "r"}]}}, 42210),
    ]:
        r = requests.post(f"{url}/subjects/bad-value/versions", json=body, timeout=10)
        assert (r.status_code, r.json()["error_code"]) == (422, code), r.text
    r = requests.put(
        f"{url}/config/bad-value", json={"defaultRuleSet": {"domainRules": 1}}, timeout=10
    )
    assert (r.status_code, r.json()["error_code"]) == (422, 42210), r.text
    assert requests.get(f"{url}/subjects/bad-value/versions", timeout=10).status_code == 404


def test_readonly_override_refuses_every_write_whatever_a_subjects_mode(broker):  # noqa: F811
    c = fresh(broker)
    c.register_schema("guarded-value", Schema(record("R"), "AVRO"))
    c.update_mode("guarded-value", "READWRITE")
    assert c.update_global_mode("READONLY_OVERRIDE") == "READONLY_OVERRIDE"
    try:
        assert fresh(broker).get_mode("guarded-value") == "READONLY_OVERRIDE"
        for write in (
            lambda: c.register_schema("guarded-value", Schema(record("R", "x"), "AVRO")),
            lambda: c.register_schema("new-value", Schema(record("N"), "AVRO")),
            lambda: c.delete_version("guarded-value", 1),
            lambda: c.delete_subject("guarded-value"),
            lambda: c.set_config("guarded-value", ServerConfig(compatibility_group="x")),
            lambda: c.set_config(config=ServerConfig(compatibility_group="x")),
        ):
            refused(write, 422, 42205)
        assert fresh(broker).get_latest_version("guarded-value").version == 1  # reads go on
    finally:
        assert c.update_global_mode("READWRITE") == "READWRITE"  # the way out
    assert fresh(broker).register_schema("new-value", Schema(record("N"), "AVRO")) > 0
    # on one subject it is READONLY there
    c.update_mode("guarded-value", "READONLY_OVERRIDE")
    refused(
        lambda: c.register_schema("guarded-value", Schema(record("R", "x"), "AVRO")), 422, 42205
    )
    c.update_mode("guarded-value", "READWRITE")
    refused(lambda: c.update_global_mode("SLEEPING"), 422, 42204)


def test_a_restart_keeps_metadata_rule_sets_and_configs(broker):  # noqa: F811
    """(After the tests above, on the same broker.) A clean stop and a SIGKILL."""

    def snapshot():
        out = every_version(
            fresh(broker), lambda r: (r.schema_id, r.schema.metadata, r.schema.rule_set)
        )
        config = requests.get(f"{registry_url(broker)}/config/configured-value", timeout=10).json()
        return out, config

    before = kept_across_restarts(broker, snapshot)
    assert before[0][("kept-value", 1)][2] is not None
    assert "defaultRuleSet" in before[1]
