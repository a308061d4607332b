"""SaslHandshake (key 17), versions 0-1: the client names its SASL mechanism.

After version 1 the tokens come in SaslAuthenticate requests; after version 0 (from before
SaslAuthenticate existed) they come as bare size-prefixed frames and are answered the same way
(``BrokerServer._sasl_token``), and a failure closes the connection, as Kafka does. Clients
that know SaslAuthenticate use version 1, but librdkafka looks for version 0 in ApiVersions to
decide that the broker speaks SASL at all. The state machine is in ``sasl.py``: on a
SASL listener before authentication, a handshake naming an enabled mechanism moves the
connection to AUTHENTICATE; one naming another mechanism is answered UNSUPPORTED_SASL_MECHANISM
(after the failure delay) and the connection closes; a second handshake before the first
exchange ended closes it. After authentication a handshake starts a re-authentication
(KIP-368) with the same mechanism. On a listener without SASL the answer is
ILLEGAL_SASL_STATE, as Kafka's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.security.sasl import AUTHENTICATE, COMPLETE
from headrace.pipeline import CloseConnection
from headrace.protocol import ErrorCode, messages

R = messages.SaslHandshakeResponse


def handle(broker: Broker, header, request: messages.SaslHandshakeRequest):
    sasl = header.session.sasl
    if sasl is None:
        return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = list(sasl.config.mechanisms)
    if sasl.state == AUTHENTICATE:
        raise CloseConnection("SaslHandshake during a SASL exchange")
    mechanism = request.mechanism
    reauth = sasl.state == COMPLETE
    if mechanism not in enabled or (reauth and mechanism != sasl.mechanism):
        return _refuse(broker, header, enabled)
    if reauth and header.api_version == 0:
        raise CloseConnection("re-authentication needs SaslHandshake v1 (KIP-368)")
    sasl.reauthenticating = reauth
    sasl.start(mechanism, broker.scram_credentials, broker.delegation_tokens)
    sasl.bare_tokens = header.api_version == 0
    return R(error_code=ErrorCode.NONE, mechanisms=enabled)


async def _refuse(broker: Broker, header, enabled):
    await asyncio.sleep(sasl_delay(broker))
    close = header.session.close
    return R(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled), close


def sasl_delay(broker: Broker) -> float:
    return int(broker.config["connection.failed.authentication.delay.ms"]) / 1000
