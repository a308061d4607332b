"""The registry listener's HTTP surface as Confluent's clients see it, below the routes: JSON
answers with Confluent's content type, its error bodies, and a cap on open connections.

How this works
--------------
Every answer is JSON with the content type ``application/vnd.schemaregistry.v1+json``. The
``errors`` middleware turns what a route raises into Confluent's error body
``{"error_code": ..., "message": ...}``: a ``RegistryError`` with its own status and code (401
with a ``WWW-Authenticate`` challenge), aiohttp's own refusals with their status as the code
(an unknown path 404, a wrong method 405, a body that is not JSON 400, a body above
``schema.registry.max.request.bytes`` 413), anything else 500. ``CappedSite`` is aiohttp's TCP
site that closes at once a connection past ``schema.registry.max.connections``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import Any

from aiohttp import hdrs, web

from .auth import REALM
from .errors import RegistryError

log = logging.getLogger("headrace.registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_STATUS_TEXT = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                413: "Request Entity Too Large", 415: "Unsupported Media Type"}  # fmt: skip


def json_answer(document: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        status=status,
        content_type=CONTENT_TYPE,
        headers=headers,
    )


def text_answer(text: str) -> web.Response:
    """A schema's bare text (``.../schema`` routes), with Confluent's content type."""
    return web.Response(text=text, content_type=CONTENT_TYPE)


def error_answer(e: RegistryError) -> web.Response:
    headers = {hdrs.WWW_AUTHENTICATE: REALM} if e.status == 401 else None
    return json_answer(e.body(), e.status, headers)


@web.middleware
async def errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RegistryError as e:
        return error_answer(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        text = _STATUS_TEXT.get(e.status, e.reason)
        message = f"HTTP {e.status} {text}"
        return json_answer({"error_code": e.status, "message": message}, e.status)
    except Exception:
        log.exception("schema registry: %s %s failed", request.method, request.path)
        return json_answer({"error_code": 500, "message": "Internal Server Error"}, 500)


class _Refused(asyncio.Protocol):
    """A connection past ``schema.registry.max.connections``: closed at once."""

    def connection_made(self, transport) -> None:
        transport.close()


class CappedSite(web.BaseSite):
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
