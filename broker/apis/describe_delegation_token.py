"""DescribeDelegationToken (key 41), versions 1-3: the tokens of the owners named (all when
null, none when empty) that the requester may see: its own, those it requested or may
renew, and those it may DESCRIBE as DELEGATION_TOKEN resources (``kafka-delegation-tokens
--describe``). Refused as the other token APIs are (refusals.token_refusal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation, ResourceType
from headrace.protocol import messages

from .refusals import token_refusal

R = messages.DescribeDelegationTokenResponse


def handle(broker: Broker, header, request: messages.DescribeDelegationTokenRequest):
    session = header.session
    refused = token_refusal(broker, session)
    if refused:
        return R(error_code=refused, tokens=[], throttle_time_ms=0)
    owners = (
        None
        if request.owners is None
        else {f"{o.principal_type}:{o.principal_name}" for o in request.owners}
    )
    tokens = broker.delegation_tokens
    me = session.principal
    out = []
    for token in sorted(tokens.tokens.values(), key=lambda t: t.issued_ms):
        if owners is not None and token.owner not in owners:
            continue
        if not (
            token.may_renew(me)
            or token.requester == me
            or broker.authorizer.allows(
                session, Operation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id
            )
        ):
            continue
        owner_type, _, owner_name = token.owner.partition(":")
        requester_type, _, requester_name = token.requester.partition(":")
        out.append(
            R.DescribedDelegationToken(
                principal_type=owner_type,
                principal_name=owner_name,
                token_requester_principal_type=requester_type,
                token_requester_principal_name=requester_name,
                issue_timestamp=token.issued_ms,
                expiry_timestamp=token.expiry_ms,
                max_timestamp=token.max_ms,
                token_id=token.token_id,
                hmac=tokens.hmac(token.token_id),
                renewers=[
                    R.DescribedDelegationTokenRenewer(
                        principal_type=r.partition(":")[0], principal_name=r.partition(":")[2]
                    )
                    for r in token.renewers
                ],
            )
        )
    return R(error_code=0, tokens=out, throttle_time_ms=0)
