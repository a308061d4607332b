"""The schema registry's operations, as Confluent's Schema Registry REST API defines them:
reads answered from this broker's ``RegistryState``, writes made by the leader of
``_schemas`` (the HTTP layer forwards them there).

Each method takes what the request said (path parts, query flags, the JSON body) and returns
the JSON to answer, or raises ``RegistryError`` (errors.py) with Confluent's status, code and
message. Writes run one at a time (a lock) on a state caught up with the whole log, so ids
and versions are allocated once: the next id is one above the highest ever seen, unless the
same schema (type, text, references) already has one, in any subject; in IMPORT mode the
request may bring its id (and version).

Bounds: ``max_schemas`` versions in all, ``max_subjects`` subjects and as many subject-level
compatibility levels and modes, ``max_total_bytes`` of distinct schema texts (42205 beyond),
schema texts of at most ``max_schema_bytes`` (42209), at most ``MAX_REFERENCES`` references
per schema, followed ``MAX_REFERENCE_DEPTH`` deep.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from headrace.protocol import ErrorCode

from . import errors
from .records import (
    Change,
    ConfigRecord,
    ModeRecord,
    Reference,
    SchemaRecord,
    SchemaRemoved,
    SubjectDeleted,
    encode,
)
from .schema_types import LEVELS, TYPES, ParsedSchema, incompatibilities, parse
from .schemas_log import SchemasLog, SchemasReader
from .state import RegistryState, Stored

MODES = ("READWRITE", "READONLY", "IMPORT")
MAX_VERSION = 2**31 - 1
MAX_REFERENCES = 1000
MAX_REFERENCE_DEPTH = 32
MAX_ALLOWED_SETS = 1000  # cached sets of ids record-name strategies allow (allowed_ids)


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


def flag(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


class SchemaRegistry:
    def __init__(
        self,
        log_: SchemasLog,
        *,
        max_schemas: int,
        max_subjects: int,
        max_schema_bytes: int,
        write_timeout_ms: int,
        max_total_bytes: int = 2**62,
    ) -> None:
        self.log = log_
        self.reader = SchemasReader(log_, RegistryState)
        self.max_schemas = max_schemas
        self.max_subjects = max_subjects
        self.max_schema_bytes = max_schema_bytes
        self.max_total_bytes = max_total_bytes
        self.write_timeout_s = write_timeout_ms / 1000
        self._lock = asyncio.Lock()

    @property
    def state(self) -> RegistryState:
        return self.reader.state

    def start(self) -> None:
        self.reader.start()

    def stop(self) -> None:
        self.reader.stop()

    # helpers ---------------------------------------------------------------------------------

    def _parsed(self, schema_id: int) -> ParsedSchema:
        cached = self.state.parsed.get(schema_id)
        if cached is None:
            stored = self.state.schemas[schema_id]
            try:
                cached = parse(
                    stored.schema_type, stored.text, self._reference_texts(stored.references), False
                )
            except ValueError as e:  # (a record not written by a registry)
                message = f"schema {schema_id} in _schemas is unreadable: {e}"
                raise errors.store_error(message) from None
            self.state.parsed[schema_id] = cached
        return cached

    def _reference_texts(self, refs, depth: int = 0, seen: set | None = None) -> list[str]:
        """The texts of the schemas ``refs`` name, theirs first (depth first)."""
        seen = set() if seen is None else seen
        if depth > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema("references nested too deep")
        texts: list[str] = []
        for name, subject, version in refs:
            if (subject, version) in seen:
                continue
            seen.add((subject, version))
            v = self.state.subjects.get(subject, {}).get(version)
            if v is None or v.id not in self.state.schemas:
                raise errors.invalid_schema(
                    f"reference {name!r}: subject {subject!r} version {version} not found"
                )
            stored = self.state.schemas[v.id]
            texts += self._reference_texts(stored.references, depth + 1, seen)
            texts.append(stored.text)
        return texts

    def _versions(self, subject: str, deleted: bool) -> dict[int, int]:
        """version -> id of the subject's versions (soft-deleted ones too with ``deleted``)."""
        return {
            n: v.id
            for n, v in sorted(self.state.subjects.get(subject, {}).items())
            if deleted or not v.deleted
        }

    def _subject_versions(self, subject: str, deleted: bool) -> dict[int, int]:
        """As ``_versions``, 40401 when there are none."""
        found = self._versions(subject, deleted)
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def _version(self, subject: str, text: str, deleted: bool) -> tuple[int, int]:
        """(version, id) that ``text`` names in the subject (40401, 40402, 42202)."""
        number = parse_version(text)
        found = self._subject_versions(subject, deleted)
        if number is None:
            number = max(found)
        elif number not in found:
            raise errors.version_not_found(number)
        return number, found[number]

    def _answer(
        self, subject: str, number: int, schema_id: int, fmt: str | None = None
    ) -> dict[str, Any]:
        stored = self.state.schemas[schema_id]
        out: dict[str, Any] = {"subject": subject, "version": number, "id": schema_id}
        out.update(self._schema_fields(stored, fmt))
        return out

    @staticmethod
    def _schema_fields(stored: Stored, fmt: str | None = None) -> dict[str, Any]:
        """A schema as answered: ``fmt`` "serialized" gives a PROTOBUF schema as a base64
        ``FileDescriptorProto`` (what confluent-kafka's Python deserializer asks for)."""
        out: dict[str, Any] = {}
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = [
                {"name": n, "subject": s, "version": v} for n, s, v in stored.references
            ]
        out["schema"] = stored.text
        if stored.schema_type == "PROTOBUF" and fmt == "serialized":
            from .protobuf_text import encode_base64, to_descriptor

            try:
                out["schema"] = encode_base64(to_descriptor(stored.text))
            except ValueError:  # (kept only when it parsed: not expected)
                pass
        return out

    def _request_schema(self, body: Any, normalize: bool) -> tuple[ParsedSchema, Stored]:
        """The schema a request's body holds, parsed (42201 when it is not one)."""
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise errors.invalid_schema("the request has no schema string")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in TYPES:
            raise errors.invalid_schema(f"of unknown type {schema_type!r}")
        text = body["schema"]
        if len(text.encode()) > self.max_schema_bytes:
            raise errors.schema_too_large(
                f"Schema too large: {len(text.encode())} bytes, more than"
                f" schema.registry.max.schema.bytes ({self.max_schema_bytes})"
            )
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
            parsed = parse(schema_type, text, self._reference_texts(refs), normalize)
        except ValueError as e:
            raise errors.invalid_schema(f"{text[:200]}, details: {e}") from None
        return parsed, Stored(schema_type, parsed.text, refs)

    async def ready(self) -> None:
        """Until the replica held at start has been read (bounded by the write timeout)."""
        if not self.reader.loaded.is_set():
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await self.reader.loaded.wait()
            except TimeoutError:
                raise errors.timed_out("the registry is still loading _schemas") from None

    # the produce path's schema id checks (log_validator.SchemaIds) -------------------------------

    def unavailable(self) -> tuple[int, str] | None:
        """(Kafka's error code, why) this broker cannot check schema ids now: ``_schemas``
        exists but no replica of it is held here (a cluster with more brokers than its
        replicas: INVALID_RECORD), or the replica held is not read yet (REQUEST_TIMED_OUT,
        which producers retry)."""
        if self.log.replica() is None:
            if self.log.topics.get("_schemas") is None:
                return None  # nothing registered yet: every id is unknown
            return ErrorCode.INVALID_RECORD, (
                "this broker holds no replica of _schemas (give it one on every broker:"
                " schema.registry.topic.replication.factor)"
            )
        if not self.reader.loaded.is_set():
            return ErrorCode.REQUEST_TIMED_OUT, "the schema registry is still loading _schemas"
        return None

    def allowed_ids(self, topic: str, part: str, strategy: str) -> set[int]:
        """The ids a record's key or value may carry (log_validator.SchemaIds): registered
        under ``<topic>-<part>`` (TopicNameStrategy), or under a subject that is the
        schema's record name (RecordNameStrategy) or ``<topic>-<record name>``
        (TopicRecordNameStrategy); soft-deleted versions included. The record-name sets are
        worked out once per change of the registry (a walk over its subjects)."""
        state = self.state
        if strategy == "TopicNameStrategy":
            return {v.id for v in state.subjects.get(f"{topic}-{part}", {}).values()}
        key = (topic if strategy == "TopicRecordNameStrategy" else "", strategy)
        found = state.allowed.get(key)
        if found is None:
            found = set()
            prefix = f"{topic}-" if strategy == "TopicRecordNameStrategy" else ""
            for subject, versions in state.subjects.items():
                if subject.startswith(prefix):
                    rest = subject[len(prefix) :]
                    found.update(v.id for v in versions.values() if rest in self.record_names(v.id))
            if len(state.allowed) >= MAX_ALLOWED_SETS:
                state.allowed.clear()
            state.allowed[key] = found
        return found

    def record_names(self, schema_id: int) -> tuple[str, ...]:
        """The record names RecordNameStrategy gives a schema: an Avro named type's full name,
        a JSON schema's ``title``, every message of a .proto (the one a record names is in its
        message indexes, which are not read here)."""
        names = self.state.names.get(schema_id)
        if names is None:
            stored = self.state.schemas.get(schema_id)
            names = () if stored is None else self._names_of(schema_id, stored)
            self.state.names[schema_id] = names
        return names

    def _names_of(self, schema_id: int, stored: Stored) -> tuple[str, ...]:
        if stored.schema_type == "PROTOBUF":
            try:
                return tuple(self._parsed(schema_id).model.messages)
            except errors.RegistryError:
                return ()
        try:
            document = json.loads(stored.text)
        except ValueError:
            return ()
        if not isinstance(document, dict):
            return ()
        if stored.schema_type == "JSON":
            title = document.get("title")
            return (title,) if isinstance(title, str) else ()
        name, namespace = document.get("name"), document.get("namespace")
        if not isinstance(name, str):
            return ()
        if "." not in name and isinstance(namespace, str) and namespace:
            name = f"{namespace}.{name}"
        return (name,)

    def schema_known(self, schema_id: int) -> bool:
        return schema_id in self.state.schemas

    def may_lag(self) -> bool:
        return not self.log.leads()

    async def fresher(self, timeout_s: float) -> None:
        """Until the view has applied a record more than now (a replica's next fetch from the
        leader), at most ``timeout_s``: a produce refused for a schema id just registered at
        the leader looks again then."""
        await self.reader.wait_for(self.reader.applied + 1, timeout_s)

    # reads -----------------------------------------------------------------------------------

    def schema_by_id(
        self, schema_id: int, subject: str | None, fmt: str | None = None
    ) -> dict[str, Any]:
        stored = self.state.schemas.get(schema_id)
        if stored is None or (
            subject and all(s != subject for s, _ in self.state.uses.get(schema_id, ()))
        ):
            raise errors.schema_not_found(schema_id)
        return self._schema_fields(stored, fmt)

    @property
    def loaded(self) -> bool:
        """Whether the replica of ``_schemas`` held at start has been read."""
        return self.reader.loaded.is_set()

    def schema_texts(self, schema_id: int) -> tuple[str, str, list[str]] | None:
        """(Type, text, the texts of the schemas it references, theirs first) of schema
        ``schema_id`` in this broker's view; None when there is none (topics as tables decode
        values with it)."""
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            return None
        try:
            refs = self._reference_texts(stored.references)
        except Exception:  # (a reference that is gone: the schema cannot be read whole)
            return None
        return stored.schema_type, stored.text, refs

    def schema_usage(self, schema_id: int, deleted: bool) -> list[tuple[str, int]]:
        if schema_id not in self.state.schemas:
            raise errors.schema_not_found(schema_id)
        return sorted(
            (s, n)
            for s, n in self.state.uses.get(schema_id, ())
            if deleted or not self.state.subjects[s][n].deleted
        )

    def subjects(self, prefix: str, deleted: bool) -> list[str]:
        names = self.state.subjects if deleted else self.state.live_subjects()
        return sorted(s for s in names if s.startswith(prefix))

    def versions(self, subject: str, deleted: bool) -> list[int]:
        return list(self._subject_versions(subject, deleted))

    def get_version(
        self, subject: str, version: str, deleted: bool, fmt: str | None = None
    ) -> dict[str, Any]:
        number = parse_version(version)
        every = self._subject_versions(subject, True)
        if number is None:
            live = self._versions(subject, deleted)
            if not live:
                raise errors.subject_not_found(subject)
            number = max(live)
        if number not in every:
            raise errors.version_not_found(number)
        v = self.state.subjects[subject][number]
        if v.deleted and not deleted:
            raise errors.version_not_found(number)
        return self._answer(subject, number, v.id, fmt)

    def referenced_by(self, subject: str, version: str) -> list[int]:
        number, _ = self._version(subject, version, False)
        return self.state.referenced_by(subject, number)

    def lookup(self, subject: str, body: Any, normalize: bool, deleted: bool) -> dict[str, Any]:
        found = self._subject_versions(subject, deleted)
        _, stored = self._request_schema(body, normalize)
        schema_id = self.state.ids.get(stored)
        for number, sid in sorted(found.items(), reverse=True):
            if sid == schema_id:
                return self._answer(subject, number, sid)
        raise errors.schema_not_found()

    def get_config(self, subject: str | None, default_to_global: bool) -> dict[str, str]:
        if subject is None:
            return {"compatibilityLevel": self.state.level(None)}
        if subject in self.state.configs:
            return {"compatibilityLevel": self.state.configs[subject]}
        if default_to_global:
            return {"compatibilityLevel": self.state.level(None)}
        raise errors.compatibility_not_configured(subject)

    def get_mode(self, subject: str | None, default_to_global: bool) -> dict[str, str]:
        if subject is None:
            return {"mode": self.state.mode(None)}
        if subject in self.state.modes:
            return {"mode": self.state.modes[subject]}
        if default_to_global:
            return {"mode": self.state.mode(None)}
        raise errors.mode_not_configured(subject)

    def compatibility(
        self, subject: str, version: str | None, body: Any, normalize: bool, verbose: bool
    ) -> dict[str, Any]:
        """As Confluent's: against a version given (40402 when it or its subject is missing),
        "latest" (none: compatible), or without a version every live one the level names;
        with ``verbose`` an invalid schema is a reason, not 42201."""
        level = self.state.level(subject)
        live = self._versions(subject, False)
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
            new, _ = self._request_schema(body, normalize)
        except errors.RegistryError as e:
            if not verbose or e.code != errors.INVALID_SCHEMA:
                raise
            return {"is_compatible": False, "messages": [e.message]}
        messages = incompatibilities(level, new, [self._parsed(i) for i in olds])
        out: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            out["messages"] = messages
        return out

    # writes (the leader of _schemas) -----------------------------------------------------------

    async def _write(self, changes: list[Change]) -> int:
        """Write ``changes`` and wait until they are applied here: the offset after them."""
        end = await self.log.append([encode(c) for c in changes])
        if not await self.reader.wait_for(end, self.write_timeout_s):
            raise errors.timed_out("the write was not read back in time")
        return end

    async def _caught_up(self) -> None:
        """Before a write: the state holds every record of the leader's log."""
        partition = self.log.replica()
        if partition is None or not self.log.leads():
            raise errors.unknown_leader("this broker does not lead _schemas")
        end = partition.log.log_end_offset
        if not await self.reader.wait_for(end, self.write_timeout_s):
            raise errors.timed_out("_schemas is not replicated up to its end yet")

    def _writable(self, subject: str | None) -> None:
        if self.state.mode(subject) == "READONLY":
            raise errors.not_permitted(f"Subject {subject} is in read-only mode")

    async def register(self, subject: str, body: Any, normalize: bool) -> tuple[dict, int]:
        """POST /subjects/{subject}/versions: ({"id": id}, offset written or 0)."""
        if not subject or any(ord(c) < 32 for c in subject):
            raise errors.invalid_subject(subject)
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            self._writable(subject)
            mode = self.state.mode(subject)
            new, stored = self._request_schema(body, normalize)
            wanted_id = body.get("id") if isinstance(body, dict) else None
            wanted_version = body.get("version") if isinstance(body, dict) else None
            if wanted_id is not None and wanted_id != -1:
                if mode != "IMPORT":
                    raise errors.not_permitted(f"Subject {subject} is not in import mode")
                if not isinstance(wanted_id, int) or wanted_id < 1:
                    raise errors.invalid_schema(f"id {wanted_id!r} is not a schema id")
            else:
                wanted_id = None
                if mode == "IMPORT":  # (importing brings its ids)
                    raise errors.not_permitted(f"Subject {subject} is not in read-write mode")
            versions = self.state.subjects.get(subject, {})
            for _, v in sorted(versions.items()):
                if not v.deleted and self.state.schemas.get(v.id) == stored:
                    if wanted_id is not None and wanted_id != v.id:
                        raise errors.id_does_not_match(
                            f"Schema already registered with id {v.id} instead of input id"
                            f" {wanted_id}"
                        )
                    return {"id": v.id}, 0
            if mode != "IMPORT":
                live = [self._parsed(v.id) for _, v in sorted(versions.items()) if not v.deleted]
                found = incompatibilities(self.state.level(subject), new, live)
                if found:
                    raise errors.incompatible(subject, found)
            schema_id = self.state.ids.get(stored)
            if wanted_id is not None:
                holder = self.state.schemas.get(wanted_id)
                if holder is not None and holder != stored:
                    raise errors.id_does_not_match(
                        f"Overwrite new schema with id {wanted_id} is not permitted."
                    )
                schema_id = wanted_id
            elif schema_id is None:
                schema_id = self.state.max_id + 1
            size = len(stored.text.encode())
            if schema_id not in self.state.schemas and (
                self.state.text_bytes + size > self.max_total_bytes
            ):
                raise errors.not_permitted(
                    f"the registry holds {self.state.text_bytes} bytes of schemas; this one would"
                    " pass schema.registry.max.total.schema.bytes"
                    f" ({self.max_total_bytes})"
                )
            if self.state.version_count() >= self.max_schemas:
                raise errors.not_permitted(
                    f"the registry holds {self.max_schemas} schema versions, the most"
                    " schema.registry.max.schemas allows"
                )
            if subject not in self.state.subjects and len(self.state.subjects) >= self.max_subjects:
                raise errors.not_permitted(
                    f"the registry holds {self.max_subjects} subjects, the most"
                    " schema.registry.max.subjects allows"
                )
            number = max(versions, default=0) + 1
            if mode == "IMPORT" and isinstance(wanted_version, int) and wanted_version > 0:
                if wanted_version in versions:
                    raise errors.not_permitted(f"version {wanted_version} of {subject} exists")
                number = wanted_version
            record = SchemaRecord(
                subject,
                number,
                schema_id,
                stored.schema_type,
                stored.text,
                stored.references,
                False,
            )
            end = await self._write([record])
            self.state.parsed.setdefault(schema_id, new)
            return {"id": schema_id}, end

    def _referenced(self, subject: str, numbers) -> None:
        for number in numbers:
            users = self.state.referenced_by(subject, number)
            if users:
                raise errors.reference_exists(
                    f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,"
                    f"subject={subject},version={number}}}."
                )

    async def delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], int]:
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            self._writable(subject)
            versions = self.state.subjects.get(subject)
            if not versions:
                raise errors.subject_not_found(subject)
            live = [n for n, v in sorted(versions.items()) if not v.deleted]
            changes: list[Change]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                self._referenced(subject, versions)
                done = sorted(versions)
                changes = [SchemaRemoved(subject, n) for n in done]
                if subject in self.state.configs:
                    changes.append(ConfigRecord(subject, None))
                if subject in self.state.modes:
                    changes.append(ModeRecord(subject, None))
            else:
                if not live:
                    raise errors.subject_soft_deleted(subject)
                self._referenced(subject, live)
                done = live
                changes = [SubjectDeleted(subject, max(versions))]
            return done, await self._write(changes)

    async def delete_version(self, subject: str, version: str, permanent: bool) -> tuple[int, int]:
        number_or_latest = parse_version(version)
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            self._writable(subject)
            versions = self.state.subjects.get(subject)
            if not versions:
                raise errors.subject_not_found(subject)
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
            self._referenced(subject, [number])
            if permanent:
                if not v.deleted:
                    raise errors.version_not_soft_deleted(subject, number)
                return number, await self._write([SchemaRemoved(subject, number)])
            if v.deleted:
                raise errors.version_soft_deleted(subject, number)
            stored = self.state.schemas[v.id]
            record = SchemaRecord(
                subject, number, v.id, stored.schema_type, stored.text, stored.references, True
            )
            return number, await self._write([record])

    def _room_for(self, table: dict, subject: str | None) -> None:
        if subject is not None and subject not in table and len(table) >= self.max_subjects:
            raise errors.not_permitted(
                f"{self.max_subjects} subjects have settings of their own, the most"
                " schema.registry.max.subjects allows"
            )

    async def put_config(self, subject: str | None, body: Any) -> tuple[dict, int]:
        level = None
        if isinstance(body, dict):
            level = body.get("compatibility") or body.get("compatibilityLevel")
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise errors.invalid_compatibility_level()
        level = level.upper()
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            self._room_for(self.state.configs, subject)
            end = await self._write([ConfigRecord(subject, level)])
        return {"compatibility": level}, end

    async def delete_config(self, subject: str | None) -> tuple[dict, int]:
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            if subject is not None and subject not in self.state.configs:
                if subject not in self.state.subjects:
                    raise errors.subject_not_found(subject)
                raise errors.compatibility_not_configured(subject)
            old = self.state.level(subject)
            end = await self._write([ConfigRecord(subject, None)])
        return {"compatibilityLevel": old}, end

    async def put_mode(self, subject: str | None, body: Any, force: bool) -> tuple[dict, int]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode()
        mode = mode.upper()
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            if mode == "IMPORT" and not force:
                held = (
                    self.state.subjects
                    if subject is None
                    else ({subject} if subject in self.state.subjects else set())
                )
                if held:
                    raise errors.not_permitted("Cannot import since found existing subjects")
            self._room_for(self.state.modes, subject)
            end = await self._write([ModeRecord(subject, mode)])
        return {"mode": mode}, end

    async def delete_mode(self, subject: str) -> tuple[dict, int]:
        await self.log.topic()
        async with self._lock:
            await self._caught_up()
            if subject not in self.state.modes:
                raise errors.mode_not_configured(subject)
            old = self.state.modes[subject]
            end = await self._write([ModeRecord(subject, None)])
        return {"mode": old}, end
