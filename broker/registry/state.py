"""What the registry holds, as read from ``_schemas``: every broker keeps one, applying the
topic's records in offset order (``apply``), so every broker answers alike.

* ``subjects``: subject (qualified: ``:.ctx:name`` in a named context, contexts.py) ->
  version -> ``Version`` (schema id, soft-deleted or not);
* ``spaces``: context -> ``IdSpace``, its schemas by id (ids are per context, as Confluent's:
  each context numbers its own from 1); the default context's always there, and its tables
  are also ``schemas``, ``ids``, ``by_guid``, ``uses``, ``max_id``, ``parsed`` and ``names``
  here (what the broker's schema id checks read: ids of the default context only);
* ``contexts``: the named contexts with a CONTEXT record (made by the first registration in
  one, gone with ``DELETE /contexts/{context}``), whether or not they still hold subjects;
* ``configs`` and ``modes``: the global (key None), per-context (``:.ctx:``) and per-subject
  configs (Confluent's CONFIG values: a compatibility level, data contract defaults and
  overrides) and modes set; the one in scope for a subject is its own, else its context's
  (the global one for the default context), else ``:.__GLOBAL:``'s, whole, as in Confluent's;
  a global READONLY_OVERRIDE mode is every subject's, whatever its own;
* ``text_bytes``: the bytes of the texts, metadata and rule sets of every space.

Per space: ``schemas``: id -> ``Stored`` (type, text, references, metadata, rule set) while
some version uses it; ``ids``: ``Stored`` -> id, so that one schema has one id in every
subject of the context; ``by_guid``: GUID -> id (``Stored.guid``; the id last put when
several schemas share one, as in Confluent's); ``uses``: id -> (subject, version) pairs;
``max_id``: the highest id seen (ids are never reused while a record holding them stays).

Three caches ride along, emptied here as what they were worked out from goes, each filled by
one part only: ``parsed`` (schemas.py), ``names`` and ``allowed`` (broker_view.py).

Applying is idempotent and follows compaction: a later record of a key replaces the earlier
one, a tombstone removes it, and ``SubjectDeleted`` marks the versions up to its watermark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import contexts, guids
from .contracts import Config
from .records import (
    Change,
    ConfigRecord,
    ContextRecord,
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
class IdSpace:
    """One context's schemas by id (the module docstring)."""

    schemas: dict[int, Stored] = field(default_factory=dict)
    ids: dict[Stored, int] = field(default_factory=dict)
    by_guid: dict[str, int] = field(default_factory=dict)
    uses: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    max_id: int = 0
    parsed: dict[int, ParsedSchema] = field(default_factory=dict)  # a cache
    names: dict[int, tuple[str, ...]] = field(default_factory=dict)  # id -> record names


