"""Registering schemas and deleting versions (``POST /subjects/{subject}/versions``,
``DELETE /subjects/{subject}[/versions/{version}]``): where schema ids and versions are
allocated.

How this works
--------------
Each runs in the writer's turn (writer.py) on a view holding the whole log, so an id or a
version is allocated once. Registering:

1. outside IMPORT mode, when the subject's config adds no metadata or rules, a live version
   holding the schema as sent (``Lookups.find``: the same schema, else one differing only by
   ``confluent:version``; only the latest for a request ``version`` of -1) answers, writing
   nothing, unless the request names a version above 0;
2. outside IMPORT mode, the request's metadata and rule set are completed as Confluent's are
   (the subject's config's defaults and overrides, the latest version's when it brings none:
   ``Schemas.with_contract``, contracts.py), and the metadata property ``confluent:version``
   is set to the version it would get when the request names a version (not 0) or the
   completed metadata has the property (whatever its value);
3. a live version holding that schema (``Lookups.find``; outside IMPORT mode only when the
   request names no version; in IMPORT mode the same schema exactly) answers, writing
   nothing;
4. otherwise it must be compatible with the subject's versions (compatibility.py; not in
   IMPORT mode: 409), and a version the request names outside IMPORT mode must be the next
   one (42201 "Version is not one more than previous version");
5. its id is the one the same schema already has in any subject of its context (ids are per
   context: ``IdSpace``), else one above the context's highest ever seen (``max_id``); in
   IMPORT mode the request brings it (and may bring its version), and an id held by another
   schema is 42207;
6. its version is one above the subject's highest (soft-deleted ones counted);
7. bounds: ``max_schemas`` versions in all, ``max_subjects`` subjects (and contexts),
   ``max_total_bytes`` of distinct schemas (texts, metadata and rule sets; 42205 beyond);
8. the first registration in a named context writes its CONTEXT record first (records.py).

Deleting is soft first (the version stays, marked; its id still reads), then permanent (a
tombstone), in Confluent's order of refusals (40404 to 40407); a version another schema refers
to is not deleted (42206).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import contexts, contracts, errors
from .compatibility import Compatibility
from .context_records import ContextRecords
from .lookups import Lookups, parse_version
from .paging import JAVA_INT_MAX, JAVA_INT_MIN
from .records import Change, ConfigRecord, ModeRecord, SchemaRecord, SchemaRemoved, SubjectDeleted
from .schemas import Schemas
from .settings import Settings
from .state import Stored
from .writer import SchemasWriter


class Registration:
    def __init__(
        self,
        schemas: Schemas,
        writer: SchemasWriter,
        settings: Settings,
        compatibility: Compatibility,
        lookups: Lookups,
        context_records: ContextRecords,
        *,
        max_schemas: int,
        max_subjects: int,
        max_total_bytes: int,
    ) -> None:
        self.schemas, self.writer = schemas, writer
        self.settings, self.compatibility = settings, compatibility
        self.lookups, self.context_records = lookups, context_records
        self.max_schemas = max_schemas
        self.max_subjects = max_subjects
        self.max_total_bytes = max_total_bytes

    async def register(
        self, subject: str, body: Any, normalize: bool, fmt: str | None = None
    ) -> tuple[dict, int]:
        """(the answer, offset written or 0): Confluent 8's, the id, version and the schema as
        kept with its GUID (``Schemas.answered``, its text in format ``fmt``)."""
        context, name = contexts.split(subject)
        if not name or context == contexts.GLOBAL or any(ord(c) < 32 for c in subject):
            raise errors.invalid_subject(subject)
        async with self.writer.turn():
            state = self.schemas.state
            space = state.space(context)
            self.settings.writable(subject)
            importing = state.mode(subject) == "IMPORT"
            new, stored = self.schemas.from_request(body, normalize, context)
            wanted_id, wanted_version = _wanted(subject, body, importing)
            versions = state.subjects.get(subject, {})
            number = max(versions, default=0) + 1
            if importing:
                for n, v in sorted(versions.items()):
                    if not v.deleted and self.schemas.same(v.id, stored, context):
                        if wanted_id is not None and wanted_id != v.id:
                            raise errors.id_does_not_match(
                                f"Schema already registered with id {v.id} instead of input"
                                f" id {wanted_id}"
                            )
                        return self._answer(v.id, n, space.schemas[v.id], fmt, context), 0
            else:
                stored, hit = self._as_kept(subject, stored, wanted_version, number)
                if hit is not None:
                    held = space.schemas[hit[1]]
                    return self._answer(hit[1], hit[0], held, fmt, context), 0
                found = self.compatibility.against_subject(subject, new, stored.metadata)
                if found:
                    raise errors.incompatible(subject, found)
                if wanted_version > 0 and wanted_version != number:
                    raise errors.version_not_next()
            schema_id = self._allocate_id(stored, wanted_id, context)
            self._within_bounds(subject, stored, schema_id)
            if importing and isinstance(wanted_version, int) and wanted_version > 0:
                if wanted_version in versions:
                    raise errors.not_permitted(f"version {wanted_version} of {subject} exists")
                number = wanted_version
            changes = self.context_records.created(context)
            changes.append(_record(subject, number, schema_id, stored, False))
            end = await self.writer.write(changes)
            self.schemas.remember(schema_id, new, context)
            return self._answer(schema_id, number, stored, fmt, context), end

    def _answer(
        self, schema_id: int, number: int, stored: Stored, fmt: str | None, context: str
    ) -> dict[str, Any]:
        answered = self.schemas.answered(stored, fmt, context)
        return {"id": schema_id, "version": number, **answered}

    def _as_kept(
        self, subject: str, sent: Stored, asked: int, number: int
    ) -> tuple[Stored, tuple[int, int] | None]:
        """(the request's schema as it would be kept, (version, id) of the subject's version
        that already holds it or None), outside IMPORT mode, as Confluent's registry does it
        (``asked``: the request's ``version``, 0 when none, -1 for the latest; ``number``: the
        version it would get)."""
        lookups, state = self.lookups, self.schemas.state
        if not contracts.has_defaults_or_overrides(state.config(subject)):
            hit = lookups.find(subject, sent, latest_only=asked == -1)  # (as sent)
            if hit is not None and asked in (0, -1):
                return sent, hit
        stored = self.schemas.with_contract(subject, sent)
        if asked != 0 or contracts.confluent_version(stored.metadata) is not None:
            metadata = contracts.with_confluent_version(stored.metadata, number)
            stored = self.schemas.within_size(replace(stored, metadata=metadata))
        return stored, lookups.find(subject, stored) if asked == 0 else None

    def _allocate_id(self, stored: Stored, wanted_id: int | None, context: str) -> int:
        """The schema's id in ``context`` (each numbers its own): the one it has in any
        subject of the context, else the next; in IMPORT mode the one the request brings
        (42207 when another schema of the context holds it)."""
        space = self.schemas.state.space(context)
        if wanted_id is not None:
            holder = space.schemas.get(wanted_id)
            if holder is not None and holder != stored:
                raise errors.id_does_not_match(
                    f"Overwrite new schema with id {wanted_id} is not permitted."
                )
            return wanted_id
        schema_id = space.ids.get(stored)
        return space.max_id + 1 if schema_id is None else schema_id

    def _within_bounds(self, subject: str, stored: Stored, schema_id: int) -> None:
        state = self.schemas.state
        known = schema_id in state.space_of(subject).schemas
        if not known and state.text_bytes + stored.size > self.max_total_bytes:
            raise errors.not_permitted(
                f"the registry holds {state.text_bytes} bytes of schemas; this one would"
                f" pass schema.registry.max.total.schema.bytes ({self.max_total_bytes})"
            )
        if state.version_count() >= self.max_schemas:
            raise errors.not_permitted(
                f"the registry holds {self.max_schemas} schema versions, the most"
                " schema.registry.max.schemas allows"
            )
        if subject not in state.subjects and len(state.subjects) >= self.max_subjects:
            raise errors.not_permitted(
                f"the registry holds {self.max_subjects} subjects, the most"
                " schema.registry.max.subjects allows"
            )

    def _not_referenced(self, subject: str, numbers) -> None:
        for number in numbers:
            if self.schemas.state.referenced_by(subject, number):
                raise errors.reference_exists(
                    f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,"
                    f"subject={subject},version={number}}}."
                )

    def _held(self, subject: str) -> dict:
        """The versions of a subject to delete from (42205 read-only, 40401 none)."""
        self.settings.writable(subject)
        versions = self.schemas.state.subjects.get(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        return versions

    async def delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], int]:
        async with self.writer.turn():
            state = self.schemas.state
            versions = self._held(subject)
            live = [n for n, v in sorted(versions.items()) if not v.deleted]
            changes: list[Change]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                self._not_referenced(subject, versions)
                done = sorted(versions)
                changes = [SchemaRemoved(subject, n) for n in done]
                if subject in state.configs:
                    changes.append(ConfigRecord(subject, None))
                if subject in state.modes:
                    changes.append(ModeRecord(subject, None))
            else:
                if not live:
                    raise errors.subject_soft_deleted(subject)
                self._not_referenced(subject, live)
                done = live
                changes = [SubjectDeleted(subject, max(versions))]
            return done, await self.writer.write(changes)

    async def delete_version(self, subject: str, version: str, permanent: bool) -> tuple[int, int]:
        number_or_latest = parse_version(version)
        async with self.writer.turn():
            state = self.schemas.state
            versions = self._held(subject)
            if number_or_latest is None:
                candidates = (
                    versions if permanent else {n for n, v in versions.items() if not v.deleted}
                )
                if not candidates:
                    raise errors.subject_not_found(subject)
                number = max(candidates)
            else:
                number = number_or_latest
            v = versions.get(number)
            if v is None:
                raise errors.version_not_found(number)
            self._not_referenced(subject, [number])
            if permanent:
                if not v.deleted:
                    raise errors.version_not_soft_deleted(subject, number)
                return number, await self.writer.write([SchemaRemoved(subject, number)])
            if v.deleted:
                raise errors.version_soft_deleted(subject, number)
            record = _record(subject, number, v.id, state.space_of(subject).schemas[v.id], True)
            return number, await self.writer.write([record])


def _record(subject: str, number: int, schema_id: int, stored: Stored, deleted: bool):
    return SchemaRecord(
        subject,
        number,
        schema_id,
        stored.schema_type,
        stored.text,
        stored.references,
        deleted,
        stored.metadata,
        stored.rule_set,
    )


def _wanted(subject: str, body: Any, importing: bool) -> tuple[int | None, Any]:
    """(id, version) a registration brings. An id only in IMPORT mode, where it is required
    (42205 otherwise; 42201 for one that is not a schema id); outside it, the version is a
    Java int, 0 when none (42201 otherwise)."""
    wanted_id = body.get("id") if isinstance(body, dict) else None
    wanted_version = body.get("version") if isinstance(body, dict) else None
    if not importing:
        if wanted_version is None:
            wanted_version = 0
        if not isinstance(wanted_version, int) or isinstance(wanted_version, bool):
            raise errors.invalid_schema(f"version {wanted_version!r} is not a version")
        if not JAVA_INT_MIN <= wanted_version <= JAVA_INT_MAX:
            raise errors.invalid_schema(f"version {wanted_version} is not a version")
    if wanted_id is not None and wanted_id != -1:
        if not importing:
            raise errors.not_permitted(f"Subject {subject} is not in import mode")
        if not isinstance(wanted_id, int) or wanted_id < 1:
            raise errors.invalid_schema(f"id {wanted_id!r} is not a schema id")
        return wanted_id, wanted_version
    if importing:  # (importing brings its ids)
        raise errors.not_permitted(f"Subject {subject} is not in read-write mode")
    return None, wanted_version
