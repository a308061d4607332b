"""The ``/contexts/{context}/...`` path prefix: every route addressed in a context, as
Confluent's registry rewrites such a path before routing it (its ``ContextFilter``).

How this works
--------------
``unprefixed`` turns the URL of a request whose path starts ``/contexts/`` into the URL of the
route it stands for; ``middleware`` hands the request, with that URL, to the application's
own dispatch, so it is routed, authorized (http_auth.py), forwarded to the leader
(forwarding.py) and answered exactly as if it had come so. Confluent's rules:

- The segment after ``contexts`` names the context (URL-decoded), read as
  ``DELETE /contexts/{c}`` reads it (context_records.path_context): ``.ctx``, ``ctx``,
  ``:.ctx:`` are ``.ctx``; ``.`` and ``:.:`` the default context; a colon inside is 400,
  where the context is used.
- The segment after ``subjects`` (``/subjects/{s}``, ``/compatibility/subjects/{s}``) and
  after a first ``config`` or ``mode`` is a subject, put in the context unless it names one
  itself (``:.other:s``, ``:.:s``, ``:*:s``: ``names_context``). ``/config`` and ``/mode``
  alone are the context's own (``/config/:.ctx:``; the global ones in the default context).
- ``/schemas/ids/...`` reads its id in the context: ``subject=`` is put in it the same way,
  the context alone (``:.ctx:``) when not given. ``/subjects`` and ``/schemas`` list the
  context's subjects: each ``subjectPrefix=`` put in it, ``:.ctx:`` when none is given.
- ``/contexts/.ctx`` alone is ``/contexts/:.ctx:`` (its ``DELETE``), the default context's
  ``/``; a further ``contexts`` first names another context (the last one counts). Any other
  path is the route without the prefix, the context unused (``/schemas/types``, GUIDs).
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from aiohttp import hdrs, web
from yarl import URL

from .context_records import path_context
from .contexts import DEFAULT, context_subject, names_context

PREFIX = "/contexts/"
_UNPREFIXED = "headrace.unprefixed"  # a request's key once its URL is the route's


def unprefixed(url: URL) -> URL:
    """The URL a ``/contexts/{c}/...`` URL stands for (module doc); a ``RegistryError`` 400
    for a context with a colon inside."""
    path: list[str] = []
    context = DEFAULT
    naming = subject_next = config_or_mode = False

    def qualify(subject: str) -> str:
        """``subject`` put in the context (read only here: Confluent's refuses a bad one only
        once it is used)."""
        if names_context(subject):
            return subject
        return context_subject(path_context(context)) + subject

    def in_context(segment: str) -> str:
        return quote(qualify(unquote(segment)), safe=":")

    for segment in url.raw_path[1:].rstrip("/").split("/"):
        first = not any(path)
        if naming:
            context, naming = unquote(segment), False
            continue
        if first and segment == "contexts":
            naming = True
            continue
        if subject_next:
            segment, subject_next = in_context(segment), False
        elif first and segment in ("config", "mode"):
            subject_next = config_or_mode = True
        elif segment == "subjects":
            subject_next = True
        path.append(segment)
    if config_or_mode and subject_next:  # /config, /mode alone: the context's own
        path.append(in_context(""))
    elif naming:  # /contexts/ alone
        path.append("contexts")
    elif not any(path) and in_context(""):  # the context alone (the default one: /)
        path = ["contexts", in_context("")]
    route = "/".join(path).strip("/")  # (no empty segment at the ends: the default's own)
    rewritten, query = url.with_path("/" + route, encoded=True, keep_query=True), url.query
    if route.startswith("schemas/ids"):
        return rewritten.update_query(subject=qualify(query.get("subject", "")))
    if route in ("schemas", "subjects"):
        prefixes = query.getall("subjectPrefix", [""])
        return rewritten.update_query([("subjectPrefix", qualify(p)) for p in prefixes])
    return rewritten


@web.middleware
async def middleware(request: web.Request, handler) -> web.StreamResponse:
    """A ``/contexts/{c}/...`` request dispatched again with the URL of its route."""
    if not request.rel_url.raw_path.startswith(PREFIX) or _UNPREFIXED in request:
        return await handler(request)
    headers = request.headers.copy()
    headers.popall(hdrs.EXPECT, None)  # (a "100 Continue" went with the first dispatch)
    routed = request.clone(rel_url=unprefixed(request.rel_url), headers=headers)
    routed[_UNPREFIXED] = True
    # (aiohttp's own dispatch: routing, then every middleware, the guard among them)
    return await request.app._handle(routed)
