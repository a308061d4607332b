"""CreateDelegationToken (key 38), versions 1-3: a delegation token for the requester, or (v3)
for another user when the requester may CREATE_TOKENS on that user
(``kafka-delegation-tokens --create``; security/delegation_tokens.py).

Refused on a listener without SASL or to a session authenticated with a token
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), without a secret key (DELEGATION_TOKEN_AUTH_DISABLED),
for a renewer or owner that is not a ``User`` (INVALID_PRINCIPAL_TYPE), for another owner
without the right (DELEGATION_TOKEN_AUTHORIZATION_FAILED), and beyond
``delegation.token.max.count`` (INVALID_REQUEST). The token is stored in the cluster's
``delegation_tokens`` document before the answer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import KazooException

from headrace.broker.security.authorizer import Operation, ResourceType
from headrace.broker.security.delegation_tokens import Token, TokenError
from headrace.protocol import ErrorCode, messages

from .refusals import token_refusal

R = messages.CreateDelegationTokenResponse


async def handle(broker: Broker, header, request: messages.CreateDelegationTokenRequest):
    session = header.session
    requester = session.principal
    owner = requester
    if header.api_version >= 3 and request.owner_principal_name:
        owner = f"{request.owner_principal_type}:{request.owner_principal_name}"
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in request.renewers]

    def answer(code: int, token=None):
        owner_type, _, owner_name = owner.partition(":")
        requester_type, _, requester_name = requester.partition(":")
        return R(
            error_code=code,
            principal_type=owner_type,
            principal_name=owner_name,
            token_requester_principal_type=requester_type,
            token_requester_principal_name=requester_name,
            issue_timestamp_ms=token.issued_ms if token else -1,
            expiry_timestamp_ms=token.expiry_ms if token else -1,
            max_timestamp_ms=token.max_ms if token else -1,
            token_id=token.token_id if token else "",
            hmac=broker.delegation_tokens.hmac(token.token_id) if token else b"",
            throttle_time_ms=0,
        )

    refused = token_refusal(broker, session)
    if refused:
        return answer(refused)
    if owner != requester and not broker.authorizer.allows(
        session, Operation.CREATE_TOKENS, ResourceType.USER, owner
    ):
        return answer(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    if any(not p.startswith("User:") for p in (owner, *renewers)):
        return answer(ErrorCode.INVALID_PRINCIPAL_TYPE)
    tokens = broker.delegation_tokens
    made: list[Token] = []

    def create(value):
        value, token = tokens.created(
            value, owner, requester, renewers, request.max_lifetime_ms, int(time.time() * 1000)
        )
        made[:] = [token]
        return value

    try:
        await broker.delegation_token_document.change(create)
    except TokenError as e:
        return answer(e.code)
    except (OSError, KazooException, ValueError):
        return answer(ErrorCode.UNKNOWN_SERVER_ERROR)
    return answer(ErrorCode.NONE, made[0])
