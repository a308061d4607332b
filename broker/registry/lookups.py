"""The registry's reads by subject, version and id (Confluent's ``GET /subjects/...``,
``GET /schemas/ids/...``, ``POST /subjects/{subject}``), answered from this broker's view.

How this works
--------------
Every read goes through ``Schemas`` (schemas.py) to the view, and changes nothing. A version
in a path is a number in [1, 2^31-1], or ``latest`` / ``-1`` (``parse_version``; 42202
otherwise). Soft-deleted versions are seen only with ``deleted``; a subject with no version
seen is 40401, a version not there 40402, a schema id not there 40403. ``lookup`` finds the
newest version of a subject holding the request's schema: the same type, references,
canonical text, metadata and rule set (schemas.py), so any form of a schema finds it, as in
Confluent's, else the newest that differs only by one of the two having ``confluent:version``
(``find``, ``Schemas.can_lookup``); when none holds it as the request brings it, it is looked
for again with the metadata and rule set a registration would give it
(``Schemas.with_contract``).
``latest_with_metadata`` (``GET /subjects/{subject}/metadata?key=K&value=V...``) finds the
newest version whose metadata properties hold every pair asked for (40401 when the subject has
no version, 40403 when none matches). A schema is found by its GUID (``schema_by_guid``, each
context's ``by_guid``, the default context first) as by its id, 40403 for a text that is no
GUID or none held; ``ids_by_guid`` lists its ids by context (an empty list then). ``schemas``
lists every version of the subjects with a prefix (``GET /schemas``), subject then version.

Contexts (contexts.py): a subject is read in its own context, with that context's ids. As in
Confluent's, a subject of the default context that has no such version (or schema) is looked
for under the same name in each named context (``_candidates``: ``GET .../versions/{v}``,
``referencedby``, the lookup), and a schema id asked with ``subject=`` is read in that
subject's context (``id_context``). With Confluent's ``referenceFormat=qualified`` a version
or an id read in a named context answers its references' subjects qualified (``_qualified``).
"""

from __future__ import annotations

from typing import Any

from . import contracts, errors, guids
from .contexts import DEFAULT, context_of, in_prefix, qualified, qualify_reference, split
from .schemas import Schemas
from .state import Stored

MAX_VERSION = 2**31 - 1


