"""Configs (Confluent's ``/config``) and modes (``/mode``), global and per subject.

How this works
--------------
Both are kept in the view (``state.configs`` and ``state.modes``, key None for the global
one, ``:.ctx:`` for a context's, contexts.py) and read through it: a subject's own setting,
else its context's (the global one in the default context), else the ``:.__GLOBAL:``
context's, else the default (BACKWARD, READWRITE). A GET of a subject without a setting of
its own is 40408 / 40409 unless ``defaultToGlobal``. A PUT or DELETE is one CONFIG or MODE
record of ``_schemas``, written in the writer's turn (writer.py); at most ``max_subjects``
subjects (and contexts) have a setting of their own (42205 beyond).

A config is Confluent's: ``compatibilityLevel`` (42203 for one that is not a level),
``compatibilityGroup`` (compatibility.py), and the data contract's ``defaultMetadata``,
``overrideMetadata``, ``defaultRuleSet`` and ``overrideRuleSet`` (contracts.py, applied on
registration). A PUT changes the fields it names (a null one is removed) and keeps the others.

Modes: READWRITE; READONLY refuses every write to the subject, its config's too (42205,
``writable``); READONLY_OVERRIDE is READONLY, and set globally it holds for every subject
whatever its own mode (state.py); IMPORT takes the ids (and versions) registrations bring and
checks no compatibility, and is set over subjects that hold versions only with ``force``. A
mode may always be changed (so a read-only registry can be opened again).
"""

from __future__ import annotations

from typing import Any

from . import contexts, errors
from .contracts import CONFIG_FIELDS, Config, config_fields
from .records import ConfigRecord, ModeRecord
from .schemas import Schemas
from .state import READONLY_OVERRIDE
from .writer import SchemasWriter

MODES = ("READWRITE", "READONLY", READONLY_OVERRIDE, "IMPORT")
READ_ONLY = ("READONLY", READONLY_OVERRIDE)


class Settings:
    def __init__(self, schemas: Schemas, writer: SchemasWriter, *, max_subjects: int) -> None:
        self.schemas, self.writer, self.max_subjects = schemas, writer, max_subjects

    def writable(self, subject: str | None) -> None:
        """42205 when ``subject`` (None: the registry) is read-only."""
        if self.schemas.state.mode(subject) in READ_ONLY:
            raise errors.not_permitted(f"Subject {subject} is in read-only mode")

    # reads -------------------------------------------------------------------------------------

    @staticmethod
    def _own_asked(subject: str | None, default_to_global: bool) -> bool:
        """Whether a GET asks for the subject's own setting (40408 / 40409 without one): not
        for the global one, nor the ``:.__GLOBAL:`` context's (the default then, as
        Confluent's), nor with ``defaultToGlobal``."""
        if subject is None or default_to_global:
            return False
        return contexts.context_of(subject) != contexts.GLOBAL

    def get_config(self, subject: str | None, default_to_global: bool) -> Config:
        state = self.schemas.state
        if subject not in state.configs and self._own_asked(subject, default_to_global):
            raise errors.compatibility_not_configured(str(subject))
        return {**state.config(subject), "compatibilityLevel": state.level(subject)}

    def get_mode(self, subject: str | None, default_to_global: bool) -> dict[str, str]:
        state = self.schemas.state
        overridden = state.modes.get(None) == READONLY_OVERRIDE
        if subject not in state.modes and self._own_asked(subject, default_to_global):
            if not overridden:
                raise errors.mode_not_configured(str(subject))
        return {"mode": state.mode(subject)}

    # writes ------------------------------------------------------------------------------------

    def _room_for(self, table: dict, subject: str | None) -> None:
        if subject is not None and subject not in table and len(table) >= self.max_subjects:
            raise errors.not_permitted(
                f"{self.max_subjects} subjects have settings of their own, the most"
                " schema.registry.max.subjects allows"
            )

    async def put_config(self, subject: str | None, body: Any) -> tuple[dict, int]:
        """The fields ``body`` names (Confluent's ``compatibility`` for the level), checked,
        over the subject's config; answered as given (the level as ``compatibility``)."""
        changes = config_fields(body)
        async with self.writer.turn():
            state = self.schemas.state
            self.writable(subject)
            self._room_for(state.configs, subject)
            config = {**state.configs.get(subject, {}), **changes}
            kept = {k: config[k] for k in CONFIG_FIELDS if config.get(k) is not None}
            end = await self.writer.write([ConfigRecord(subject, kept)])
        answer = {k: v for k, v in changes.items() if k != "compatibilityLevel"}
        if "compatibilityLevel" in changes:
            answer["compatibility"] = changes["compatibilityLevel"]
        return answer, end

    async def delete_config(self, subject: str | None) -> tuple[dict, int]:
        async with self.writer.turn():
            state = self.schemas.state
            if subject is not None and subject not in state.configs:
                if subject not in state.subjects:
                    raise errors.subject_not_found(subject)
                raise errors.compatibility_not_configured(subject)
            self.writable(subject)
            old = self.get_config(subject, True)
            end = await self.writer.write([ConfigRecord(subject, None)])
        return old, end

    async def put_mode(self, subject: str | None, body: Any, force: bool) -> tuple[dict, int]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode()
        mode = mode.upper()
        async with self.writer.turn():
            state = self.schemas.state
            if mode == "IMPORT" and not force:
                held = state.subjects if subject is None else subject in state.subjects
                if subject is not None and contexts.is_context(subject):  # (a context's)
                    held = bool(state.in_context(contexts.context_of(subject)))
                if held:
                    raise errors.not_permitted("Cannot import since found existing subjects")
            self._room_for(state.modes, subject)
            end = await self.writer.write([ModeRecord(subject, mode)])
        return {"mode": mode}, end

    async def delete_mode(self, subject: str) -> tuple[dict, int]:
        async with self.writer.turn():
            state = self.schemas.state
            if subject not in state.modes:
                raise errors.mode_not_configured(subject)
            old = state.modes[subject]
            end = await self.writer.write([ModeRecord(subject, None)])
        return {"mode": old}, end
