"""With the broker's authorizer on: every request authenticated and authorized before its
route runs (auth.py says how a principal is found and what it may do).

How this works
--------------
``RouteGuard.middleware`` authenticates the request (a verified client certificate, else
HTTP Basic against the broker's SCRAM users), keeps the principal on the request
(``PRINCIPAL``; a forwarded request's own principal when it comes from a super user, a
broker), and checks what the route needs (``NEEDS``): an operation on the path's subject, on
the CLUSTER resource ("global"), or on some subject holding the path's schema id ("id"; the
one ``?subject=`` names when given; a GUID path's id, the one it names); None: any
authenticated user. ``visible`` filters the
subjects a list shows.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from headrace.broker.security.authorizer import Operation

from . import guids
from .auth import Principal, RegistryAuth
from .forwarding import AS_HOST, AS_PRINCIPAL, FORWARDED, PRINCIPAL
from .paging import parse_java_int
from .registry import SchemaRegistry

# what each route needs: (operation, what it applies to), or None (an authenticated user)
_O = Operation
NEEDS: dict[tuple[str, str], tuple[int, str] | None] = {
    ("GET", "/"): None,
    ("GET", "/schemas/types"): None,
    ("GET", "/schemas"): None,  # (the list shows the subjects the user may describe)
    ("GET", "/contexts"): None,
    ("GET", "/v1/metadata/id"): None,
    ("GET", "/v1/metadata/version"): None,
    ("GET", "/v1/metadata/deployment"): None,
    ("GET", "/schemas/guids/{guid}"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/guids/{guid}/ids"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/schema"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/subjects"): (_O.DESCRIBE, "id"),
    ("GET", "/schemas/ids/{id}/versions"): (_O.DESCRIBE, "id"),
    ("GET", "/subjects"): None,  # (the list shows the subjects the user may describe)
    ("POST", "/subjects/{subject}"): (_O.DESCRIBE, "subject"),
    ("DELETE", "/subjects/{subject}"): (_O.DELETE, "subject"),
    ("GET", "/subjects/{subject}/versions"): (_O.DESCRIBE, "subject"),
    ("GET", "/subjects/{subject}/metadata"): (_O.DESCRIBE, "subject"),
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


class RouteGuard:
    def __init__(self, auth: RegistryAuth, registry: SchemaRegistry) -> None:
        self.auth, self.registry = auth, registry

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        auth = self.auth
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
        """A schema by id or GUID: 403 unless some subject holding it (the one named by
        ``?subject=`` when given) may be described; an id not here is left to the route."""
        if "guid" in request.match_info:
            guid = guids.parse(request.match_info["guid"])
            schema_id = self.registry.schemas.state.by_guid.get(guid) if guid else None
            if schema_id is None:
                return
        else:
            schema_id = parse_java_int(request.match_info["id"])
            if schema_id is None:
                return
        holders = {s for s, _ in self.registry.schemas.state.uses.get(schema_id, ())}
        wanted = request.query.get("subject")
        if wanted:
            holders &= {wanted}
        if holders and not any(self.auth.may(who, operation, s) for s in holders):
            self.auth.check(who, operation, min(holders))

    def visible(self, request: web.Request, subject: str) -> bool:
        """Whether the request's principal may see ``subject`` in a list."""
        return self.auth.may(request[PRINCIPAL], Operation.DESCRIBE, subject)
