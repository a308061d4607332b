"""Confluent's data contracts as the registry keeps them: a schema version's ``metadata``
(``tags``, ``properties``, ``sensitive``) and ``ruleSet`` (``migrationRules``, ``domainRules``,
``encodingRules``), and how a subject's config adds to them on registration. The registry
stores and answers them; it runs no rule (clients do: confluent-kafka's serializers run the
rules of the schema they write or read with).

How this works
--------------
``metadata`` and ``rule_set`` read what a request brings into Confluent's form: tags' values
and ``sensitive`` sorted without repeats, a rule's ``kind`` (TRANSFORM) and ``mode``
(WRITEREAD) filled in, empty parts left out, and nothing at all (None) when every part is
empty, as Confluent's hash of a schema counts none of them. A shape that is not Confluent's is
refused: metadata with 42201, a rule set with 42210 (a rule needs a ``name`` of at most 256
letters, digits, ``_`` and ``-`` starting with a letter or ``_``, unique in its set, and a
``type``; migration rules are UPGRADE, DOWNGRADE or UPDOWN, the others WRITE, READ or
WRITEREAD). ``kept`` is the form kept with the version and compared: compact JSON, keys
sorted, so a schema's identity (and so its id) is its type, references, text, metadata and
rule set, as in Confluent's registry.

``confluent:version`` is the metadata property Confluent's registry keeps a version's number
in (set on registration: registration.py); ``confluent_version`` reads it as Confluent does
(a Java int, else none), ``with_confluent_version`` sets or removes it.

``applied`` is Confluent's registration step: the request's own metadata (else the subject's
latest version's when it brings none), merged over the config's ``defaultMetadata``, with its
``overrideMetadata`` merged over both; the same for rule sets (a rule replaces the one of its
name). Merging is key by key (tags, properties), a union (sensitive).
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import errors
from .schema_types import LEVELS

RULE_MODES = {
    "migrationRules": ("UPGRADE", "DOWNGRADE", "UPDOWN"),
    "domainRules": ("WRITE", "READ", "WRITEREAD"),
    "encodingRules": ("WRITE", "READ", "WRITEREAD"),
}
RULE_KINDS = ("TRANSFORM", "CONDITION")
RULE_NAME_MAX = 256
CONFLUENT_VERSION = "confluent:version"
_JAVA_INT = re.compile(r"[+-]?[0-9]{1,10}")
_RULE_TEXTS = ("doc", "type", "expr", "onSuccess", "onFailure")

Document = dict[str, Any]
Config = dict[str, Any]  # a subject's or the global config: some of CONFIG_FIELDS
CONFIG_FIELDS = (
    "compatibilityLevel",
    "compatibilityGroup",
    "defaultMetadata",
    "overrideMetadata",
    "defaultRuleSet",
    "overrideRuleSet",
)


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise errors.invalid_schema(f"metadata: {what} is not a list of strings")
    return sorted(set(value))


def _string_map(value: Any, what: str, bad) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad(f"{what} is not an object of strings")
    return dict(sorted(value.items()))


def metadata(value: Any) -> Document | None:
    """A request's ``metadata`` in Confluent's form; None when it has none (42201 when it is
    not metadata)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise errors.invalid_schema("metadata: not an object")
    out: Document = {}
    tags = value.get("tags") or {}
    if not isinstance(tags, dict):
        raise errors.invalid_schema("metadata: tags is not an object")
    tags = {k: _strings(v, f"tag {k!r}") for k, v in sorted(tags.items())}
    if tags:
        out["tags"] = tags
    properties = _string_map(
        value.get("properties") or {}, "metadata: properties", errors.invalid_schema
    )
    if properties:
        out["properties"] = properties
    sensitive = _strings(value.get("sensitive") or [], "sensitive")
    if sensitive:
        out["sensitive"] = sensitive
    return out or None


def _rule(value: Any, modes: tuple[str, ...], names: set[str]) -> Document:
    bad = errors.invalid_rule_set
    if not isinstance(value, dict):
        raise bad("a rule is not an object")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise bad("a rule has no name")
    if len(name) > RULE_NAME_MAX or not (name[0].isalpha() or name[0] == "_"):
        raise bad(f"Illegal rule name: {name[:RULE_NAME_MAX]}")
    if not all(c.isalnum() or c in "_-" for c in name):
        raise bad(f"Illegal character in rule name: {name}")
    if name in names:
        raise bad(f"Found rule with duplicate name '{name}'")
    names.add(name)
    rule: Document = {"name": name}
    for key in _RULE_TEXTS:
        if value.get(key) is not None:
            if not isinstance(value[key], str):
                raise bad(f"rule {name}: {key} is not a string")
            rule[key] = value[key]
    if "type" not in rule:
        raise bad(f"rule {name}: Missing rule type")
    rule["kind"] = value.get("kind") or "TRANSFORM"
    rule["mode"] = value.get("mode") or "WRITEREAD"
    if rule["kind"] not in RULE_KINDS:
        raise bad(f"rule {name}: kind is one of {', '.join(RULE_KINDS)}")
    if rule["mode"] not in modes:
        raise bad(f"rule {name}: mode is one of {', '.join(modes)} here")
    for key in ("onSuccess", "onFailure"):
        if "," in rule.get(key, "") and rule["mode"] not in ("WRITEREAD", "UPDOWN"):
            raise bad(f"rule {name}: Multiple actions only valid with WRITEREAD and UPDOWN")
    tags = value.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise bad(f"rule {name}: tags is not a list of strings")
    if tags:
        rule["tags"] = sorted(set(tags))
    params = _string_map(value.get("params") or {}, f"rule {name}: params", bad)
    if params:
        rule["params"] = params
    if value.get("disabled") is True:
        rule["disabled"] = True
    return dict(sorted(rule.items()))


