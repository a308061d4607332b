"""The registry's HTTP listener (``schema.registry.listeners``): Confluent's Schema Registry
REST API, served by aiohttp on the broker's event loop.

How this works
--------------
Each route (the reads in http_reads.py) reads its path parts, query flags and JSON body and
calls one part of the ``SchemaRegistry`` (registry.py): ``lookups`` for reads,
``compatibility``, ``settings`` for levels and modes, ``registration`` for registering and
deleting. Answers and errors take
Confluent's forms (http_site.py); requests may send ``application/vnd.schemaregistry.v1+json``,
``application/vnd.schemaregistry+json``, ``application/json`` or
``application/octet-stream`` (bodies are read as JSON whatever they say). A path under
``/contexts/{c}/`` is handled as the route it stands for in context ``c`` (context_paths.py:
dispatched again with that route's URL). At most
``schema.registry.max.connections`` connections are open at once (one more is closed at
once); an idle one is closed after ``KEEPALIVE_S``.

Reads are answered from this broker's view, once loaded; writes are made by the leader of
``_schemas`` partition 0, and a broker holding no replica of ``_schemas`` sends its reads
there too (forwarding.py).

On an https listener (``schema.registry.listeners=https://...``) the TLS settings are those
of a listener named SCHEMA_REGISTRY (``listener.name.schema_registry.ssl.*``, else the
broker's ``ssl.*``), and a broker forwards to the others with its own certificate. With the
broker's authorizer on, every request is authenticated and authorized before its route runs
(http_auth.py, auth.py).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from . import context_paths
from .auth import RegistryAuth
from .context_records import path_context
from .forwarding import LeaderForwarder
from .http_auth import RouteGuard
from .http_reads import ReadRoutes, flag
from .http_site import CappedSite
from .http_site import errors as errors_middleware
from .registry import SchemaRegistry

KEEPALIVE_S = 30.0  # an idle connection is closed after this long


class RegistryServer(ReadRoutes):
    """Built from the registry, this node's id, ``url_of(node)`` (a broker's registry URL, None
    when it has none), ``cluster_id()`` (the Kafka cluster's, once the broker joined it) and
    the settings it reads."""

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        node_id: int,
        url_of: Callable[[int], str | None],
        cluster_id: Callable[[], str],
        host: str,
        port: int,
        max_request_bytes: int,
        max_connections: int = 1000,
        auth: RegistryAuth | None = None,
        tls: ssl.SSLContext | None = None,
        forward_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.registry, self.cluster_id = registry, cluster_id
        self.tls = tls
        self.max_connections = max_connections
        self.host, self.port = host, port
        self.leader = LeaderForwarder(
            registry, node_id=node_id, url_of=url_of, forward_tls=forward_tls
        )
        middlewares: list = [errors_middleware, context_paths.middleware]
        self.guard: RouteGuard | None = None
        if auth is not None and auth.enabled:
            self.guard = RouteGuard(auth, registry)
            middlewares.append(self.guard.middleware)
        self.app = web.Application(client_max_size=max_request_bytes, middlewares=middlewares)
        self._routes()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, keepalive_timeout=KEEPALIVE_S
        )
        await self._runner.setup()
        site = CappedSite(self._runner, self.host, self.port, self.max_connections, self.tls)
        await site.start()
        self.port = site.port

    async def stop(self) -> None:
        await self.leader.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _routes(self) -> None:
        r = self.app.router
        get, post, put, delete = r.add_get, r.add_post, r.add_put, r.add_delete
        get("/", self._root, allow_head=False)
        get("/schemas", self._schemas, allow_head=False)
        get("/schemas/types", self._types, allow_head=False)
        get("/schemas/guids/{guid}", self._schema_by_guid, allow_head=False)
        get("/schemas/guids/{guid}/ids", self._ids_by_guid, allow_head=False)
        get("/contexts", self._contexts, allow_head=False)
        delete("/contexts/{context}", self._delete_context)
        get("/v1/metadata/id", self._metadata_id, allow_head=False)
        get("/v1/metadata/version", self._metadata_version, allow_head=False)
        get("/v1/metadata/deployment", self._metadata_deployment, allow_head=False)
        get("/schemas/ids/{id}", self._schema_by_id, allow_head=False)
        get("/schemas/ids/{id}/schema", self._schema_text_by_id, allow_head=False)
        get("/schemas/ids/{id}/subjects", self._schema_subjects, allow_head=False)
        get("/schemas/ids/{id}/versions", self._schema_versions, allow_head=False)
        get("/subjects", self._subjects, allow_head=False)
        post("/subjects/{subject}", self._lookup)
        delete("/subjects/{subject}", self._delete_subject)
        get("/subjects/{subject}/versions", self._versions, allow_head=False)
        get("/subjects/{subject}/metadata", self._latest_with_metadata, allow_head=False)
        post("/subjects/{subject}/versions", self._register)
        get("/subjects/{subject}/versions/{version}", self._version, allow_head=False)
        delete("/subjects/{subject}/versions/{version}", self._delete_version)
        get("/subjects/{subject}/versions/{version}/schema", self._version_text, allow_head=False)
        get(
            "/subjects/{subject}/versions/{version}/referencedby",
            self._referenced_by,
            allow_head=False,
        )
        for path in ("/config", "/config/{subject}"):
            get(path, self._get_config, allow_head=False)
            put(path, self._put_config)
            delete(path, self._delete_config)
        for path in ("/mode", "/mode/{subject}"):
            get(path, self._get_mode, allow_head=False)
            put(path, self._put_mode)
        delete("/mode/{subject}", self._delete_mode)
        post("/compatibility/subjects/{subject}/versions", self._compatibility)
        post("/compatibility/subjects/{subject}/versions/{version}", self._compatibility)

    # writes ------------------------------------------------------------------------------------

    def _write(
        self, request: web.Request, write: Callable[[], Awaitable[tuple[Any, int]]]
    ) -> Awaitable[web.Response]:
        return self.leader.write(request, write)

    async def _register(self, request: web.Request) -> web.Response:
        subject = self._subject(request)
        normalize, fmt = flag(request.query.get("normalize")), request.query.get("format")
        body = await self._body(request)
        registration = self.registry.registration
        return await self._write(
            request, lambda: registration.register(subject, body, normalize, fmt)
        )

    async def _delete_subject(self, request: web.Request) -> web.Response:
        subject = self._subject(request)
        permanent = flag(request.query.get("permanent"))
        registration = self.registry.registration
        return await self._write(request, lambda: registration.delete_subject(subject, permanent))

    async def _delete_version(self, request: web.Request) -> web.Response:
        subject, version = self._subject(request), request.match_info["version"]
        permanent = flag(request.query.get("permanent"))
        registration = self.registry.registration
        return await self._write(
            request, lambda: registration.delete_version(subject, version, permanent)
        )

    async def _put_config(self, request: web.Request) -> web.Response:
        subject = self._scope(request)
        body = await self._body(request)
        settings = self.registry.settings
        return await self._write(request, lambda: settings.put_config(subject, body))

    async def _delete_config(self, request: web.Request) -> web.Response:
        subject = self._scope(request)
        settings = self.registry.settings
        return await self._write(request, lambda: settings.delete_config(subject))

    async def _put_mode(self, request: web.Request) -> web.Response:
        subject = self._scope(request)
        body = await self._body(request)
        force = flag(request.query.get("force"))
        settings = self.registry.settings
        return await self._write(request, lambda: settings.put_mode(subject, body, force))

    async def _delete_context(self, request: web.Request) -> web.Response:
        context = path_context(request.match_info["context"])
        context_records = self.registry.context_records
        return await self._write(request, lambda: context_records.delete(context))

    async def _delete_mode(self, request: web.Request) -> web.Response:
        subject = self._subject(request)
        settings = self.registry.settings
        return await self._write(request, lambda: settings.delete_mode(subject))