_NO_SPACE = IdSpace()  # what a context without schemas reads as (never written)


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    spaces: dict[str, IdSpace] = field(default_factory=lambda: {contexts.DEFAULT: IdSpace()})
    contexts: set[str] = field(default_factory=set)
    configs: dict[str | None, Config] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    text_bytes: int = 0  # held by every space's ``schemas`` (Stored.size)
    # (topic, strategy) -> the ids a record may carry (broker_view.allowed_ids), until the next
    # record applied
    allowed: dict[tuple[str, str], set[int]] = field(default_factory=dict)

    # the default context's space -------------------------------------------------------------

    @property
    def default(self) -> IdSpace:
        return self.spaces[contexts.DEFAULT]

    @property
    def schemas(self) -> dict[int, Stored]:
        return self.default.schemas

    @property
    def ids(self) -> dict[Stored, int]:
        return self.default.ids

    @property
    def by_guid(self) -> dict[str, int]:
        return self.default.by_guid

    @property
    def uses(self) -> dict[int, set[tuple[str, int]]]:
        return self.default.uses

    @property
    def max_id(self) -> int:
        return self.default.max_id

    @property
    def parsed(self) -> dict[int, ParsedSchema]:
        return self.default.parsed

    @property
    def names(self) -> dict[int, tuple[str, ...]]:
        return self.default.names

    def space(self, context: str) -> IdSpace:
        """The schemas by id of ``context`` (an empty space for one that holds none)."""
        return self.spaces.get(context, _NO_SPACE)

    def space_of(self, subject: str) -> IdSpace:
        return self.space(contexts.context_of(subject))

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
        elif isinstance(change, ContextRecord):
            if change.present:
                self.contexts.add(change.context)
            else:
                self.contexts.discard(change.context)
                self._drop_if_idle(change.context)

    def _put(self, r: SchemaRecord) -> None:
        stored = Stored(r.schema_type, r.schema, r.references, r.metadata, r.rule_set)
        context = contexts.context_of(r.subject)
        space = self.spaces.setdefault(context, IdSpace())
        versions = self.subjects.setdefault(r.subject, {})
        old = versions.get(r.version)
        if old is not None and old.id != r.id:
            self._unuse(space, old.id, r.subject, r.version)
            space = self.spaces.setdefault(context, space)  # (if it was just dropped)
        versions[r.version] = Version(r.id, r.deleted)
        if r.id not in space.schemas:
            space.schemas[r.id] = stored
            self.text_bytes += stored.size
        space.ids.setdefault(stored, r.id)
        space.by_guid[space.schemas[r.id].guid] = r.id
        space.uses.setdefault(r.id, set()).add((r.subject, r.version))
        space.max_id = max(space.max_id, r.id)

    def _remove(self, subject: str, number: int) -> None:
        versions = self.subjects.get(subject)
        if versions is None or number not in versions:
            return
        version = versions.pop(number)
        if not versions:
            del self.subjects[subject]
        self._unuse(self.space_of(subject), version.id, subject, number)

    def _unuse(self, space: IdSpace, schema_id: int, subject: str, number: int) -> None:
        users = space.uses.get(schema_id)
        if users is None:
            return
        users.discard((subject, number))
        if not users:
            del space.uses[schema_id]
            stored = space.schemas.pop(schema_id, None)
            space.parsed.pop(schema_id, None)
            space.names.pop(schema_id, None)
            if stored is not None:
                self.text_bytes -= stored.size
            if stored is not None and space.ids.get(stored) == schema_id:
                del space.ids[stored]
            if stored is not None and space.by_guid.get(stored.guid) == schema_id:
                del space.by_guid[stored.guid]
                for other, held in space.schemas.items():  # (another id of the same GUID)
                    if held.guid == stored.guid:
                        space.by_guid[stored.guid] = other
            self._drop_if_idle(contexts.context_of(subject))

    def _drop_if_idle(self, context: str) -> None:
        """Forget the space of a context that holds no schema and has no CONTEXT record (so
        spaces stay as many as the contexts kept); a context's space, its highest id with it,
        stays while its record does, as Confluent's id generator keeps it."""
        space = self.spaces.get(context)
        if context != contexts.DEFAULT and context not in self.contexts:
            if space is not None and not space.schemas:
                del self.spaces[context]

    # reading ---------------------------------------------------------------------------------

    def live_subjects(self) -> list[str]:
        return sorted(
            s for s, vs in self.subjects.items() if any(not v.deleted for v in vs.values())
        )

    def version_count(self) -> int:
        return sum(len(vs) for vs in self.subjects.values())

    def in_context(self, context: str) -> list[str]:
        """The subjects of ``context`` (soft-deleted ones too)."""
        return [s for s in self.subjects if contexts.context_of(s) == context]

    def _in_scope(self, table: dict, subject: str | None):
        """Where ``subject``'s setting is looked for, in order: its own, its context's (the
        global one for the default context), then the ``:.__GLOBAL:`` context's; the first
        that ``table`` holds, or None."""
        keys: list[str | None] = [subject] if subject is not None else []
        context = contexts.DEFAULT if subject is None else contexts.context_of(subject)
        keys.append(None if context == contexts.DEFAULT else contexts.context_subject(context))
        keys.append(contexts.context_subject(contexts.GLOBAL))
        return next((k for k in keys if k in table), False)

    def config(self, subject: str | None) -> Config:
        """The config in scope for ``subject`` (``_in_scope``; else none)."""
        key = self._in_scope(self.configs, subject)
        return {} if key is False else self.configs[key]

    def level(self, subject: str | None) -> str:
        """The compatibility level that applies to ``subject``."""
        return self.config(subject).get("compatibilityLevel", DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        """The mode in scope for ``subject`` (``_in_scope``), but a global READONLY_OVERRIDE
        for every subject."""
        if self.modes.get(None) == READONLY_OVERRIDE:
            return READONLY_OVERRIDE
        key = self._in_scope(self.modes, subject)
        return DEFAULT_MODE if key is False else self.modes[key]

    def referenced_by(self, subject: str, number: int) -> list[int]:
        """Ids of the schemas (of live or soft-deleted versions) that refer to it, in any
        context (a reference read in the context of the schema holding it), by context."""
        found = set()
        for context, space in self.spaces.items():
            for schema_id, stored in space.schemas.items():
                for _, s, v in stored.references:
                    if v == number and contexts.qualify_reference(context, s) == subject:
                        found.add((context, schema_id))
        return [schema_id for _, schema_id in sorted(found)]
