"""The records of ``_schemas``, in Confluent's Schema Registry's JSON layouts (so a
Confluent registry reading the topic, or a tool dumping it, finds what it expects).

Keys (a compacted topic: the last record of a key is what stays):

* ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``: a subject's version; the value
  ``{"subject","version","id","schemaType"?,"references"?,"metadata"?,"ruleSet"?,"schema",
  "deleted"}`` (schemaType left out for AVRO; metadata and ruleSet as contracts.py keeps
  them); ``deleted`` true is a soft delete; no value (a tombstone) is a permanent delete;
* ``{"keytype":"CONFIG","subject":S|null,"magic":0}``: a config, global (null) or a
  subject's; value ``{"compatibilityLevel"?, "compatibilityGroup"?, "defaultMetadata"?,
  "overrideMetadata"?, "defaultRuleSet"?, "overrideRuleSet"?}`` (contracts.CONFIG_FIELDS),
  none: back to the default;
* ``{"keytype":"MODE","subject":S|null,"magic":0}``: a mode; value ``{"mode": M}``;
* ``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``: a subject soft-deleted; value
  ``{"subject": S, "version": V}``: its versions up to V are deleted;
* ``{"keytype":"CONTEXT","tenant":"default","context":C,"magic":0}``: a named context
  (``.ctx``) exists; value ``{"tenant":"default","context":C}``, written before the first
  schema registered in it; a tombstone when it is deleted;
* ``{"keytype":"NOOP","magic":0}``: nothing (Confluent's registry writes it to sync).

Subjects are written qualified (``:.ctx:name``, contexts.py), a context's own config and mode
under ``:.ctx:``, as Confluent's registry writes them; ids are per context.

``decode`` turns a record into a change (one of the dataclasses below), None for a key it
does not know; a ValueError for a record that is not what its key says (metadata, rule sets
and configs as contracts.py checks a request's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import contracts
from .contracts import Config
from .errors import RegistryError

Reference = tuple[str, str, int]  # name, subject, version


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    deleted: bool
    metadata: str | None = None  # as kept (contracts.kept)
    rule_set: str | None = None


@dataclass(frozen=True, slots=True)
class SchemaRemoved:  # a SCHEMA tombstone: the version is gone for good
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    subject: str | None
    config: Config | None  # None: the setting removed


@dataclass(frozen=True, slots=True)
class ModeRecord:
    subject: str | None
    mode: str | None


@dataclass(frozen=True, slots=True)
class SubjectDeleted:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ContextRecord:
    context: str  # ".ctx"
    present: bool  # False: a tombstone, the context deleted


Change = SchemaRecord | SchemaRemoved | ConfigRecord | ModeRecord | SubjectDeleted | ContextRecord
TENANT = "default"  # Confluent's default tenant, the one a self-managed registry has


def _dump(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def schema_value(r: SchemaRecord) -> bytes:
    value: dict[str, object] = {"subject": r.subject, "version": r.version, "id": r.id}
    if r.schema_type != "AVRO":
        value["schemaType"] = r.schema_type
    if r.references:
        value["references"] = [{"name": n, "subject": s, "version": v} for n, s, v in r.references]
    if r.metadata is not None:
        value["metadata"] = json.loads(r.metadata)
    if r.rule_set is not None:
        value["ruleSet"] = json.loads(r.rule_set)
    value["schema"] = r.schema
    value["deleted"] = r.deleted
    return _dump(value)


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})


def config_value(config: Config) -> bytes:
    return _dump(config)


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def context_key(context: str) -> bytes:
    return _dump({"keytype": "CONTEXT", "tenant": TENANT, "context": context, "magic": 0})


def context_value(context: str) -> bytes:
    return _dump({"tenant": TENANT, "context": context})


def encode(change: Change) -> tuple[bytes, bytes | None]:
    """The (key, value) of a change."""
    if isinstance(change, SchemaRecord):
        return schema_key(change.subject, change.version), schema_value(change)
    if isinstance(change, SchemaRemoved):
        return schema_key(change.subject, change.version), None
    if isinstance(change, ConfigRecord):
        value = None if change.config is None else config_value(change.config)
        return config_key(change.subject), value
    if isinstance(change, ModeRecord):
        return mode_key(change.subject), None if change.mode is None else mode_value(change.mode)
    if isinstance(change, ContextRecord):
        value = context_value(change.context) if change.present else None
        return context_key(change.context), value
    return delete_subject_key(change.subject), delete_subject_value(change.subject, change.version)


def decode(key: bytes, value: bytes | None) -> Change | None:
    try:
        return _decode(key, value)
    except RegistryError as e:
        raise ValueError(e.message) from None


def _decode(key: bytes, value: bytes | None) -> Change | None:
    k = json.loads(key)
    if not isinstance(k, dict):
        raise ValueError("a key that is not a JSON object")
    kind, subject = k.get("keytype"), k.get("subject")
    v = json.loads(value) if value is not None else None
    if v is not None and not isinstance(v, dict):
        raise ValueError("a value that is not a JSON object")
    if kind == "SCHEMA":
        if v is None:
            return SchemaRemoved(str(subject), int(k["version"]))
        refs = tuple(
            (str(r["name"]), str(r["subject"]), int(r["version"]))
            for r in v.get("references") or ()
        )
        return SchemaRecord(
            str(v["subject"]),
            int(v["version"]),
            int(v["id"]),
            str(v.get("schemaType") or "AVRO"),
            str(v["schema"]),
            refs,
            bool(v.get("deleted", False)),
            contracts.kept(contracts.metadata(v.get("metadata"))),
            contracts.kept(contracts.rule_set(v.get("ruleSet"))),
        )
    if kind == "CONFIG":
        if v is None:
            return ConfigRecord(subject, None)
        fields = contracts.config_fields({k: v.get(k) for k in contracts.CONFIG_FIELDS})
        return ConfigRecord(subject, {k: x for k, x in fields.items() if x is not None})
    if kind == "MODE":
        return ModeRecord(subject, None if v is None else str(v["mode"]))
    if kind == "CONTEXT":
        if k.get("tenant", TENANT) != TENANT:
            return None  # (another tenant's: a multi-tenant registry's, not served here)
        return ContextRecord(str(k["context"]), v is not None)
    if kind == "DELETE_SUBJECT":
        if v is None:
            return None
        return SubjectDeleted(str(v["subject"]), int(v["version"]))
    return None  # NOOP, and kinds of newer registries
