"""With the broker's authorizer on: every request authenticated and authorized before its
route runs (auth.py says how a principal is found and what it may do).

How this works
--------------
``RouteGuard.middleware`` authenticates the request (a verified client certificate, else
HTTP Basic against the broker's SCRAM users), keeps the principal on the request
(``PRINCIPAL``; a forwarded request's own principal when it comes from a super user, a
broker), and checks what the route needs (``NEEDS``): an operation on the path's subject, on
the CLUSTER resource ("global"), or on some subject holding the path's schema id ("id"; the
one ``?subject=`` names when given, in its context; a GUID path's id, the one it names);
a subject of a named context is authorized as a topic of its qualified name
(``:.ctx:orders-value`` as ``:.ctx:orders``, auth.py); None: any
authenticated user. ``visible`` filters the
subjects a list shows.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from headrace.broker.security.authorizer import Operation

from .auth import Principal, RegistryAuth
from .contexts import normalize
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
    ("DELETE", "/contexts/{context}"): (_O.ALTER, "global"),
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
                # (as kept: ``:.:name`` is ``name``; the default context ``:.:``, the global)
                auth.check(who, operation, normalize(request.match_info["subject"]) or None)
            elif scope == "global":
                auth.check(who, operation, None)
            else:
                self._check_id(request, who, operation)
        return await handler(request)

    def _check_id(self, request: web.Request, who: Principal, operation: int) -> None:
        """A schema by id or GUID: 403 unless some subject holding it (in the context where
        it is read: the one ``?subject=`` names when given, Lookups.id_holders) may be
        described; an id not here is left to the route."""
        lookups = self.registry.lookups
        if "guid" in request.match_info:
            found = lookups.by_guid(request.match_info["guid"])
            if not found:
                return
            context, schema_id = found[0]
            uses = self.registry.schemas.state.space(context).uses.get(schema_id, ())
            holders = {s for s, _ in uses}
        else:
            path_id = parse_java_int(request.match_info["id"])
            if path_id is None:
                return
            holders = lookups.id_holders(path_id, request.query.get("subject"))
        if holders and not any(self.auth.may(who, operation, s) for s in holders):
            self.auth.check(who, operation, min(holders))

    def visible(self, request: web.Request, subject: str) -> bool:
        """Whether the request's principal may see ``subject`` in a list."""
        return self.auth.may(request[PRINCIPAL], Operation.DESCRIBE, subject)
