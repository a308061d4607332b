"""The registry's read routes (Confluent's GETs, the lookup and the compatibility test), below
``RegistryServer`` (http_api.py): each reads its path parts and query and asks one part of the
``SchemaRegistry``; lists take Confluent's ``offset`` and ``limit`` (paging.py). The server's
own metadata (``/v1/metadata/...``) is answered here, by every broker: the Kafka cluster's id
(known once the registry is loaded, which is after the broker joined its cluster),
Headrace's version, no deployment attributes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from headrace import __version__

from .contexts import WILDCARD, normalize
from .forwarding import LeaderForwarder
from .http_auth import RouteGuard
from .http_site import json_answer, text_answer
from .paging import EVERY, SCHEMAS_LIMIT, page, parse_java_int
from .registry import SchemaRegistry
from .schema_types import TYPES

SCHEMA_REGISTRY_CLUSTER = "schema-registry"  # Confluent's default schema.registry.group.id


def flag(value: str | None) -> bool:
    """A query flag (``?deleted=true``): true only when it says so."""
    return value is not None and value.lower() == "true"


class ReadRoutes:
    """The read handlers of ``RegistryServer``, which sets these four."""

    registry: SchemaRegistry
    leader: LeaderForwarder
    guard: RouteGuard | None
    cluster_id: Callable[[], str]  # the Kafka cluster's id

    # reading requests --------------------------------------------------------------------------

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise web.HTTPBadRequest() from None

    @staticmethod
    def _id(request: web.Request) -> int:
        """The path's schema id: a Java int, else Confluent's 404 for a path that does not
        convert."""
        schema_id = parse_java_int(request.match_info["id"])
        if schema_id is None:
            raise web.HTTPNotFound()
        return schema_id

    @staticmethod
    def _subject(request: web.Request) -> str:
        """The path's subject as kept (``:.:name`` is ``name``: contexts.normalize)."""
        return normalize(request.match_info["subject"])

    @staticmethod
    def _scope(request: web.Request) -> str | None:
        """The subject of a ``/config`` or ``/mode`` path, None for the global setting (no
        subject, or the default context ``:.:``, as Confluent's)."""
        subject = request.match_info.get("subject")
        return None if subject is None else normalize(subject) or None

    def _visible(self, request: web.Request, subject: str) -> bool:
        """Whether the request's principal may see ``subject`` in a list (always, without
        the authorizer)."""
        return self.guard is None or self.guard.visible(request, subject)

    def _seen_page(
        self, request: web.Request, items: list, subject_of: Callable, most: int = EVERY
    ) -> list:
        """The page (``offset``, ``limit``) of ``items`` whose subject the principal sees."""
        seen = [x for x in items if self._visible(request, subject_of(x))]
        return page(request.query, seen, most)

    async def _read(self, request: web.Request, answer: Callable[[], Any]) -> web.Response:
        """Answer a read here, or at the leader when no replica of _schemas is held here."""
        if self.leader.must_forward_reads():
            forwarded = await self.leader.forward(request, None)
            if forwarded is not None:
                return forwarded
        await self.registry.ready()
        result = answer()
        if isinstance(result, web.Response):
            return result
        return json_answer(result)

    # reads -------------------------------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.Response:
        return json_answer({})

    async def _metadata_id(self, request: web.Request) -> web.Response:
        """Confluent's ``ServerClusterId``: the Kafka cluster and the registry's group."""
        await self.registry.ready()
        clusters = {
            "kafka-cluster": self.cluster_id(),
            "schema-registry-cluster": SCHEMA_REGISTRY_CLUSTER,
        }
        return json_answer({"scope": {"path": [], "clusters": clusters}})

    async def _metadata_version(self, request: web.Request) -> web.Response:
        return json_answer({"version": __version__})  # (no commitId known: left out)

    async def _metadata_deployment(self, request: web.Request) -> web.Response:
        return json_answer({"attributes": []})

    async def _types(self, request: web.Request) -> web.Response:
        return json_answer(list(TYPES))

    async def _contexts(self, request: web.Request) -> web.Response:
        prefix, listed = request.query.get("contextPrefix"), self.registry.context_records.listed
        return await self._read(request, lambda: page(request.query, listed(prefix)))

    async def _schemas(self, request: web.Request) -> web.Response:
        query, lookups = request.query, self.registry.lookups
        prefix, deleted = query.get("subjectPrefix", ""), flag(query.get("deleted"))
        latest_only = flag(query.get("latestOnly"))
        return await self._read(
            request,
            lambda: self._seen_page(
                request,
                lookups.schemas_with_prefix(prefix, deleted, latest_only),
                lambda s: s["subject"],
                SCHEMAS_LIMIT,
            ),
        )

    async def _schema_by_guid(self, request: web.Request) -> web.Response:
        guid, fmt = request.match_info["guid"], request.query.get("format")
        lookups = self.registry.lookups
        return await self._read(request, lambda: lookups.schema_by_guid(guid, fmt))

    async def _ids_by_guid(self, request: web.Request) -> web.Response:
        guid, lookups = request.match_info["guid"], self.registry.lookups
        return await self._read(request, lambda: lookups.ids_by_guid(guid))

    async def _schema_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._id(request)
        subject, fmt = request.query.get("subject"), request.query.get("format")
        qualified = request.query.get("referenceFormat") == "qualified"
        lookups = self.registry.lookups
        return await self._read(
            request, lambda: lookups.schema_by_id(schema_id, subject, fmt, qualified)
        )

    async def _schema_text_by_id(self, request: web.Request) -> web.Response:
        schema_id, subject = self._id(request), request.query.get("subject")
        fmt, lookups = request.query.get("format"), self.registry.lookups
        return await self._read(
            request, lambda: text_answer(lookups.schema_by_id(schema_id, subject, fmt)["schema"])
        )

    def _usage(self, request: web.Request) -> list[tuple[str, int]]:
        """(subject, version) pairs holding the path's schema id (in the context ``subject=``
        names) that the principal sees."""
        usage = self.registry.lookups.schema_usage(
            self._id(request), flag(request.query.get("deleted")), request.query.get("subject")
        )
        return [(s, n) for s, n in usage if self._visible(request, s)]

    async def _schema_subjects(self, request: web.Request) -> web.Response:
        self._id(request)
        return await self._read(
            request,
            lambda: page(request.query, sorted({s for s, _ in self._usage(request)})),
        )

    async def _schema_versions(self, request: web.Request) -> web.Response:
        self._id(request)
        return await self._read(
            request,
            lambda: page(
                request.query, [{"subject": s, "version": n} for s, n in self._usage(request)]
            ),
        )

    async def _subjects(self, request: web.Request) -> web.Response:
        query = request.query  # (every context unless a prefix says which: Confluent's ":*:")
        prefix, deleted = query.get("subjectPrefix", WILDCARD), flag(query.get("deleted"))
        deleted_only = flag(query.get("deletedOnly"))
        subjects = self.registry.lookups.subjects
        return await self._read(
            request,
            lambda: self._seen_page(request, subjects(prefix, deleted, deleted_only), lambda s: s),
        )

    async def _versions(self, request: web.Request) -> web.Response:
        subject, query = self._subject(request), request.query
        deleted, deleted_only = flag(query.get("deleted")), flag(query.get("deletedOnly"))
        lookups = self.registry.lookups
        return await self._read(
            request, lambda: page(query, lookups.versions(subject, deleted, deleted_only))
        )

    async def _version(self, request: web.Request) -> web.Response:
        subject, version = self._subject(request), request.match_info["version"]
        deleted, fmt = flag(request.query.get("deleted")), request.query.get("format")
        qualified = request.query.get("referenceFormat") == "qualified"
        lookups = self.registry.lookups
        return await self._read(
            request, lambda: lookups.get_version(subject, version, deleted, fmt, qualified)
        )

    async def _latest_with_metadata(self, request: web.Request) -> web.Response:
        subject, query = self._subject(request), request.query
        wanted = dict(zip(query.getall("key", []), query.getall("value", []), strict=False))
        deleted, fmt = flag(query.get("deleted")), query.get("format")
        lookups = self.registry.lookups
        return await self._read(
            request, lambda: lookups.latest_with_metadata(subject, wanted, deleted, fmt)
        )

    async def _version_text(self, request: web.Request) -> web.Response:
        subject, version = self._subject(request), request.match_info["version"]
        deleted, fmt = flag(request.query.get("deleted")), request.query.get("format")
        lookups = self.registry.lookups
        return await self._read(
            request,
            lambda: text_answer(lookups.get_version(subject, version, deleted, fmt)["schema"]),
        )

    async def _referenced_by(self, request: web.Request) -> web.Response:
        subject, version = self._subject(request), request.match_info["version"]
        lookups = self.registry.lookups
        return await self._read(
            request,
            lambda: page(request.query, lookups.referenced_by(subject, version), SCHEMAS_LIMIT),
        )

    async def _lookup(self, request: web.Request) -> web.Response:
        subject = self._subject(request)
        body = await self._body(request)
        normalize = flag(request.query.get("normalize"))
        deleted, fmt = flag(request.query.get("deleted")), request.query.get("format")
        lookups = self.registry.lookups
        return await self._read(
            request, lambda: lookups.lookup(subject, body, normalize, deleted, fmt)
        )

    async def _get_config(self, request: web.Request) -> web.Response:
        subject = self._scope(request)
        default = flag(request.query.get("defaultToGlobal"))
        settings = self.registry.settings
        return await self._read(request, lambda: settings.get_config(subject, default))

    async def _get_mode(self, request: web.Request) -> web.Response:
        subject = self._scope(request)
        default = flag(request.query.get("defaultToGlobal"))
        settings = self.registry.settings
        return await self._read(request, lambda: settings.get_mode(subject, default))

    async def _compatibility(self, request: web.Request) -> web.Response:
        subject = self._subject(request)
        version = request.match_info.get("version")
        body = await self._body(request)
        normalize = flag(request.query.get("normalize"))
        verbose = flag(request.query.get("verbose"))
        compatibility = self.registry.compatibility
        return await self._read(
            request, lambda: compatibility.test(subject, version, body, normalize, verbose)
        )