def parse_version(text: str, *, latest_ok: bool = True) -> int | None:
    """A version in a path: a number in [1, 2^31-1], or None for "latest" / -1."""
    if latest_ok and text in ("latest", "-1"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if not 1 <= number <= MAX_VERSION:
        raise errors.invalid_version(text)
    return number


def _qualified(answer: dict[str, Any], context: str) -> dict[str, Any]:
    """A schema of ``context`` answered with its references' subjects qualified, as they are
    read (``qualify_reference``): Confluent's ``referenceFormat=qualified``, for a named
    context only."""
    for reference in answer.get("references", []) if context != DEFAULT else []:
        reference["subject"] = qualify_reference(context, reference["subject"])
    return answer


class Lookups:
    def __init__(self, schemas: Schemas) -> None:
        self.schemas = schemas

    # versions of a subject -------------------------------------------------------------------

    def live(self, subject: str, deleted: bool = False) -> dict[int, int]:
        """version -> id of the subject's versions, oldest first (soft-deleted ones too with
        ``deleted``)."""
        return {
            n: v.id
            for n, v in sorted(self.schemas.state.subjects.get(subject, {}).items())
            if deleted or not v.deleted
        }

    def _found(self, subject: str, deleted: bool) -> dict[int, int]:
        """As ``live``, 40401 when there are none."""
        found = self.live(subject, deleted)
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def _answer(
        self, subject: str, number: int, schema_id: int, fmt: str | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": subject, "version": number, "id": schema_id}
        out.update(self.schemas.fields(schema_id, fmt, context_of(subject)))
        return out

    # contexts --------------------------------------------------------------------------------

    def _contexts(self) -> list[str]:
        """The default context, then the named ones (recorded, or holding schemas) by name."""
        state = self.schemas.state
        return [DEFAULT, *sorted((state.contexts | set(state.spaces)) - {DEFAULT})]

    def _candidates(self, subject: str) -> list[str]:
        """``subject``, then, for one of the default context, the same name in each named
        context: where Confluent's reads by subject (``...UsingContexts``) look."""
        context, name = split(subject)
        if context != DEFAULT or not name:
            return [subject]
        return [subject, *(qualified(c, name) for c in self._contexts()[1:])]

    def _holds(self, subject: str, schema_id: int) -> bool:
        uses = self.schemas.state.space_of(subject).uses.get(schema_id, ())
        return any(s == subject for s, _ in uses)

    def id_context(self, schema_id: int, subject: str | None) -> tuple[str, str | None] | None:
        """(context, the subject that holds it or None) where a schema id is read, as
        Confluent's ``getSchemaKeyUsingContexts``: without a subject, or with a context alone
        (``:.ctx:``), that context's id; a subject of a named context must hold it; one of the
        default context holds it, else the same name in a named context does, else the
        default context's id answers. None: not there."""
        state = self.schemas.state
        context, name = split(subject or "")
        if name:
            for candidate in self._candidates(qualified(context, name)):
                if self._holds(candidate, schema_id):
                    return context_of(candidate), candidate
            if context != DEFAULT:
                return None
        return (context, None) if schema_id in state.space(context).schemas else None

    def id_holders(self, schema_id: int, subject: str | None) -> set[str]:
        """The subjects a read of the id (``id_context``) stands for: the one holding it, else
        every holder in its context."""
        found = self.id_context(schema_id, subject)
        if found is None:
            return set()
        context, holder = found
        uses = self.schemas.state.space(context).uses.get(schema_id, ())
        return {holder} if holder is not None else {s for s, _ in uses}

    # the routes' reads -----------------------------------------------------------------------

    def schema_by_id(
        self,
        schema_id: int,
        subject: str | None,
        fmt: str | None = None,
        qualified_references: bool = False,
    ) -> dict[str, Any]:
        found = self.id_context(schema_id, subject)
        if found is None:
            raise errors.schema_not_found(schema_id)
        answer = self.schemas.fields(schema_id, fmt, found[0])
        return _qualified(answer, found[0]) if qualified_references else answer

    def by_guid(self, text: str) -> list[tuple[str, int]]:
        """(context, id) of the schemas with GUID ``text``, by context."""
        guid = guids.parse(text)
        state = self.schemas.state
        found = [(c, state.space(c).by_guid.get(guid or "")) for c in self._contexts()]
        return [(c, i) for c, i in found if i is not None]

    def schema_by_guid(self, text: str, fmt: str | None = None) -> dict[str, Any]:
        """The schema whose GUID ``text`` is (the default context's first), as by its id
        (Confluent's leaves out the id)."""
        found = self.by_guid(text)
        if not found:
            raise errors.schema_not_found(text)
        context, schema_id = found[0]
        return self.schemas.fields(schema_id, fmt, context)

    def ids_by_guid(self, text: str) -> list[dict[str, Any]]:
        """The ids that have GUID ``text``, by context (Confluent's ``ContextId``), or none
        (no error, as in Confluent's)."""
        return [{"context": c, "id": i} for c, i in sorted(self.by_guid(text))]

    def schemas_with_prefix(self, prefix: str, deleted: bool, latest_only: bool) -> list[dict]:
        """Every version (the latest only, with ``latest_only``) of the subjects under
        ``prefix`` (contexts.in_prefix), as ``GET /subjects/{s}/versions/{v}`` answers it."""
        out: list[dict] = []
        for subject in self.subjects(prefix, deleted):
            found = self.live(subject, deleted)
            numbers = [max(found)] if latest_only and found else list(found)
            out += [self._answer(subject, n, found[n]) for n in numbers]
        return out

    def schema_usage(
        self, schema_id: int, deleted: bool, subject: str | None = None
    ) -> list[tuple[str, int]]:
        """(subject, version) pairs holding schema ``schema_id``, in the context where
        ``subject`` reads it (``id_context``)."""
        state = self.schemas.state
        found = self.id_context(schema_id, subject)
        if found is None:
            raise errors.schema_not_found(schema_id)
        return sorted(
            (s, n)
            for s, n in state.space(found[0]).uses.get(schema_id, ())
            if deleted or not state.subjects[s][n].deleted
        )

    def subjects(self, prefix: str, deleted: bool, deleted_only: bool = False) -> list[str]:
        """Subjects under ``prefix`` (contexts.in_prefix): with a live version, any
        (``deleted``), or with every version soft-deleted (``deleted_only``, before
        ``deleted``)."""
        state = self.schemas.state
        names: set[str] = set(state.live_subjects())
        if deleted_only:
            names = set(state.subjects) - names
        elif deleted:
            names = set(state.subjects)
        return sorted(s for s in names if in_prefix(s, prefix))

    def versions(self, subject: str, deleted: bool, deleted_only: bool = False) -> list[int]:
        """Versions of the subject: live, all (``deleted``), or soft-deleted only
        (``deleted_only``); 40401 when there are none."""
        if not deleted_only:
            return list(self._found(subject, deleted))
        live = self.live(subject)
        found = [n for n in self._found(subject, True) if n not in live]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def _in_subject(self, subject: str, number: int | None, deleted: bool) -> tuple[int, int]:
        """(version, id) that ``number`` (None: the latest) names in the subject."""
        every = self._found(subject, True)
        if number is None:
            live = self.live(subject, deleted)
            if not live:
                raise errors.subject_not_found(subject)
            number = max(live)
        if number not in every:
            raise errors.version_not_found(number)
        v = self.schemas.state.subjects[subject][number]
        if v.deleted and not deleted:
            raise errors.version_not_found(number)
        return number, v.id

    def _resolve(self, subject: str, version: str, deleted: bool) -> tuple[str, int, int]:
        """(subject, version, id) that a path names: in ``subject``, else (for a subject of
        the default context) in the first named context holding it (Confluent's
        ``getUsingContexts``); the subject's own error otherwise (40401, 40402, 42202)."""
        number = parse_version(version)
        first: errors.RegistryError | None = None
        for candidate in self._candidates(subject):
            try:
                return candidate, *self._in_subject(candidate, number, deleted)
            except errors.RegistryError as e:
                first = first or e
        assert first is not None
        raise first

    def get_version(
        self,
        subject: str,
        version: str,
        deleted: bool,
        fmt: str | None = None,
        qualified_references: bool = False,
    ) -> dict[str, Any]:
        found, number, schema_id = self._resolve(subject, version, deleted)
        answer = self._answer(found, number, schema_id, fmt)
        return _qualified(answer, context_of(found)) if qualified_references else answer

    def referenced_by(self, subject: str, version: str) -> list[int]:
        found, number, _ = self._resolve(subject, version, False)
        return self.schemas.state.referenced_by(found, number)

    def find(
        self, subject: str, stored: Stored, deleted: bool = False, latest_only: bool = False
    ) -> tuple[int, int] | None:
        """(version, id) of the subject holding ``stored``, as Confluent's registry looks a
        schema up under a subject: the newest version that is the same schema, else the
        newest that ``Schemas.can_lookup`` finds (only the latest with ``latest_only``)."""
        found = sorted(self.live(subject, deleted).items(), reverse=True)
        context = context_of(subject)
        if latest_only:
            found = found[:1]
        else:
            for number, sid in found:
                if self.schemas.same(sid, stored, context):
                    return number, sid
        for number, sid in found:
            if self.schemas.can_lookup(sid, number, stored, context):
                return number, sid
        return None

    def lookup(
        self, subject: str, body: Any, normalize: bool, deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        """The version holding the request's schema in ``subject``, else (for a subject of
        the default context) in the same name of a named context (Confluent's
        ``lookUpSchemaUnderSubjectUsingContexts``): 40401 when none has versions, 40403."""
        held = [c for c in self._candidates(subject) if self.live(c, deleted)]
        if not held:
            raise errors.subject_not_found(subject)
        for candidate in held:
            try:
                _, stored = self.schemas.from_request(body, normalize, context_of(candidate))
            except errors.RegistryError:
                if candidate == subject:
                    raise
                continue  # (its references are not there in that context)
            for form in (stored, self.schemas.with_contract(candidate, stored)):
                hit = self.find(candidate, form, deleted)
                if hit is not None:
                    return self._answer(candidate, *hit, fmt)
        raise errors.schema_not_found()

    def latest_with_metadata(
        self, subject: str, wanted: dict[str, str], deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        found = self._found(subject, deleted)
        schemas = self.schemas.state.space_of(subject).schemas
        for number, sid in sorted(found.items(), reverse=True):
            held = (contracts.loaded(schemas[sid].metadata) or {}).get("properties", {})
            if all(held.get(k) == v for k, v in wanted.items()):
                return self._answer(subject, number, sid, fmt)
        raise errors.schema_not_found()
