"""What the rest of the broker reads of the registry: the produce path's schema id checks
(``log_validator.SchemaIds``) and the schema texts topics-as-tables decode values with (the
Iceberg translator's ``SchemaSource``).

How this works
--------------
All of it is read from this broker's view, with no HTTP and no wait, so a produce never waits
on the registry (but for ``fresher``, the one wait a refused produce may ask for: until the
view applies one more record). The ids a record may carry come from the subject its topic's
strategy names: ``<topic>-key``/``-value`` (TopicNameStrategy), the schema's record name
(RecordNameStrategy) or ``<topic>-<record name>`` (TopicRecordNameStrategy), every version
counting (soft-deleted too), in the default context only (as Confluent Server's: "Schema ID
Validation supports only the default context"; the ids here are the default context's). The
record-name sets need a walk over every subject, so they are
kept (``state.allowed``, at most ``MAX_ALLOWED_SETS``) until the view applies its next
record, and each schema's record names are kept while it stays (``state.names``); both are
filled only here.
"""

from __future__ import annotations

import json

from headrace.protocol import ErrorCode

from . import errors
from .contexts import DEFAULT, context_of
from .schemas import Schemas
from .schemas_log import SchemasLog
from .state import Stored

MAX_ALLOWED_SETS = 1000  # cached sets of ids record-name strategies allow (allowed_ids)


class BrokerView:
    def __init__(self, log_: SchemasLog, schemas: Schemas) -> None:
        self.log, self.schemas = log_, schemas

    @property
    def loaded(self) -> bool:
        """Whether the replica of ``_schemas`` held at start has been read."""
        return self.schemas.reader.loaded.is_set()

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
        if not self.loaded:
            return ErrorCode.REQUEST_TIMED_OUT, "the schema registry is still loading _schemas"
        return None

    def allowed_ids(self, topic: str, part: str, strategy: str) -> set[int]:
        """The ids a record's key (``part`` "key") or value may carry under ``strategy``."""
        state = self.schemas.state
        if strategy == "TopicNameStrategy":
            return {v.id for v in state.subjects.get(f"{topic}-{part}", {}).values()}
        key = (topic if strategy == "TopicRecordNameStrategy" else "", strategy)
        found = state.allowed.get(key)
        if found is None:
            found = set()
            prefix = f"{topic}-" if strategy == "TopicRecordNameStrategy" else ""
            for subject, versions in state.subjects.items():
                if subject.startswith(prefix) and context_of(subject) == DEFAULT:
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
        state = self.schemas.state
        names = state.names.get(schema_id)
        if names is None:
            stored = state.schemas.get(schema_id)
            names = () if stored is None else self._names_of(schema_id, stored)
            state.names[schema_id] = names
        return names

    def _names_of(self, schema_id: int, stored: Stored) -> tuple[str, ...]:
        if stored.schema_type == "PROTOBUF":
            try:
                return tuple(self.schemas.parsed(schema_id).model.messages)
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
        return schema_id in self.schemas.state.schemas

    def may_lag(self) -> bool:
        return not self.log.leads()

    async def fresher(self, timeout_s: float) -> None:
        """Until the view has applied a record more than now (a replica's next fetch from the
        leader), at most ``timeout_s``: a produce refused for a schema id just registered at
        the leader looks again then."""
        reader = self.schemas.reader
        await reader.wait_for(reader.applied + 1, timeout_s)

    def schema_texts(self, schema_id: int) -> tuple[str, str, list[str]] | None:
        """(Type, text, the texts of the schemas it references, theirs first) of schema
        ``schema_id``; None when there is none (topics as tables decode values with it)."""
        stored = self.schemas.state.schemas.get(schema_id)
        if stored is None:
            return None
        try:
            refs = self.schemas.reference_texts(stored.references, DEFAULT)
        except Exception:  # (a reference that is gone: the schema cannot be read whole)
            return None
        return stored.schema_type, stored.text, refs
