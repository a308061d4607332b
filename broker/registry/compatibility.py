"""Compatibility: whether a schema may follow a subject's versions, under the subject's level
(its own, else the global one, else BACKWARD), for registration and for Confluent's
``POST /compatibility/subjects/{subject}/versions[/{version}]``.

How this works
--------------
The versions compared against are the subject's live ones, oldest first; the level says
which of them (the latest, or all for a _TRANSITIVE level) and in which direction, and each
schema type's rules say why two schemas do not fit (schema_types.incompatibilities). A test
against one version (a number, or ``latest``) compares with that version alone, so the
level's _TRANSITIVE is dropped; a version not there is 40402, and ``latest`` of a subject
with no live version is compatible. With ``verbose`` the reasons are answered, and a schema
that does not parse is a reason rather than 42201. With a ``compatibilityGroup`` in the
subject's config (a metadata property's name), a schema (registered, or tested with the
metadata the request brings) is compared only with the versions whose metadata gives that
property the same value (or, like it, none), as in Confluent's.
"""

from __future__ import annotations

from typing import Any

from . import contracts, errors
from .contexts import context_of
from .lookups import Lookups, parse_version
from .schema_types import ParsedSchema, incompatibilities
from .schemas import Schemas


class Compatibility:
    def __init__(self, schemas: Schemas, lookups: Lookups) -> None:
        self.schemas, self.lookups = schemas, lookups

    def against_subject(self, subject: str, new: ParsedSchema, metadata: str | None) -> list[str]:
        """Why ``new`` (with ``metadata``, as kept) may not be registered under ``subject``
        now (empty: it may)."""
        olds = list(self.lookups.live(subject).values())
        return self._check(subject, self.schemas.state.level(subject), new, metadata, olds)

    def _check(
        self, subject: str, level: str, new: ParsedSchema, metadata: str | None, olds: list[int]
    ) -> list[str]:
        """Why ``new`` does not fit the schemas ``olds`` (ids) under ``level``: those of them in
        its compatibility group, when the subject has one."""
        state, context = self.schemas.state, context_of(subject)
        group = state.config(subject).get("compatibilityGroup")
        if group is not None:
            mine, held = _property(metadata, group), state.space(context).schemas
            olds = [i for i in olds if _property(held[i].metadata, group) == mine]
        return incompatibilities(level, new, [self.schemas.parsed(i, context) for i in olds])

    def test(
        self, subject: str, version: str | None, body: Any, normalize: bool, verbose: bool
    ) -> dict[str, Any]:
        """As Confluent's: against a version given (40402 when it or its subject is missing),
        "latest" (none: compatible), or without a version every live one the level names."""
        level = self.schemas.state.level(subject)
        live = self.lookups.live(subject)
        if version is None:
            olds = list(live.values())
        else:
            number = parse_version(version)
            if number is None:
                olds = [live[max(live)]] if live else []
            elif number in live:
                olds = [live[number]]
            else:
                raise errors.version_not_found(number)
            level = level.removesuffix("_TRANSITIVE")
        try:
            new, stored = self.schemas.from_request(body, normalize, context_of(subject))
        except errors.RegistryError as e:
            if not verbose or e.code != errors.INVALID_SCHEMA:
                raise
            return {"is_compatible": False, "messages": [e.message]}
        messages = self._check(subject, level, new, stored.metadata, olds)
        out: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            out["messages"] = messages
        return out


def _property(metadata: str | None, name: str) -> str | None:
    return (contracts.loaded(metadata) or {}).get("properties", {}).get(name)
