"""What the registry holds, as read from ``_schemas``: every broker keeps one, applying the
topic's records in offset order (``apply``), so every broker answers alike.

* ``subjects``: subject -> version -> ``Version`` (schema id, soft-deleted or not);
* ``schemas``: id -> ``Stored`` (type, text, references, metadata, rule set) while some
  version uses it;
* ``ids``: ``Stored`` -> id, so that one schema has one id in every subject;
* ``by_guid``: GUID -> id (``Stored.guid``; the id last put when several schemas share one,
  as in Confluent's);
* ``configs`` and ``modes``: the global (key None) and per-subject configs (Confluent's
  CONFIG values: a compatibility level, data contract defaults and overrides) and modes set;
  a subject's own config, else the global one, is the one in scope (whole, as in
  Confluent's); a global READONLY_OVERRIDE mode is every subject's, whatever its own;
* ``max_id``: the highest id seen (ids are never reused while a record holding them stays);
* ``text_bytes``: the bytes of the texts, metadata and rule sets in ``schemas``.

Three caches ride along, emptied here as what they were worked out from goes, each filled by
one part only: ``parsed`` (schemas.py), ``names`` and ``allowed`` (broker_view.py).

Applying is idempotent and follows compaction: a later record of a key replaces the earlier
one, a tombstone removes it, and ``SubjectDeleted`` marks the versions up to its watermark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import guids
from .contracts import Config
from .records import (
    Change,
    ConfigRecord,
    ModeRecord,
    Reference,
    SchemaRecord,
    SchemaRemoved,
    SubjectDeleted,
)
from .schema_types import ParsedSchema

DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
READONLY_OVERRIDE = "READONLY_OVERRIDE"  # global: read-only whatever a subject's own mode


@dataclass(frozen=True, slots=True)
class Stored:
    schema_type: str
    text: str
    references: tuple[Reference, ...]
    metadata: str | None = None  # as kept (contracts.kept)
    rule_set: str | None = None
    _guid: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def guid(self) -> str:
        """Confluent's GUID of the schema (guids.py), worked out once."""
        if self._guid is None:
            value = guids.of(self.text, self.references, self.metadata, self.rule_set)
            object.__setattr__(self, "_guid", value)
        return self._guid  # type: ignore[return-value]

    @property
    def size(self) -> int:
        """Bytes it holds (UTF-8): what the registry's bounds count."""
        return sum(len(t.encode()) for t in (self.text, self.metadata, self.rule_set) if t)


@dataclass(slots=True)
class Version:
    id: int
    deleted: bool = False


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    schemas: dict[int, Stored] = field(default_factory=dict)
    ids: dict[Stored, int] = field(default_factory=dict)
    by_guid: dict[str, int] = field(default_factory=dict)
    uses: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    configs: dict[str | None, Config] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    text_bytes: int = 0  # held by ``schemas`` (Stored.size)
    parsed: dict[int, ParsedSchema] = field(default_factory=dict)  # a cache
    names: dict[int, tuple[str, ...]] = field(default_factory=dict)  # id -> record names
    # (topic, strategy) -> the ids a record may carry (broker_view.allowed_ids), until the next
    # record applied
    allowed: dict[tuple[str, str], set[int]] = field(default_factory=dict)

    # applying records ------------------------------------------------------------------------

    def apply(self, change: Change) -> None:
        self.allowed.clear()
        if isinstance(change, SchemaRecord):
            self._put(change)
        elif isinstance(change, SchemaRemoved):
            self._remove(change.subject, change.version)
        elif isinstance(change, ConfigRecord):
            if change.config is None:
                self.configs.pop(change.subject, None)
            else:
                self.configs[change.subject] = change.config
        elif isinstance(change, ModeRecord):
            if change.mode is None:
                self.modes.pop(change.subject, None)
            else:
                self.modes[change.subject] = change.mode
        elif isinstance(change, SubjectDeleted):
            for number, version in self.subjects.get(change.subject, {}).items():
                if number <= change.version:
                    version.deleted = True

    def _put(self, r: SchemaRecord) -> None:
        stored = Stored(r.schema_type, r.schema, r.references, r.metadata, r.rule_set)
        versions = self.subjects.setdefault(r.subject, {})
        old = versions.get(r.version)
        if old is not None and old.id != r.id:
            self._unuse(old.id, r.subject, r.version)
        versions[r.version] = Version(r.id, r.deleted)
        if r.id not in self.schemas:
            self.schemas[r.id] = stored
            self.text_bytes += stored.size
        self.ids.setdefault(stored, r.id)
        self.by_guid[self.schemas[r.id].guid] = r.id
        self.uses.setdefault(r.id, set()).add((r.subject, r.version))
        self.max_id = max(self.max_id, r.id)

    def _remove(self, subject: str, number: int) -> None:
        versions = self.subjects.get(subject)
        if versions is None or number not in versions:
            return
        version = versions.pop(number)
        if not versions:
            del self.subjects[subject]
        self._unuse(version.id, subject, number)

    def _unuse(self, schema_id: int, subject: str, number: int) -> None:
        users = self.uses.get(schema_id)
        if users is None:
            return
        users.discard((subject, number))
        if not users:
            del self.uses[schema_id]
            stored = self.schemas.pop(schema_id, None)
            self.parsed.pop(schema_id, None)
            self.names.pop(schema_id, None)
            if stored is not None:
                self.text_bytes -= stored.size
            if stored is not None and self.ids.get(stored) == schema_id:
                del self.ids[stored]
            if stored is not None and self.by_guid.get(stored.guid) == schema_id:
                del self.by_guid[stored.guid]
                for other, held in self.schemas.items():  # (another id of the same GUID)
                    if held.guid == stored.guid:
                        self.by_guid[stored.guid] = other

    # reading ---------------------------------------------------------------------------------

    def live_subjects(self) -> list[str]:
        return sorted(
            s for s, vs in self.subjects.items() if any(not v.deleted for v in vs.values())
        )

    def version_count(self) -> int:
        return sum(len(vs) for vs in self.subjects.values())

    def config(self, subject: str | None) -> Config:
        """The config in scope for ``subject``: its own, else the global one (else none)."""
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, {})

    def level(self, subject: str | None) -> str:
        """The compatibility level that applies to ``subject``."""
        return self.config(subject).get("compatibilityLevel", DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        overriding = self.modes.get(None)
        if subject is not None and subject in self.modes and overriding != READONLY_OVERRIDE:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def referenced_by(self, subject: str, number: int) -> list[int]:
        """Ids of the schemas (of live or soft-deleted versions) that refer to it."""
        found = set()
        for schema_id, stored in self.schemas.items():
            if any(s == subject and v == number for _, s, v in stored.references):
                found.add(schema_id)
        return sorted(found)
