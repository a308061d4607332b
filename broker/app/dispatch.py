"""Request dispatch: the pipeline's handler, from a request's bytes to its response's.

How this works
--------------
``Dispatcher.handle`` is the pipeline's handler. It runs in a handler queue, in arrival order per
connection: it decodes the request header, finds the API module (one per Kafka API, listed
in ``APIS``, imported on first use), decodes the body and calls the module's
``handle(broker, header, request)``.
A module returns the response message, ``None`` for no response (acks=0), or an awaitable of
either when the answer comes later (a produce waiting for its flush, a long-polling fetch, an
admin request doing disk work in a thread). An awaitable may also give ``(message, on_sent)``:
``on_sent`` is called once the response has left through the socket (Fetch releases its
share of ``fetch_budget``, the broker-wide budget for response bytes in memory, there). A
module whose responses can be large says how large with ``response_bytes(broker, request)``;
the connection counts that as unsent until the response is written, so a client that does not
read gets none of its next requests handled.
Encoding the response header and body happens here, once, for every API.

Requests the broker cannot parse close the connection, as Kafka does: an unknown API key, a
version outside what we list (except ApiVersions, which answers UNSUPPORTED_VERSION with the
list so the client can retry), or a malformed body. A module that fails unexpectedly (raises,
or its awaitable does) gets its request answered with UNKNOWN_SERVER_ERROR wherever the
response has an error code (``protocol.error_response``) and the traceback logged, as Kafka
does; the connection stays open (an acks=0 produce, having no response, closes it).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headrace.broker.apis.context import Broker
from headrace.broker.apis.registry import APIS, handler
from headrace.broker.security.quotas import REQUEST
from headrace.broker.security.sasl import AUTHENTICATE, COMPLETE, HANDSHAKE, SaslSession
from headrace.broker.security.session import ANONYMOUS, RequestContext, Session
from headrace.broker.security.tls import certificate_principal
from headrace.pipeline import CloseConnection, Request, Response
from headrace.protocol import (
    ApiKey,
    DecodeError,
    ErrorCode,
    decode_message,
    decode_request_header,
    encode_response,
    encode_response_header,
    error_response,
    request_class,
    response_header_is_flexible,
)

if TYPE_CHECKING:
    from .server import BrokerServer

log = logging.getLogger("headrace")


class Dispatcher:
    """The pipeline's handler (``pipeline.Handler``) for one broker."""

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.broker: Broker = server  # what the API modules get: apis/context.py names it
        self.metrics = server.metrics  # (looked up once: every request counts itself here)
        self.quotas = server.quotas

    def handle(self, request: Request):
        started = time.monotonic()
        conn = request.connection
        session = conn.session
        if isinstance(session, Session) and session.sasl is not None and session.sasl.bare_tokens:
            return handler(ApiKey.SASL_AUTHENTICATE)[0].bare_token(
                self.broker, session, bytes(request.frame)
            )
        frame = memoryview(request.frame)
        try:
            header, offset = decode_request_header(frame)
        except DecodeError as e:
            raise CloseConnection(f"malformed request header: {e}") from None
        if not isinstance(session, Session):  # the connection's first request
            session = conn.session = self._session(conn)
        context = RequestContext(*header, session)
        if session.sasl is not None and session.sasl.state != COMPLETE:
            _before_authentication(session.sasl, header.api_key)
        elif session.sasl is not None and session.sasl.expired():
            if header.api_key != ApiKey.SASL_HANDSHAKE:  # a re-authentication may begin
                raise CloseConnection(
                    "SASL session expired without re-authentication (connections.max.reauth.ms)"
                )
        versions = APIS.get(header.api_key)
        if versions is None:
            raise CloseConnection(f"unknown api key {header.api_key}")
        name, lowest, highest = versions
        version = header.api_version
        if not lowest <= version <= highest:
            if header.api_key == ApiKey.API_VERSIONS:
                unsupported = handler(ApiKey.API_VERSIONS)[0].unsupported()
                return self._encode(header, unsupported, started, version=0)
            raise CloseConnection(f"unsupported version {version} of api key {header.api_key}")
        api, size = handler(header.api_key)
        try:
            # bytes after the body are ignored, as Kafka does (librdkafka sends some)
            body = decode_message(
                request_class(header.api_key), version, frame, offset, exact=False
            )
        except DecodeError as e:
            raise CloseConnection(f"malformed {name} v{version} request: {e}") from None
        if size is not None:  # count it against the connection before its next request
            request.expect(size(self.broker, body))
        try:
            if REQUEST in self.quotas.active:  # request_percentage quotas: time the handler
                started = time.perf_counter()
                outcome = api.handle(self.broker, context, body)
                throttle = self._request_time(context, time.perf_counter() - started)
                if throttle and outcome is not None:
                    if hasattr(outcome, "__await__"):
                        outcome = _throttled_later(outcome, throttle)
                    else:
                        _throttled(outcome, throttle)
            else:
                outcome = api.handle(self.broker, context, body)
            if outcome is None:
                self.metrics.request_done(header.api_key, version, started, None)
                return None
            if hasattr(outcome, "__await__"):
                return self._encode_later(header, body, outcome, started)
            return self._encode(header, outcome, started)
        except CloseConnection:
            raise
        except Exception:
            return self._failed(header, body, started)

    def _request_time(self, context: RequestContext, seconds: float) -> int:
        """Count a request's handler time against the client's request_percentage quota;
        the throttle time it earned (ms), the connection muted for it."""
        now = time.monotonic()
        ms = self.quotas.throttle_ms(
            context.session, context.client_id, REQUEST, seconds * 100, now
        )
        context.session.throttle(ms)
        return ms

    def _session(self, conn) -> Session:
        listener = conn.listener
        session = Session(listener, conn)
        if listener.tls:
            session.principal = certificate_principal(conn.extra("peercert")) or ANONYMOUS
        if listener.sasl:
            session.sasl = SaslSession(self.server.sasl[listener.name])
            conn.require_authentication()  # small frames, one at a time, until authenticated
        return session

    def connection_closed(self, connection) -> None:
        if isinstance(connection.session, Session):
            connection.session.closed()  # (no cycle left between the two)

    def _encode(self, header, response, started: float, version: int | None = None) -> list:
        version = header.api_version if version is None else version
        self.metrics.request_done(header.api_key, version, started, response)
        flexible = response_header_is_flexible(header.api_key, version)
        head = encode_response_header(header.correlation_id, flexible)
        body = encode_response(header.api_key, version, response)
        body[0] = head + body[0]  # one small write for header and the first part of the body
        return body

    async def _encode_later(
        self, header, body, awaitable, started: float
    ) -> list | Response | None:
        try:
            response = await awaitable
            if isinstance(response, tuple):  # (message, on_sent): told once it has left
                message, on_sent = response
                try:
                    return Response(self._encode(header, message, started), on_sent)
                except BaseException:
                    on_sent()
                    raise
            if response is None:
                self.metrics.request_done(header.api_key, header.api_version, started, None)
                return None
            return self._encode(header, response, started)
        except CloseConnection:
            raise
        except Exception:
            return self._failed(header, body, started)

    def _failed(self, header, body, started: float) -> list:
        """A handler failed unexpectedly (called in its ``except``): log the traceback and
        answer UNKNOWN_SERVER_ERROR wherever the response has an error code, as Kafka does;
        an acks=0 produce, which has no response, closes the connection instead."""
        log.exception(
            "%s v%d (correlation id %d, client %r) failed; answering UNKNOWN_SERVER_ERROR",
            ApiKey(header.api_key).name,
            header.api_version,
            header.correlation_id,
            header.client_id,
        )
        if header.api_key == ApiKey.PRODUCE and body.acks == 0:
            raise CloseConnection("an acks=0 produce failed (it has no response to carry that)")
        error = error_response(
            header.api_key, header.api_version, body, ErrorCode.UNKNOWN_SERVER_ERROR
        )
        return self._encode(header, error, started)


def _throttled(response, ms: int) -> None:
    """Put a throttle time in a response that has the field (the larger one wins)."""
    message = response[0] if isinstance(response, tuple) else response
    if getattr(message, "throttle_time_ms", None) is not None:
        message.throttle_time_ms = max(message.throttle_time_ms, ms)


async def _throttled_later(awaitable, ms: int):
    response = await awaitable
    if response is not None:
        _throttled(response, ms)
    return response


# before a SASL client has authenticated (or while it re-authenticates), as Kafka's
# SaslServerAuthenticator: ApiVersions and SaslHandshake first, then SaslAuthenticate
_SASL_APIS = {
    HANDSHAKE: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE),
    AUTHENTICATE: (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE),
}


def _before_authentication(sasl: SaslSession, api_key: int) -> None:
    """Close the connection on a request its SASL state does not allow (the SASL modules
    refine what their own keys may do)."""
    if api_key not in _SASL_APIS[sasl.state]:
        what = "re-authentication" if sasl.reauthenticating else "SASL authentication"
        raise CloseConnection(f"api key {api_key} during {what}")
