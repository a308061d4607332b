"""The registry's HTTP listener (``schema.registry.listeners``): Confluent's Schema Registry
REST API, served by aiohttp on the broker's event loop.

How this works
--------------
Each route reads its path parts, query flags and JSON body and calls ``SchemaRegistry``
(registry.py); its answer is JSON with the content type ``application/vnd.schemaregistry.v1+json``
(requests may send that, ``application/vnd.schemaregistry+json``, ``application/json`` or
``application/octet-stream``; bodies are read as JSON whatever they say). A ``RegistryError``
becomes Confluent's error body ``{"error_code": ..., "message": ...}`` with its status; an
unknown path is 404 (error_code 404), a wrong method 405, a body that is not JSON 400, a body
above ``schema.registry.max.request.bytes`` 413. At most ``schema.registry.max.connections``
connections are open at once (one more is closed at once); an idle one is closed after
``KEEPALIVE_S``.

Writes are made by the leader of ``_schemas`` partition 0. Another broker forwards the request
there over HTTP (as Confluent's followers forward to their leader), to the URL the leader
registered in the cluster, marked with ``X-Headrace-Forwarded`` (a forwarded request is never
forwarded again: the answer is then 50004, and the client may retry); the leader's answer
carries ``X-Headrace-Offset``, the end of what it wrote, and the forwarding broker waits (at
most the write timeout) until its own view of ``_schemas`` has applied it, so a client that
reads where it wrote reads its write. While no leader is known, or the leader answers that it
no longer leads, a write is tried again with a short backoff until the write timeout.

Reads are answered from this broker's view, once loaded; a broker holding no replica of
``_schemas`` forwards its reads to the leader too.

On an https listener (``schema.registry.listeners=https://...``) the TLS settings are those
of a listener named SCHEMA_REGISTRY (``listener.name.schema_registry.ssl.*``, else the
broker's ``ssl.*``), and a broker forwards to the others with its own certificate. With the
broker's authorizer on, every request is authenticated (a verified client certificate, else
HTTP Basic against the broker's SCRAM users) and authorized against its ACLs before its
route runs (auth.py; the operation each route needs is ``NEEDS``); a forwarded request
carries the client's ``Authorization`` header, and the leader checks it again; it also names
the principal (and address) the forwarding broker authenticated, which the leader takes only
when the request itself comes as a super user (a broker by its certificate, on https).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, hdrs, web

from headrace.broker.security.authorizer import Operation

from . import errors
from .auth import REALM, Principal, RegistryAuth
from .errors import RegistryError
from .registry import SchemaRegistry, flag
from .schema_types import TYPES

log = logging.getLogger("headrace.registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED = "X-Headrace-Forwarded"
OFFSET = "X-Headrace-Offset"
RETRY_BACKOFF_S = 0.05
KEEPALIVE_S = 30.0  # an idle connection is closed after this long
_STATUS_TEXT = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                413: "Request Entity Too Large", 415: "Unsupported Media Type"}  # fmt: skip


# what each route needs with the authorizer on (auth.py): (operation, what it applies to):
# "subject" (the path's subject), "global" (the CLUSTER resource), "id" (some subject holding
# the path's schema id), or None (an authenticated user)
_O = Operation
NEEDS: dict[tuple[str, str], tuple[int, str] | None] = {
    ("GET", "/"): None,
    ("GET", "/schemas/types"): None,
    ("GET", "/schemas/ids/{id}"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/schema"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/subjects"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/versions"): (_O.DESCRIBE, "id"),
    ("GET", "/subjects"): None,  # (the list shows the subjects the user may describe)
    ("POST", "/subjects/{subject}"): (_O.DESCRIBE, "subject"),
    ("DELETE", "/subjects/{subject}"): (_O.DELETE, "subject"),
    ("GET", "/subjects/{subject}/versions"): (_O.DESCRIBE, "subject"),
    ("POST", "/subjects/{subject}/versions"): (_O.WRITE, "subject"),
    ("GET", "/subjects/{subject}/versions/{version}"): (_O.DESCRIBE, "subject"),
    ("DELETE", "/subjects/{subject}/versions/{version}"): (_O.DELETE, "subject"),
    ("GET", "/subjects/{subject}/versions/{version}/schema"): (_O.DESCRIBE, "subject"),
    ("GET", "/subjects/{subject}/versions/{version}/referencedby"): (_O.DESCRIBE, "subject"),
    ("GET", "/config"): (_O.DESCRIBE_CONFIGS, "global"),
    ("PUT", "/config"): (_O.ALTER_CONFIGS, "global"),
    ("DELETE", "/config"): (_O.ALTER_CONFIGS, "global"),
    ("GET", "/config/{subject}"): (_O.DESCRIBE_CONFIGS, "subject"),
    ("PUT", "/config/{subject}"): (_O.ALTER_CONFIGS, "subject"),
    ("DELETE", "/config/{subject}"): (_O.ALTER_CONFIGS, "subject"),
    ("GET", "/mode"): (_O.DESCRIBE_CONFIGS, "global"),
    ("PUT", "/mode"): (_O.ALTER_CONFIGS, "global"),
    ("GET", "/mode/{subject}"): (_O.DESCRIBE_CONFIGS, "subject"),
    ("PUT", "/mode/{subject}"): (_O.ALTER_CONFIGS, "subject"),
    ("DELETE", "/mode/{subject}"): (_O.ALTER_CONFIGS, "subject"),
    ("POST", "/compatibility/subjects/{subject}/versions"): (_O.DESCRIBE, "subject"),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): (_O.DESCRIBE, "subject"),
}
PRINCIPAL = "headrace.principal"  # the request's key for its authenticated principal
# a forwarded request's principal and address, as the broker that forwarded it authenticated
# them; taken only from a super user's forwarded request (a broker's)
AS_PRINCIPAL, AS_HOST = "X-Headrace-Principal", "X-Headrace-Host"


def _json(document: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        status=status,
        content_type=CONTENT_TYPE,
        headers=headers,
    )


def _error(e: RegistryError) -> web.Response:
    headers = {hdrs.WWW_AUTHENTICATE: REALM} if e.status == 401 else None
    return _json(e.body(), e.status, headers)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RegistryError as e:
        return _error(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        text = _STATUS_TEXT.get(e.status, e.reason)
        return _json({"error_code": e.status, "message": f"HTTP {e.status} {text}"}, e.status)
    except Exception:
        log.exception("schema registry: %s %s failed", request.method, request.path)
        return _json({"error_code": 500, "message": "Internal Server Error"}, 500)


class _Refused(asyncio.Protocol):
    """A connection past ``schema.registry.max.connections``: closed at once."""

    def connection_made(self, transport) -> None:
        transport.close()


class _Site(web.BaseSite):
    """aiohttp's TCP site with a cap on the connections open at once."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, most: int, tls: ssl.SSLContext | None
    ) -> None:
        super().__init__(runner)
        self._host, self._port, self._most, self._tls = host, port, most, tls

    @property
    def name(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        await super().start()
        handlers = self._runner.server
        assert handlers is not None

        def protocol() -> asyncio.BaseProtocol:
            if len(handlers.connections) >= self._most:
                return _Refused()
            return handlers()

        server = await asyncio.get_running_loop().create_server(
            protocol, self._host or None, self._port, reuse_address=True, ssl=self._tls
        )
        self._server = server
        self._port = server.sockets[0].getsockname()[1]


class RegistryServer:
    """Built from the registry, this node's id, ``url_of(node)`` (a broker's registry URL, None
    when it has none) and the settings it reads."""

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        node_id: int,
        url_of: Callable[[int], str | None],
        host: str,
        port: int,
        max_request_bytes: int,
        max_connections: int = 1000,
        auth: RegistryAuth | None = None,
        tls: ssl.SSLContext | None = None,
        forward_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.registry = registry
        self.tls, self.forward_tls = tls, forward_tls
        self.auth = auth if auth is not None and auth.enabled else None
        self.max_connections = max_connections
        self.node_id = node_id
        self.url_of = url_of
        self.host, self.port = host, port
        middlewares: list = [_errors]
        if self.auth is not None:
            middlewares.append(self._authorize)
        self.app = web.Application(client_max_size=max_request_bytes, middlewares=middlewares)
        self._routes()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, keepalive_timeout=KEEPALIVE_S
        )
        await self._runner.setup()
        site = _Site(self._runner, self.host, self.port, self.max_connections, self.tls)
        await site.start()
        self.port = site.port

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # authentication and authorization (auth.py) ----------------------------------------------

    @web.middleware
    async def _authorize(self, request: web.Request, handler) -> web.StreamResponse:
        auth = self.auth
        assert auth is not None
        transport = request.transport
        certificate = transport.get_extra_info("peercert") if transport is not None else None
        who = await auth.authenticate(
            request.headers.get(hdrs.AUTHORIZATION), request.remote or "", certificate
        )
        headers = request.headers
        if FORWARDED in headers and AS_PRINCIPAL in headers and auth.is_super(who):
            who = Principal(headers[AS_PRINCIPAL], headers.get(AS_HOST, who.host))
        request[PRINCIPAL] = who
        route = request.match_info.route.resource
        need = NEEDS.get((request.method, route.canonical)) if route is not None else None
        if need is not None:
            operation, scope = need
            if scope == "subject":
                auth.check(who, operation, request.match_info["subject"])
            elif scope == "global":
                auth.check(who, operation, None)
            else:
                self._check_id(request, who, operation)
        return await handler(request)

    def _check_id(self, request: web.Request, who: Principal, operation: int) -> None:
        """A schema by id: 403 unless some subject holding it (the one named by
        ``?subject=`` when given) may be described; an id not here is left to the route."""
        assert self.auth is not None
        try:
            holders = {
                s for s, _ in self.registry.state.uses.get(int(request.match_info["id"]), ())
            }
        except ValueError:
            return
        wanted = request.query.get("subject")
        if wanted:
            holders &= {wanted}
        if holders and not any(self.auth.may(who, operation, s) for s in holders):
            self.auth.check(who, operation, min(holders))

    def _visible(self, request: web.Request, subject: str) -> bool:
        """Whether the request's principal may see ``subject`` in a list (always, without
        the authorizer)."""
        if self.auth is None:
            return True
        return self.auth.may(request[PRINCIPAL], Operation.DESCRIBE, subject)

    # routes ------------------------------------------------------------------------------------

    def _routes(self) -> None:
        r = self.app.router
        get, post, put, delete = r.add_get, r.add_post, r.add_put, r.add_delete
        get("/", self._root, allow_head=False)
        get("/schemas/types", self._types, allow_head=False)
        get("/schemas/ids/{id}", self._schema_by_id, allow_head=False)
        get("/schemas/ids/{id}/schema", self._schema_text_by_id, allow_head=False)
        get("/schemas/ids/{id}/subjects", self._schema_subjects, allow_head=False)
        get("/schemas/ids/{id}/versions", self._schema_versions, allow_head=False)
        get("/subjects", self._subjects, allow_head=False)
        post("/subjects/{subject}", self._lookup)
        delete("/subjects/{subject}", self._delete_subject)
        get("/subjects/{subject}/versions", self._versions, allow_head=False)
        post("/subjects/{subject}/versions", self._register)
        get("/subjects/{subject}/versions/{version}", self._version, allow_head=False)
        delete("/subjects/{subject}/versions/{version}", self._delete_version)
        get("/subjects/{subject}/versions/{version}/schema", self._version_text, allow_head=False)
        get(
            "/subjects/{subject}/versions/{version}/referencedby",
            self._referenced_by,
            allow_head=False,
        )
        get("/config", self._get_config, allow_head=False)
        put("/config", self._put_config)
        delete("/config", self._delete_config)
        get("/config/{subject}", self._get_config, allow_head=False)
        put("/config/{subject}", self._put_config)
        delete("/config/{subject}", self._delete_config)
        get("/mode", self._get_mode, allow_head=False)
        put("/mode", self._put_mode)
        get("/mode/{subject}", self._get_mode, allow_head=False)
        put("/mode/{subject}", self._put_mode)
        delete("/mode/{subject}", self._delete_mode)
        post("/compatibility/subjects/{subject}/versions", self._compatibility)
        post("/compatibility/subjects/{subject}/versions/{version}", self._compatibility)

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
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise errors.schema_not_found() from None

    async def _read(self, request: web.Request, answer: Callable[[], Any]) -> web.Response:
        """Answer a read here, or at the leader when no replica of _schemas is held here."""
        if self.registry.log.replica() is None and self.registry.log.topics.get("_schemas"):
            forwarded = await self._forward(request, None)
            if forwarded is not None:
                return forwarded
        await self.registry.ready()
        result = answer()
        if isinstance(result, web.Response):
            return result
        return _json(result)

    async def _root(self, request: web.Request) -> web.Response:
        return _json({})

    async def _types(self, request: web.Request) -> web.Response:
        return _json(list(TYPES))

    async def _schema_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._id(request)
        subject, fmt = request.query.get("subject"), request.query.get("format")
        return await self._read(
            request, lambda: self.registry.schema_by_id(schema_id, subject, fmt)
        )

    async def _schema_text_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._id(request)
        subject = request.query.get("subject")

        def answer() -> web.Response:
            text = self.registry.schema_by_id(schema_id, subject)["schema"]
            return web.Response(text=text, content_type=CONTENT_TYPE)

        return await self._read(request, answer)

    async def _schema_subjects(self, request: web.Request) -> web.Response:
        schema_id, deleted = self._id(request), flag(request.query.get("deleted"))
        return await self._read(
            request,
            lambda: sorted(
                {
                    s
                    for s, _ in self.registry.schema_usage(schema_id, deleted)
                    if self._visible(request, s)
                }
            ),
        )

    async def _schema_versions(self, request: web.Request) -> web.Response:
        schema_id, deleted = self._id(request), flag(request.query.get("deleted"))
        return await self._read(
            request,
            lambda: [
                {"subject": s, "version": n}
                for s, n in self.registry.schema_usage(schema_id, deleted)
                if self._visible(request, s)
            ],
        )

    async def _subjects(self, request: web.Request) -> web.Response:
        prefix = request.query.get("subjectPrefix", "")
        deleted = flag(request.query.get("deleted"))
        return await self._read(
            request,
            lambda: [
                s for s in self.registry.subjects(prefix, deleted) if self._visible(request, s)
            ],
        )

    async def _versions(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        deleted = flag(request.query.get("deleted"))
        return await self._read(request, lambda: self.registry.versions(subject, deleted))

    async def _version(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        deleted, fmt = flag(request.query.get("deleted")), request.query.get("format")
        return await self._read(
            request, lambda: self.registry.get_version(subject, version, deleted, fmt)
        )

    async def _version_text(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        deleted = flag(request.query.get("deleted"))

        def answer() -> web.Response:
            text = self.registry.get_version(subject, version, deleted)["schema"]
            return web.Response(text=text, content_type=CONTENT_TYPE)

        return await self._read(request, answer)

    async def _referenced_by(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        return await self._read(request, lambda: self.registry.referenced_by(subject, version))

    async def _lookup(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        body = await self._body(request)
        normalize, deleted = (
            flag(request.query.get("normalize")),
            flag(request.query.get("deleted")),
        )
        return await self._read(
            request, lambda: self.registry.lookup(subject, body, normalize, deleted)
        )

    async def _get_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        default = flag(request.query.get("defaultToGlobal"))
        return await self._read(request, lambda: self.registry.get_config(subject, default))

    async def _get_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        default = flag(request.query.get("defaultToGlobal"))
        return await self._read(request, lambda: self.registry.get_mode(subject, default))

    async def _compatibility(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        version = request.match_info.get("version")
        body = await self._body(request)
        normalize, verbose = (
            flag(request.query.get("normalize")),
            flag(request.query.get("verbose")),
        )
        return await self._read(
            request,
            lambda: self.registry.compatibility(subject, version, body, normalize, verbose),
        )

    # writes ------------------------------------------------------------------------------------

    async def _write(
        self, request: web.Request, write: Callable[[], Awaitable[tuple[Any, int]]]
    ) -> web.Response:
        """Make a write here when this broker leads _schemas, else at the leader."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.registry.write_timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                await self.registry.log.topic()
                leader = self.registry.log.leader()
                if leader == self.node_id and self.registry.log.leads():
                    await self.registry.ready()
                    result, end = await write()
                    return _json(result, headers={OFFSET: str(end)})
                if leader >= 0 and FORWARDED not in request.headers:
                    forwarded = await self._forward(request, leader)
                    if forwarded is not None:
                        return forwarded
                raise errors.unknown_leader("no broker leads _schemas now")
            except RegistryError as e:
                if e.code != errors.UNKNOWN_LEADER or loop.time() + backoff >= deadline:
                    raise
            except Exception as e:  # the topic could not be made yet (StorageError, ...)
                if loop.time() + backoff >= deadline:
                    raise errors.store_error(f"_schemas is not available: {e}") from None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _forward(self, request: web.Request, leader: int | None) -> web.Response | None:
        """The leader's answer to ``request``; None when no leader can be asked (then the
        request is answered here). After a write, waits until this broker has applied it."""
        if FORWARDED in request.headers:
            return None
        if leader is None:
            leader = self.registry.log.leader()
        url = self.url_of(leader) if leader >= 0 and leader != self.node_id else None
        if url is None:
            return None
        if self._session is None:
            self._session = ClientSession(
                timeout=ClientTimeout(total=self.registry.write_timeout_s),
                connector=TCPConnector(ssl=self.forward_tls or True),
            )
        body = await request.read()
        try:
            async with self._session.request(
                request.method,
                url.rstrip("/") + request.path_qs,
                data=body,
                headers=self._forwarded_headers(request),
            ) as answer:
                data = await answer.read()
                status, offset = answer.status, answer.headers.get(OFFSET)
        except (ClientError, TimeoutError, OSError) as e:
            raise errors.forwarding_failed(
                f"Error while forwarding the request to the leader {url}: {e}"
            ) from None
        if status == 500 and _code(data) == errors.UNKNOWN_LEADER:
            raise errors.unknown_leader("the broker asked no longer leads _schemas")
        if offset is not None and status < 300 and self.registry.log.replica() is not None:
            await self.registry.reader.wait_for(int(offset), self.registry.write_timeout_s)
        return web.Response(body=data, status=status, content_type=CONTENT_TYPE)

    def _forwarded_headers(self, request: web.Request) -> dict[str, str]:
        """A forwarded request's headers: the client's credentials go along (the leader
        checks them again)."""
        headers = {"Content-Type": CONTENT_TYPE, FORWARDED: str(self.node_id)}
        if hdrs.AUTHORIZATION in request.headers:
            headers[hdrs.AUTHORIZATION] = request.headers[hdrs.AUTHORIZATION]
        who = request.get(PRINCIPAL)
        if who is not None:
            headers[AS_PRINCIPAL], headers[AS_HOST] = who.principal, who.host
        return headers

    async def _register(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        normalize = flag(request.query.get("normalize"))
        body = await self._body(request)
        return await self._write(request, lambda: self.registry.register(subject, body, normalize))

    async def _delete_subject(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        permanent = flag(request.query.get("permanent"))
        return await self._write(request, lambda: self.registry.delete_subject(subject, permanent))

    async def _delete_version(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        permanent = flag(request.query.get("permanent"))
        return await self._write(
            request, lambda: self.registry.delete_version(subject, version, permanent)
        )

    async def _put_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await self._body(request)
        return await self._write(request, lambda: self.registry.put_config(subject, body))

    async def _delete_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        return await self._write(request, lambda: self.registry.delete_config(subject))

    async def _put_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await self._body(request)
        force = flag(request.query.get("force"))
        return await self._write(request, lambda: self.registry.put_mode(subject, body, force))

    async def _delete_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        return await self._write(request, lambda: self.registry.delete_mode(subject))


def _code(data: bytes) -> int | None:
    try:
        return int(json.loads(data)["error_code"])
    except (ValueError, KeyError, TypeError):
        return None