def rule_set(value: Any) -> Document | None:
    """A request's ``ruleSet`` in Confluent's form; None when it has no rule (42210 when it
    is not a rule set)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise errors.invalid_rule_set("ruleSet is not an object")
    out: Document = {}
    names: set[str] = set()
    for phase, modes in RULE_MODES.items():
        rules = value.get(phase) or []
        if not isinstance(rules, list):
            raise errors.invalid_rule_set(f"{phase} is not a list")
        if rules:
            out[phase] = [_rule(r, modes, names) for r in rules]
    return out or None


def kept(document: Document | None) -> str | None:
    """Metadata or a rule set as kept and compared: compact JSON, keys sorted; None for
    none."""
    if not document:
        return None
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def loaded(text: str | None) -> Document | None:
    return None if text is None else json.loads(text)


def confluent_version(metadata: str | None) -> str | None:
    """The ``confluent:version`` property of ``metadata`` (as kept), None when it has none."""
    return ((loaded(metadata) or {}).get("properties") or {}).get(CONFLUENT_VERSION)


def confluent_version_number(metadata: str | None) -> int | None:
    """``confluent:version`` as Confluent reads it: a Java int, else None."""
    text = confluent_version(metadata)
    if text is None or not _JAVA_INT.fullmatch(text) or not -(2**31) <= int(text) < 2**31:
        return None
    return int(text)


def with_confluent_version(metadata: str | None, number: int | None) -> str | None:
    """``metadata`` (as kept) with ``confluent:version`` set to ``number``, or removed (None)."""
    document = dict(loaded(metadata) or {})
    properties = dict(document.pop("properties", {}))
    properties.pop(CONFLUENT_VERSION, None)
    if number is not None:
        properties[CONFLUENT_VERSION] = str(number)
    if properties:
        document["properties"] = dict(sorted(properties.items()))
    return kept(document)


def has_defaults_or_overrides(config: Config) -> bool:
    """Whether a config adds metadata or rules on registration (Confluent's
    ``hasDefaultsOrOverrides``)."""
    return any(config.get(name) is not None for name in CONFIG_FIELDS[2:])


def _merge_metadata(old: Document | None, new: Document | None) -> Document | None:
    if not old or not new:
        return new or old
    out: Document = {}
    for part in ("tags", "properties"):
        merged = {**old.get(part, {}), **new.get(part, {})}
        if merged:
            out[part] = dict(sorted(merged.items()))
    sensitive = sorted(set(old.get("sensitive", [])) | set(new.get("sensitive", [])))
    if sensitive:
        out["sensitive"] = sensitive
    return out


def _merge_rule_sets(old: Document | None, new: Document | None) -> Document | None:
    if not old or not new:
        return new or old
    out: Document = {}
    for phase in RULE_MODES:
        olds, news = old.get(phase, []), new.get(phase, [])
        renamed = {r["name"] for r in news}
        merged = [r for r in olds if r["name"] not in renamed] + news
        if merged:
            out[phase] = merged
    return out


def applied(
    config: Document, own: tuple[str | None, str | None], latest: tuple[str | None, str | None]
) -> tuple[str | None, str | None]:
    """(metadata, ruleSet) kept for a registration: ``own`` the request's, ``latest`` the
    subject's latest live version's, ``config`` the subject's config in scope (all as kept)."""
    metadata_, rules = own[0] or latest[0], own[1] or latest[1]
    merged_metadata = _merge_metadata(
        _merge_metadata(config.get("defaultMetadata"), loaded(metadata_)),
        config.get("overrideMetadata"),
    )
    merged_rules = _merge_rule_sets(
        _merge_rule_sets(config.get("defaultRuleSet"), loaded(rules)),
        config.get("overrideRuleSet"),
    )
    return kept(merged_metadata), kept(merged_rules)


def config_fields(body: Any) -> Config:
    """The config fields ``body`` names (Confluent's ``compatibility`` or
    ``compatibilityLevel`` for the level), checked: 42203 for a level that is not one, or no
    field at all; 42201 / 42210 for metadata or a rule set that is not one. None: removed."""
    if not isinstance(body, dict):
        raise errors.invalid_compatibility_level()
    fields: Config = {}
    level = body.get("compatibility") or body.get("compatibilityLevel")
    if level is not None:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise errors.invalid_compatibility_level()
        fields["compatibilityLevel"] = level.upper()
    if "compatibilityGroup" in body:
        group = body["compatibilityGroup"]
        if group is not None and not isinstance(group, str):
            raise errors.invalid_schema("compatibilityGroup: not a string")
        fields["compatibilityGroup"] = group
    for name in CONFIG_FIELDS[2:]:
        if name in body:
            check = metadata if name.endswith("Metadata") else rule_set
            fields[name] = check(body[name])
    if not fields:
        raise errors.invalid_compatibility_level()
    return fields
