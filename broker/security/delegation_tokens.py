"""Delegation tokens (KIP-48): short-lived credentials a SASL-authenticated user makes for a
process that should not hold the user's password (``kafka-delegation-tokens``).

How this works
--------------
A token has an id (a random UUID), an owner (the user it authenticates as), the requester
who made it, renewers, and three times: issued, expiry (moved by renewals) and the maximum
(``delegation.token.max.lifetime.ms`` after issue, or less if asked). Its HMAC is
HMAC-SHA512 of the id under ``delegation.token.secret.key``; it is never stored: every broker
of a cluster computes it from the same secret, and without a secret tokens are off
(DELEGATION_TOKEN_AUTH_DISABLED). A client authenticates with a token through SCRAM (either
mechanism) with the token id as the user name, the HMAC in base64 as the password and the
``tokenauth=true`` extension (sasl.py); it is then its owner, marked token-authenticated,
and may not make, renew, expire or describe tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),
as in Kafka. Token APIs are refused the same way on listeners without SASL.

The tokens are one document (cluster/documents.py) named ``delegation_tokens``, ``{id:
[owner, requester, [renewers], issued, max, expiry]}``, so every broker knows every token; at
most ``delegation.token.max.count`` are kept. The changes are pure functions of the document
(``created``, ``renewed``, ``expired``, ``without_expired``), run by the document's
compare-and-set; the controller drops expired tokens every
``delegation.token.expiry.check.interval.ms``, and an expired token authenticates no one even
before that.
"""

from __future__ import annotations

import base64
import hashlib
import hmac as hmac_module
import uuid
from dataclasses import dataclass
from typing import Any

from headrace.protocol import ErrorCode

ITERATIONS = 4096  # SCRAM iterations of a token's credentials (Kafka's minimum)


@dataclass(frozen=True, slots=True)
class Token:
    token_id: str
    owner: str  # "User:alice"
    requester: str
    renewers: tuple[str, ...]
    issued_ms: int
    max_ms: int
    expiry_ms: int

    def may_renew(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now: int) -> bool:
        return self.expiry_ms < now or self.max_ms < now

    def row(self) -> list:
        return [
            self.owner,
            self.requester,
            list(self.renewers),
            self.issued_ms,
            self.max_ms,
            self.expiry_ms,
        ]


class TokenError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(ErrorCode(code).name)
        self.code = code


class DelegationTokens:
    """The tokens as this broker last applied them, and the changes to them."""

    def __init__(self, config) -> None:
        secret = str(config["delegation.token.secret.key"] or "")
        self.secret = secret.encode() if secret else None
        self.max_lifetime_ms = int(config["delegation.token.max.lifetime.ms"])
        self.renew_ms = int(config["delegation.token.expiry.time.ms"])
        self.check_interval_ms = int(config["delegation.token.expiry.check.interval.ms"])
        self.max_count = int(config["delegation.token.max.count"])
        self.tokens: dict[str, Token] = {}
        # SCRAM keys of a token, by (token id, mechanism), derived at its first login and
        # kept: a derivation is ITERATIONS rounds of PBKDF2 (about 2 ms of the event loop,
        # measured) and a client-first message naming a token id is enough to ask for one,
        # so they are not derived again at every attempt. An entry goes with its token
        # (``replace``): at most two per token known, so delegation.token.max.count bounds it.
        self._keys: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = {}

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def hmac(self, token_id: str) -> bytes:
        assert self.secret is not None
        return hmac_module.new(self.secret, token_id.encode(), hashlib.sha512).digest()

    def replace(self, document: Any) -> None:
        """Apply a stored document (None: no tokens)."""
        self.tokens = {tid: _token(tid, row) for tid, row in (document or {}).items()}
        self._keys = {k: keys for k, keys in self._keys.items() if k[0] in self.tokens}

    # changes: document -> document (TokenError: refused, nothing changes) ----------------

    def created(
        self,
        document: Any,
        owner: str,
        requester: str,
        renewers: list[str],
        max_lifetime_ms: int,
        now: int,
    ) -> tuple[dict, Token]:
        out = dict(document or {})
        if len(out) >= self.max_count:
            raise TokenError(ErrorCode.INVALID_REQUEST)  # delegation.token.max.count
        lifetime = self.max_lifetime_ms
        if max_lifetime_ms > 0:
            lifetime = min(lifetime, max_lifetime_ms)
        max_ms = now + lifetime
        token = Token(
            str(uuid.uuid4()),
            owner,
            requester,
            tuple(renewers),
            now,
            max_ms,
            min(max_ms, now + self.renew_ms),
        )
        out[token.token_id] = token.row()
        return out, token

    def renewed(
        self, document: Any, hmac: bytes, principal: str, period_ms: int, now: int
    ) -> tuple[dict, int]:
        token = self._current(document, hmac)
        if token.expired(now):
            raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        if not token.may_renew(principal):
            raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        period = min(self.renew_ms, period_ms) if period_ms > 0 else self.renew_ms
        expiry = min(token.max_ms, now + period)
        return _with(document, token, expiry), expiry

    def expired(
        self, document: Any, hmac: bytes, principal: str, period_ms: int, now: int
    ) -> tuple[dict, int]:
        token = self._current(document, hmac)
        if not token.may_renew(principal):
            raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        if period_ms < 0:  # expire now: the token goes
            out = dict(document)
            del out[token.token_id]
            return out, now
        if token.expired(now):
            raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        expiry = min(token.max_ms, now + period_ms)
        return _with(document, token, expiry), expiry

    def without_expired(self, document: Any, now: int) -> dict:
        live = (_token(tid, row) for tid, row in (document or {}).items())
        return {t.token_id: t.row() for t in live if not t.expired(now)}

    def _current(self, document: Any, hmac: bytes) -> Token:
        if not self.enabled:
            raise TokenError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        for tid, row in (document or {}).items():
            if hmac_module.compare_digest(self.hmac(tid), bytes(hmac)):
                return _token(tid, row)
        raise TokenError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)

    # authentication -----------------------------------------------------------------------

    def credential(
        self, token_id: str, mechanism: str, now: int
    ) -> tuple[str, bytes, bytes, bytes, int] | None:
        """(owner, salt, stored key, server key, iterations) to check a SCRAM client that
        authenticates with token ``token_id``; None for an unknown or expired token."""
        token = self.tokens.get(token_id)
        if not self.enabled or token is None or token.expired(now):
            return None
        keys = self._keys.get((token_id, mechanism))
        if keys is None:
            keys = self._keys[(token_id, mechanism)] = self._derive(token_id, mechanism)
        return (token.owner, *keys)

    def _derive(self, token_id: str, mechanism: str) -> tuple[bytes, bytes, bytes, int]:
        """(salt, stored key, server key, iterations) of the token's SCRAM credential: the
        password is the HMAC in base64, the salt made from the secret (the same on every
        broker)."""
        from scramp import ScramMechanism

        password = base64.b64encode(self.hmac(token_id)).decode()
        salt = hmac_module.new(
            self.secret or b"", f"salt:{mechanism}:{token_id}".encode(), hashlib.sha256
        ).digest()[:16]
        _, stored, server, _ = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=ITERATIONS, salt=salt
        )
        return salt, stored, server, ITERATIONS


def _token(token_id: str, row: list) -> Token:
    owner, requester, renewers, issued, max_ms, expiry = row
    return Token(token_id, owner, requester, tuple(renewers), issued, max_ms, expiry)


def _with(document: Any, token: Token, expiry_ms: int) -> dict:
    out = dict(document)
    out[token.token_id] = [*token.row()[:5], expiry_ms]
    return out
