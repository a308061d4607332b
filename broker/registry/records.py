"""The records of ``_schemas``, in Confluent's Schema Registry's JSON layouts (so a
Confluent registry reading the topic, or a tool dumping it, finds what it expects).

Keys (a compacted topic: the last record of a key is what stays):

* ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``: a subject's version; the value
  ``{"subject","version","id","schemaType"?,"references"?,"schema","deleted"}`` (schemaType
  left out for AVRO); ``deleted`` true is a soft delete; no value (a tombstone) is a
  permanent delete;
* ``{"keytype":"CONFIG","subject":S|null,"magic":0}``: a compatibility level, global (null)
  or a subject's; value ``{"compatibilityLevel": L}``, none: back to the default;
* ``{"keytype":"MODE","subject":S|null,"magic":0}``: a mode; value ``{"mode": M}``;
* ``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``: a subject soft-deleted; value
  ``{"subject": S, "version": V}``: its versions up to V are deleted;
* ``{"keytype":"NOOP","magic":0}``: nothing (Confluent's registry writes it to sync).

``decode`` turns a record into a change (one of the dataclasses below), None for a key it
does not know; a ValueError for a record that is not what its key says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class SchemaRemoved:  # a SCHEMA tombstone: the version is gone for good
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    subject: str | None
    level: str | None  # None: the setting removed


@dataclass(frozen=True, slots=True)
class ModeRecord:
    subject: str | None
    mode: str | None


@dataclass(frozen=True, slots=True)
class SubjectDeleted:
    subject: str
    version: int


Change = SchemaRecord | SchemaRemoved | ConfigRecord | ModeRecord | SubjectDeleted


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
    value["schema"] = r.schema
    value["deleted"] = r.deleted
    return _dump(value)


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})


def config_value(level: str) -> bytes:
    return _dump({"compatibilityLevel": level})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def encode(change: Change) -> tuple[bytes, bytes | None]:
    """The (key, value) of a change."""
    if isinstance(change, SchemaRecord):
        return schema_key(change.subject, change.version), schema_value(change)
    if isinstance(change, SchemaRemoved):
        return schema_key(change.subject, change.version), None
    if isinstance(change, ConfigRecord):
        value = None if change.level is None else config_value(change.level)
        return config_key(change.subject), value
    if isinstance(change, ModeRecord):
        return mode_key(change.subject), None if change.mode is None else mode_value(change.mode)
    return delete_subject_key(change.subject), delete_subject_value(change.subject, change.version)


def decode(key: bytes, value: bytes | None) -> Change | None:
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
        )
    if kind == "CONFIG":
        return ConfigRecord(subject, None if v is None else str(v["compatibilityLevel"]))
    if kind == "MODE":
        return ModeRecord(subject, None if v is None else str(v["mode"]))
    if kind == "DELETE_SUBJECT":
        if v is None:
            return None
        return SubjectDeleted(str(v["subject"]), int(v["version"]))
    return None  # NOOP, and kinds of newer registries
