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
no version, 40403 when none matches). A schema is found by its GUID (``schema_by_guid``, the
view's ``by_guid``) as by its id, 40403 for a text that is no GUID or none held;
``ids_by_guid`` lists its ids by context (an empty list then). ``schemas``
lists every version of the subjects with a prefix (``GET /schemas``), subject then version.
"""

from __future__ import annotations

from typing import Any

from . import contracts, errors, guids
from .schemas import Schemas
from .state import Stored

MAX_VERSION = 2**31 - 1
DEFAULT_CONTEXT = "."  # Confluent's; Headrace has no other context


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

    def _version(self, subject: str, text: str, deleted: bool) -> tuple[int, int]:
        """(version, id) that ``text`` names in the subject (40401, 40402, 42202)."""
        number = parse_version(text)
        found = self._found(subject, deleted)
        if number is None:
            number = max(found)
        elif number not in found:
            raise errors.version_not_found(number)
        return number, found[number]

    def _answer(
        self, subject: str, number: int, schema_id: int, fmt: str | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": subject, "version": number, "id": schema_id}
        out.update(self.schemas.fields(schema_id, fmt))
        return out

    # the routes' reads -----------------------------------------------------------------------

    def schema_by_id(
        self, schema_id: int, subject: str | None, fmt: str | None = None
    ) -> dict[str, Any]:
        state = self.schemas.state
        if schema_id not in state.schemas or (
            subject and all(s != subject for s, _ in state.uses.get(schema_id, ()))
        ):
            raise errors.schema_not_found(schema_id)
        return self.schemas.fields(schema_id, fmt)

    def schema_by_guid(self, text: str, fmt: str | None = None) -> dict[str, Any]:
        """The schema whose GUID ``text`` is, as by its id (Confluent's leaves out the id)."""
        guid = guids.parse(text)
        schema_id = None if guid is None else self.schemas.state.by_guid.get(guid)
        if schema_id is None:
            raise errors.schema_not_found(text)
        return self.schemas.fields(schema_id, fmt)

    def ids_by_guid(self, text: str) -> list[dict[str, Any]]:
        """The ids that have GUID ``text``, by context (Confluent's ``ContextId``): the
        default context's only, or none (no error, as in Confluent's)."""
        guid = guids.parse(text)
        schema_id = None if guid is None else self.schemas.state.by_guid.get(guid)
        return [] if schema_id is None else [{"context": DEFAULT_CONTEXT, "id": schema_id}]

    def schemas_with_prefix(self, prefix: str, deleted: bool, latest_only: bool) -> list[dict]:
        """Every version (the latest only, with ``latest_only``) of the subjects starting with
        ``prefix``, as ``GET /subjects/{s}/versions/{v}`` answers it."""
        out: list[dict] = []
        for subject in self.subjects(prefix, deleted):
            found = self.live(subject, deleted)
            numbers = [max(found)] if latest_only and found else list(found)
            out += [self._answer(subject, n, found[n]) for n in numbers]
        return out

    def schema_usage(self, schema_id: int, deleted: bool) -> list[tuple[str, int]]:
        """(subject, version) pairs holding schema ``schema_id``."""
        state = self.schemas.state
        if schema_id not in state.schemas:
            raise errors.schema_not_found(schema_id)
        return sorted(
            (s, n)
            for s, n in state.uses.get(schema_id, ())
            if deleted or not state.subjects[s][n].deleted
        )

    def subjects(self, prefix: str, deleted: bool, deleted_only: bool = False) -> list[str]:
        """Subjects starting with ``prefix``: with a live version, any (``deleted``), or
        with every version soft-deleted (``deleted_only``, before ``deleted``)."""
        state = self.schemas.state
        names: set[str] = set(state.live_subjects())
        if deleted_only:
            names = set(state.subjects) - names
        elif deleted:
            names = set(state.subjects)
        return sorted(s for s in names if s.startswith(prefix))

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

    def get_version(
        self, subject: str, version: str, deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        number = parse_version(version)
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
        return self._answer(subject, number, v.id, fmt)

    def referenced_by(self, subject: str, version: str) -> list[int]:
        number, _ = self._version(subject, version, False)
        return self.schemas.state.referenced_by(subject, number)

    def find(
        self, subject: str, stored: Stored, deleted: bool = False, latest_only: bool = False
    ) -> tuple[int, int] | None:
        """(version, id) of the subject holding ``stored``, as Confluent's registry looks a
        schema up under a subject: the newest version that is the same schema, else the
        newest that ``Schemas.can_lookup`` finds (only the latest with ``latest_only``)."""
        found = sorted(self.live(subject, deleted).items(), reverse=True)
        if latest_only:
            found = found[:1]
        else:
            for number, sid in found:
                if self.schemas.same(sid, stored):
                    return number, sid
        for number, sid in found:
            if self.schemas.can_lookup(sid, number, stored):
                return number, sid
        return None

    def lookup(
        self, subject: str, body: Any, normalize: bool, deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        self._found(subject, deleted)
        _, stored = self.schemas.from_request(body, normalize)
        for candidate in (stored, self.schemas.with_contract(subject, stored)):
            hit = self.find(subject, candidate, deleted)
            if hit is not None:
                return self._answer(subject, *hit, fmt)
        raise errors.schema_not_found()

    def latest_with_metadata(
        self, subject: str, wanted: dict[str, str], deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        found = self._found(subject, deleted)
        schemas = self.schemas.state.schemas
        for number, sid in sorted(found.items(), reverse=True):
            held = (contracts.loaded(schemas[sid].metadata) or {}).get("properties", {})
            if all(held.get(k) == v for k, v in wanted.items()):
                return self._answer(subject, number, sid, fmt)
        raise errors.schema_not_found()
