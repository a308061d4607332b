"""ExpireDelegationToken (key 40), versions 1-2: move a token's expiry earlier, or (a negative
period) remove it now; checked as a renewal is (renew_delegation_token.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.protocol import messages

from .renew_delegation_token import change

R = messages.ExpireDelegationTokenResponse


async def handle(broker: Broker, header, request: messages.ExpireDelegationTokenRequest):
    code, expiry = await change(
        broker, header.session, request.hmac, request.expiry_time_period_ms, renew=False
    )
    return R(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)
