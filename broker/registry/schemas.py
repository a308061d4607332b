"""Schemas by id: what the other parts of the registry ask of one schema.

How this works
--------------
``Schemas`` is the one door to the broker's view (``RegistryState``, which the reader of
``_schemas`` replaces when it reads the topic again from the start: so the view is fetched
each time, never kept). Besides it, it owns the cache of parsed schemas (``state.parsed``:
filled here, emptied by the view when a schema's last version goes), and it reads a schema
out of a request's body: type (AVRO by default), text, references (at most
``MAX_REFERENCES``, followed ``MAX_REFERENCE_DEPTH`` deep), ``metadata`` and ``ruleSet``
(contracts.py), parsed into the form the registry keeps: the canonical text Confluent's
registry keeps (Avro's ``Schema.toString()``, compact JSON for JSON Schema, canonical
``.proto`` text), so that two registrations are the same schema when their type, references,
canonical text, metadata and rule set are (``same``). Text, metadata and rule set together are
at most ``max_schema_bytes`` (42209 beyond, ``within_size``).

``fields`` is a schema as Confluent answers it: its ``guid`` (Confluent's, of the form kept,
whatever the format asked: guids.py), ``schemaType`` left out for AVRO, ``references``,
``metadata`` and ``ruleSet`` when there are some, ``schema`` the kept text in the format asked
(formats.py: an AVRO one ``resolved``, a PROTOBUF one ``serialized``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from . import contexts, contracts, errors
from .contracts import kept
from .formats import formatted
from .records import Reference
from .schema_types import TYPES, ParsedSchema, parse
from .schemas_log import SchemasReader
from .state import RegistryState, Stored

MAX_REFERENCES = 1000
MAX_REFERENCE_DEPTH = 32


class Schemas:
    def __init__(self, reader: SchemasReader, *, max_schema_bytes: int) -> None:
        self.reader = reader
        self.max_schema_bytes = max_schema_bytes

    @property
    def state(self) -> RegistryState:
        return self.reader.state

    def parsed(self, schema_id: int, context: str = contexts.DEFAULT) -> ParsedSchema:
        """Schema ``schema_id`` of ``context`` parsed (kept until its last version goes);
        50001 when the text in ``_schemas`` does not parse (a record not written by a
        registry)."""
        space = self.state.space(context)
        cached = space.parsed.get(schema_id)
        if cached is None:
            stored = space.schemas[schema_id]
            refs = self.reference_texts(stored.references, context)
            try:
                cached = parse(stored.schema_type, stored.text, refs, False)
            except ValueError as e:
                message = f"schema {schema_id} in _schemas is unreadable: {e}"
                raise errors.store_error(message) from None
            space.parsed[schema_id] = cached
        return cached

    def remember(self, schema_id: int, parsed: ParsedSchema, context: str) -> None:
        """A schema just registered, as the request's parse left it (not parsed again)."""
        space = self.state.space(context)
        if schema_id in space.schemas:
            space.parsed.setdefault(schema_id, parsed)

    def reference_texts(
        self, refs, context: str, depth: int = 0, seen: set | None = None
    ) -> list[str]:
        """The texts of the schemas ``refs`` name (read in ``context``, the referring schema's:
        contexts.qualify_reference), theirs first (depth first); 42201 when one is missing or
        they nest too deep."""
        seen = set() if seen is None else seen
        if depth > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema("references nested too deep")
        state = self.state
        texts: list[str] = []
        for name, subject, version in refs:
            target = contexts.qualify_reference(context, subject)
            if (target, version) in seen:
                continue
            seen.add((target, version))
            v = state.subjects.get(target, {}).get(version)
            space = state.space_of(target)
            if v is None or v.id not in space.schemas:
                raise errors.invalid_schema(
                    f"reference {name!r}: subject {subject!r} version {version} not found"
                )
            stored = space.schemas[v.id]
            own = contexts.context_of(target)
            texts += self.reference_texts(stored.references, own, depth + 1, seen)
            texts.append(stored.text)
        return texts

    def from_request(
        self, body: Any, normalize: bool, context: str = contexts.DEFAULT
    ) -> tuple[ParsedSchema, Stored]:
        """The schema a request's body holds (its references read in ``context``), parsed,
        and as it would be kept (42201 when it is not one, 42209 when it is too large)."""
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise errors.invalid_schema("the request has no schema string")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in TYPES:
            raise errors.invalid_schema(f"of unknown type {schema_type!r}")
        text = body["schema"]
        own = (
            kept(contracts.metadata(body.get("metadata"))),
            kept(contracts.rule_set(body.get("ruleSet"))),
        )
        self.within_size(Stored(schema_type, text, (), *own))
        raw_refs = body.get("references") or []
        if not isinstance(raw_refs, list) or len(raw_refs) > MAX_REFERENCES:
            raise errors.invalid_schema(f"references: a list of at most {MAX_REFERENCES}")
        try:
            refs: tuple[Reference, ...] = tuple(
                (str(r["name"]), str(r["subject"]), int(r["version"])) for r in raw_refs
            )
        except (KeyError, TypeError, ValueError):
            raise errors.invalid_schema("references need name, subject and version") from None
        try:
            parsed = parse(schema_type, text, self.reference_texts(refs, context), normalize)
        except ValueError as e:
            raise errors.invalid_schema(f"{text[:200]}, details: {e}") from None
        return parsed, Stored(schema_type, parsed.text, refs, *own)

    def within_size(self, stored: Stored) -> Stored:
        """``stored``, or 42209 when it holds more than ``max_schema_bytes``."""
        if stored.size > self.max_schema_bytes:
            raise errors.schema_too_large(
                f"Schema too large: {stored.size} bytes (text, metadata and rule set), more"
                f" than schema.registry.max.schema.bytes ({self.max_schema_bytes})"
            )
        return stored

    def with_contract(self, subject: str, stored: Stored) -> Stored:
        """``stored`` with the metadata and rule set a registration keeps (Confluent's: the
        subject's config and latest live version add to the request's, contracts.applied)."""
        state = self.state
        live = [v.id for _, v in sorted(state.subjects.get(subject, {}).items()) if not v.deleted]
        latest = state.space_of(subject).schemas.get(live[-1]) if live else None
        own = (stored.metadata, stored.rule_set)
        before = (latest.metadata, latest.rule_set) if latest is not None else (None, None)
        metadata, rule_set = contracts.applied(state.config(subject), own, before)
        return self.within_size(replace(stored, metadata=metadata, rule_set=rule_set))

    def same(self, schema_id: int, stored: Stored, context: str = contexts.DEFAULT) -> bool:
        """Whether schema ``schema_id`` of ``context`` is ``stored`` (a request's schema as it
        would be kept): the same type, references, metadata and rule set, and the same
        canonical text once the kept one is parsed again (a text kept by an older registry, in
        another form, still matches)."""
        held = self.state.space(context).schemas.get(schema_id)
        return self._same(schema_id, held, stored, context)

    def can_lookup(
        self, schema_id: int, number: int, stored: Stored, context: str = contexts.DEFAULT
    ) -> bool:
        """Whether ``stored`` finds version ``number`` (schema ``schema_id``), as Confluent's
        ``canLookup``: the same schema once ``confluent:version`` is left out of the one of the
        two that has it while the other has none (the request's must then name ``number``)."""
        held = self.state.space(context).schemas.get(schema_id)
        if held is None:
            return False
        mine = contracts.confluent_version_number(stored.metadata)
        theirs = contracts.confluent_version_number(held.metadata)
        if mine is None and theirs is not None:
            held = replace(held, metadata=contracts.with_confluent_version(held.metadata, None))
        elif mine is not None and theirs is None:
            if mine != number:
                return False
            metadata = contracts.with_confluent_version(stored.metadata, None)
            stored = replace(stored, metadata=metadata)
        return self._same(schema_id, held, stored, context)

    def _same(self, schema_id: int, held: Stored | None, stored: Stored, context: str) -> bool:
        if held is None or (held.schema_type, held.references, held.metadata, held.rule_set) != (
            stored.schema_type,
            stored.references,
            stored.metadata,
            stored.rule_set,
        ):
            return False
        if held.text == stored.text:
            return True
        try:
            return self.parsed(schema_id, context).text == stored.text
        except errors.RegistryError:
            return False

    def fields(
        self, schema_id: int, fmt: str | None = None, context: str = contexts.DEFAULT
    ) -> dict[str, Any]:
        """Schema ``schema_id`` of ``context`` as answered, its text in format ``fmt``
        (formats.py)."""
        return self.answered(self.state.space(context).schemas[schema_id], fmt, context)

    def answered(
        self, stored: Stored, fmt: str | None = None, context: str = contexts.DEFAULT
    ) -> dict[str, Any]:
        """``stored`` (a schema of ``context``) as answered (``fields``)."""
        out: dict[str, Any] = {"guid": stored.guid}
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = [
                {"name": n, "subject": s, "version": v} for n, s, v in stored.references
            ]
        if stored.metadata is not None:
            out["metadata"] = json.loads(stored.metadata)
        if stored.rule_set is not None:
            out["ruleSet"] = json.loads(stored.rule_set)
        refs = stored.references
        out["schema"] = formatted(stored, fmt, lambda: self.reference_texts(refs, context))
        return out
