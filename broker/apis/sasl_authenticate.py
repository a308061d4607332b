"""SaslAuthenticate (key 36), versions 0-2: one step of the SASL exchange.

The token goes to the mechanism chosen by SaslHandshake (``sasl.py``); its answer comes back
in ``auth_bytes``. When the exchange completes, the connection is authenticated as
``User:<name>`` (kept on the session for the authorizer) and the pipeline lifts the
first-request limits; from version 1 the answer carries the session lifetime
(``connections.max.reauth.ms``, 0 when sessions do not expire). A failure is answered
SASL_AUTHENTICATION_FAILED after ``connection.failed.authentication.delay.ms``, with the same
message whether the user exists or not, and the connection closes once the answer has left.
Outside an exchange: before authentication the connection closes; after it (or on a listener
without SASL) the answer is ILLEGAL_SASL_STATE, as Kafka's.

After a SaslHandshake v0 the tokens come as bare frames (``bare_token``): each is answered
with a bare frame, and a failure closes the connection after the same delay, with no answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.security.sasl import AUTHENTICATE, AuthenticationFailed
from headrace.pipeline import CloseConnection
from headrace.protocol import ErrorCode, messages

from .sasl_handshake import sasl_delay

R = messages.SaslAuthenticateResponse


def handle(broker: Broker, header, request: messages.SaslAuthenticateRequest):
    session = header.session
    sasl = session.sasl
    if sasl is None or sasl.state != AUTHENTICATE:
        if sasl is not None and not sasl.authenticated:
            raise CloseConnection("SaslAuthenticate before SaslHandshake")
        return R(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication"
            if sasl is not None
            else "SaslAuthenticate request on a listener without SASL",
            auth_bytes=b"",
        )
    try:
        answer, finished = sasl.step(bytes(request.auth_bytes))
    except AuthenticationFailed as e:
        return _fail(broker, session, str(e))
    lifetime = 0
    if finished:
        session.principal = sasl.principal
        session.authenticated()
        lifetime = max(sasl.config.reauth_ms, 0)
    return R(
        error_code=ErrorCode.NONE,
        error_message=None,
        auth_bytes=answer,
        session_lifetime_ms=lifetime,
    )


async def _fail(broker: Broker, session, message):
    await asyncio.sleep(sasl_delay(broker))
    response = R(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b""
    )
    return response, session.close


def bare_token(broker: Broker, session, token: bytes):
    """A token of an exchange begun by SaslHandshake v0: the answer as a bare frame."""
    sasl = session.sasl
    try:
        answer, finished = sasl.step(token)
    except AuthenticationFailed:
        return _close_later(broker, session)
    if finished:
        sasl.bare_tokens = False
        session.principal = sasl.principal
        session.authenticated()
    return [answer]


async def _close_later(broker: Broker, session):
    await asyncio.sleep(sasl_delay(broker))
    session.close()
