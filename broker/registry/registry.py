"""The schema registry as a broker holds it: its parts, built over one reader of
``_schemas``, and what the rest of the broker reads of it (``BrokerView``).

How this works
--------------
Each part has one job and owns what it changes; the HTTP routes (http_api.py) call them:

* ``schemas`` (schemas.py): the door to the view (``RegistryState``, owned by the reader,
  which alone applies ``_schemas``' records), the cache of parsed schemas, a request's schema;
* ``lookups`` (lookups.py): the reads by subject, version and id;
* ``compatibility`` (compatibility.py): whether a schema may follow a subject's versions;
* ``settings`` (settings.py): compatibility levels and modes;
* ``registration`` (registration.py): registering (ids and versions allocated) and deleting;
* ``context_records`` (context_records.py): the named contexts' records, listed and deleted;
* ``writer`` (writer.py): the one write path, at the leader of ``_schemas``, one at a time.

Reads are answered from this broker's view once it is loaded (``ready``); writes are made by
the leader of ``_schemas`` (the HTTP layer forwards them there).
"""

from __future__ import annotations

import asyncio

from . import errors
from .broker_view import BrokerView
from .compatibility import Compatibility
from .context_records import ContextRecords
from .lookups import Lookups
from .registration import Registration
from .schemas import Schemas
from .schemas_log import SchemasLog, SchemasReader
from .settings import Settings
from .state import RegistryState
from .writer import SchemasWriter


class SchemaRegistry(BrokerView):
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
        self.reader = SchemasReader(log_, RegistryState)
        self.write_timeout_s = write_timeout_ms / 1000
        super().__init__(log_, Schemas(self.reader, max_schema_bytes=max_schema_bytes))
        self.writer = SchemasWriter(log_, self.reader, timeout_s=self.write_timeout_s)
        self.lookups = Lookups(self.schemas)
        self.compatibility = Compatibility(self.schemas, self.lookups)
        self.settings = Settings(self.schemas, self.writer, max_subjects=max_subjects)
        self.context_records = ContextRecords(self.schemas, self.writer, max_contexts=max_subjects)
        self.registration = Registration(
            self.schemas,
            self.writer,
            self.settings,
            self.compatibility,
            self.lookups,
            self.context_records,
            max_schemas=max_schemas,
            max_subjects=max_subjects,
            max_total_bytes=max_total_bytes,
        )

    def start(self) -> None:
        self.reader.start()

    def stop(self) -> None:
        self.reader.stop()

    async def ready(self) -> None:
        """Until the replica held at start has been read (bounded by the write timeout)."""
        if not self.loaded:
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await self.reader.loaded.wait()
            except TimeoutError:
                raise errors.timed_out("the registry is still loading _schemas") from None
