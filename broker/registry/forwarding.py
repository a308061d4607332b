"""Requests this broker cannot answer itself, sent to the leader of ``_schemas`` partition 0
(as Confluent's followers forward to their leader).

How this works
--------------
A write (``write``) is made here when this broker leads ``_schemas``; otherwise it is sent to
the leader, to the URL the leader registered in the cluster (``url_of``), marked with
``X-Headrace-Forwarded``. A forwarded request is never forwarded again: the answer is then
50004, and the client may retry. The leader's answer carries ``X-Headrace-Offset``, the end of
what it wrote, and the forwarding broker waits (at most the write timeout) until its own view
of ``_schemas`` has applied it, so a client that reads where it wrote reads its write. While
no leader is known, or the leader answers that it no longer leads, a write is tried again
with a backoff from ``RETRY_BACKOFF_S`` until the write timeout. A read (``forward``) is sent
to the leader only by a broker holding no replica of ``_schemas``.

The client's ``Authorization`` header goes along (the leader checks it again), and so do the
principal and address this broker authenticated (``AS_PRINCIPAL``, ``AS_HOST``), which the
leader takes only when the request itself comes as a super user (a broker by its certificate,
on https: http_auth.py). On https a broker forwards with its own certificate
(``forward_tls``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, hdrs, web

from . import errors
from .errors import RegistryError
from .http_site import CONTENT_TYPE, json_answer
from .registry import SchemaRegistry

FORWARDED = "X-Headrace-Forwarded"
OFFSET = "X-Headrace-Offset"
RETRY_BACKOFF_S = 0.05
PRINCIPAL = "headrace.principal"  # the request's key for its authenticated principal
# a forwarded request's principal and address, as the broker that forwarded it authenticated
# them; taken only from a super user's forwarded request (a broker's)
AS_PRINCIPAL, AS_HOST = "X-Headrace-Principal", "X-Headrace-Host"


class LeaderForwarder:
    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        node_id: int,
        url_of: Callable[[int], str | None],
        forward_tls: ssl.SSLContext | None,
    ) -> None:
        self.registry, self.log = registry, registry.log
        self.node_id, self.url_of, self.forward_tls = node_id, url_of, forward_tls
        self._session: ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def write(
        self, request: web.Request, write: Callable[[], Awaitable[tuple[Any, int]]]
    ) -> web.Response:
        """Make a write here when this broker leads _schemas, else at the leader."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.registry.write_timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                await self.log.topic()
                leader = self.log.leader()
                if leader == self.node_id and self.log.leads():
                    await self.registry.ready()
                    result, end = await write()
                    if result is None:  # (nothing to answer: Confluent's 204)
                        return web.Response(status=204, headers={OFFSET: str(end)})
                    return json_answer(result, headers={OFFSET: str(end)})
                if leader >= 0 and FORWARDED not in request.headers:
                    forwarded = await self.forward(request, leader)
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

    def must_forward_reads(self) -> bool:
        """Whether reads go to the leader: _schemas exists but no replica of it is here."""
        return self.log.replica() is None and bool(self.log.topics.get("_schemas"))

    async def forward(self, request: web.Request, leader: int | None) -> web.Response | None:
        """The leader's answer to ``request``; None when no leader can be asked (then the
        request is answered here). After a write, waits until this broker has applied it."""
        if FORWARDED in request.headers:
            return None
        if leader is None:
            leader = self.log.leader()
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
                headers=self._headers(request),
            ) as answer:
                data = await answer.read()
                status, offset = answer.status, answer.headers.get(OFFSET)
        except (ClientError, TimeoutError, OSError) as e:
            raise errors.forwarding_failed(
                f"Error while forwarding the request to the leader {url}: {e}"
            ) from None
        if status == 500 and _code(data) == errors.UNKNOWN_LEADER:
            raise errors.unknown_leader("the broker asked no longer leads _schemas")
        if offset is not None and status < 300 and self.log.replica() is not None:
            await self.registry.reader.wait_for(int(offset), self.registry.write_timeout_s)
        if status == 204:
            return web.Response(status=204)
        return web.Response(body=data, status=status, content_type=CONTENT_TYPE)

    def _headers(self, request: web.Request) -> dict[str, str]:
        """A forwarded request's headers: the client's credentials go along (the leader
        checks them again)."""
        headers = {"Content-Type": CONTENT_TYPE, FORWARDED: str(self.node_id)}
        if hdrs.AUTHORIZATION in request.headers:
            headers[hdrs.AUTHORIZATION] = request.headers[hdrs.AUTHORIZATION]
        who = request.get(PRINCIPAL)
        if who is not None:
            headers[AS_PRINCIPAL], headers[AS_HOST] = who.principal, who.host
        return headers


def _code(data: bytes) -> int | None:
    try:
        return int(json.loads(data)["error_code"])
    except (ValueError, KeyError, TypeError):
        return None
