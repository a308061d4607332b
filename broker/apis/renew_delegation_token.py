"""RenewDelegationToken (key 39), versions 1-2 and ExpireDelegationToken (key 40), versions 1-2
share this module's ``change``: the token named by its HMAC gets a new expiry (at most its
maximum), by its owner or a renewer (else DELEGATION_TOKEN_OWNER_MISMATCH);
DELEGATION_TOKEN_NOT_FOUND for an unknown HMAC, DELEGATION_TOKEN_EXPIRED for an expired
token. A renewal lasts ``renew_period_ms`` (at most ``delegation.token.expiry.time.ms``); an
expiry with a negative period removes the token at once (``kafka-delegation-tokens
--renew / --expire``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import KazooException

from headrace.broker.security.delegation_tokens import TokenError
from headrace.protocol import ErrorCode, messages

from .refusals import token_refusal

R = messages.RenewDelegationTokenResponse


async def change(broker: Broker, session, hmac: bytes, period_ms: int, renew: bool):
    """(error code, expiry timestamp) of a renewal (``renew``) or an expiry."""
    refused = token_refusal(broker, session)
    if refused:
        return refused, -1
    tokens, expiry = broker.delegation_tokens, [-1]
    step = tokens.renewed if renew else tokens.expired

    def apply(value):
        value, expiry[0] = step(value, hmac, session.principal, period_ms, int(time.time() * 1000))
        return value

    try:
        await broker.delegation_token_document.change(apply)
    except TokenError as e:
        return e.code, -1
    except (OSError, KazooException, ValueError):
        return ErrorCode.UNKNOWN_SERVER_ERROR, -1
    return ErrorCode.NONE, expiry[0]


async def handle(broker: Broker, header, request: messages.RenewDelegationTokenRequest):
    code, expiry = await change(
        broker, header.session, request.hmac, request.renew_period_ms, renew=True
    )
    return R(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)
