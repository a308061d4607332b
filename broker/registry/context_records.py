"""The named contexts as the registry keeps them: their CONTEXT records of ``_schemas``
(written before a context's first schema), ``GET /contexts`` and ``DELETE /contexts/{c}``.

How this works
--------------
A context is listed from its CONTEXT record on, as in Confluent's registry: it stays listed
when its subjects are deleted, until ``DELETE /contexts/{c}`` (Confluent 8.1) writes its
tombstone, which is refused with 42211 while the context holds a subject (soft-deleted ones
too). The list is the default context ``.`` then the named ones by name, ``contextPrefix``
(Confluent 8.2) keeping those that start with it. A context in the path of a DELETE is taken
as Confluent's ``ContextFilter`` takes it (``path_context``): ``.ctx``, ``ctx``, ``:.ctx:``
and ``:.ctx`` all name ``.ctx``; a colon inside is 400. At most ``max_subjects`` contexts
are recorded (42205 beyond), as many as subjects.
"""

from __future__ import annotations

from . import errors
from .contexts import DEFAULT, context_subject
from .records import Change, ContextRecord
from .schemas import Schemas
from .writer import SchemasWriter


def path_context(text: str) -> str:
    """The context a ``/contexts/{c}`` path names (Confluent's ``normalizeContext``); a
    ``RegistryError`` 400 for one with a colon inside."""
    name = text.removeprefix(":").removesuffix(":")
    if ":" in name:
        raise errors.RegistryError(400, 400, f"Context name '{name}' cannot contain a colon")
    return name if name.startswith(".") else f".{name}"


class ContextRecords:
    def __init__(self, schemas: Schemas, writer: SchemasWriter, *, max_contexts: int) -> None:
        self.schemas, self.writer, self.max_contexts = schemas, writer, max_contexts

    def listed(self, prefix: str | None) -> list[str]:
        """``.`` then the recorded contexts by name, those starting with ``prefix``."""
        found = [DEFAULT, *sorted(self.schemas.state.contexts)]
        return [c for c in found if not prefix or c.startswith(prefix)]

    def created(self, context: str) -> list[Change]:
        """The record a registration in ``context`` writes first: its CONTEXT record, when
        it is a named context not recorded yet (42205 past ``max_contexts``)."""
        state = self.schemas.state
        if context == DEFAULT or context in state.contexts:
            return []
        if len(state.contexts) >= self.max_contexts:
            raise errors.not_permitted(
                f"the registry holds {self.max_contexts} contexts, the most"
                " schema.registry.max.subjects allows"
            )
        return [ContextRecord(context, True)]

    async def delete(self, context: str) -> tuple[None, int]:
        """Delete a context's record (none for the default context, never recorded): 42211
        while a subject of it is kept."""
        async with self.writer.turn():
            state = self.schemas.state
            if state.in_context(context):
                raise errors.context_not_empty(context_subject(context))
            if context == DEFAULT or context not in state.contexts:
                return None, 0
            return None, await self.writer.write([ContextRecord(context, False)])
