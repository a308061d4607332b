"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: Kafka's state machine and the mechanisms.

How this works
--------------
A connection of a SASL listener gets a ``SaslSession`` (``Session.sasl``) at its first
request, and the pipeline keeps it at the first-request limits (512 KiB frames, one request
at a time) until it has authenticated. The states, as Kafka's ``SaslServerAuthenticator``:

    HANDSHAKE     ApiVersions (answered) or SaslHandshake; anything else closes the connection
      | SaslHandshake naming an enabled mechanism
    AUTHENTICATE  SaslAuthenticate only, as many as the mechanism needs; anything else closes
      | the mechanism accepts the credentials
    COMPLETE      every API; a SaslHandshake starts a re-authentication (KIP-368): the same
                  mechanism, the same principal, else it fails and the connection closes

A SaslHandshake naming a mechanism that is not enabled is answered UNSUPPORTED_SASL_MECHANISM
with the enabled ones, and a SaslAuthenticate that fails is answered SASL_AUTHENTICATION_FAILED;
both after ``connection.failed.authentication.delay.ms``, and the connection closes once the
answer has left. The message is the same whether the user exists or not: an unknown SCRAM
user is led through the exchange with a made-up salt (the same one each time) and fails at
the proof, as a wrong password does.

``connections.max.reauth.ms`` (when not 0) is the session lifetime SaslAuthenticate v1+
announces; a request other than SaslHandshake/SaslAuthenticate after it has passed closes the
connection, as Kafka does.

Mechanisms: PLAIN (users from a JAAS entry, ``user_<name>="<password>"``, compared in constant
time) and SCRAM-SHA-256/512 (through ``scramp``, credentials from ``ScramCredentials``, or,
with Kafka's ``tokenauth=true`` extension, a delegation token's: the session is then the
token's owner, marked ``token``; delegation_tokens.py).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.settings import SASL_MECHANISMS, ConfigError

if TYPE_CHECKING:
    from headrace.broker.config.listeners import Listener

    from .delegation_tokens import DelegationTokens
    from .scram_credentials import ScramCredentials

HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class AuthenticationFailed(Exception):
    """The credentials were not accepted (the message is the one the client gets)."""


@dataclass(frozen=True)
class SaslConfig:
    """A SASL listener's settings: its mechanisms, PLAIN users, the session lifetime."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    reauth_ms: int
    failure_delay_ms: int


def listener_config(config: BrokerConfig, listener: Listener) -> SaslConfig:
    """The SASL settings of ``listener``; a ``ConfigError`` naming the setting when they do not
    hold together."""

    def named(name: str) -> str:
        prefixed = f"listener.name.{listener.name.lower()}.{name}"
        return prefixed if prefixed in config.explicit else name

    setting = named("sasl.enabled.mechanisms")
    mechanisms = tuple(
        m.strip().upper()
        for m in str(config.for_listener(listener.name, "sasl.enabled.mechanisms")).split(",")
        if m.strip()
    )
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown or not mechanisms:
        raise ConfigError(
            f"{setting}: {', '.join(unknown) or 'none given'} for listener {listener.name}"
            f" ({listener.protocol}); supported: {', '.join(SASL_MECHANISMS)}"
        )
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        jaas_setting = named("plain.sasl.jaas.config")
        jaas = str(config.for_listener(listener.name, "plain.sasl.jaas.config"))
        if not jaas:
            jaas_setting, jaas = "sasl.jaas.config", str(config["sasl.jaas.config"])
        if not jaas:
            raise ConfigError(
                f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config: PLAIN on listener"
                f" {listener.name} needs its users, e.g. {PLAIN_MODULE} required"
                ' user_alice="alice-secret"; (or sasl.jaas.config)'
            )
        users = plain_users(jaas_setting, jaas)
    return SaslConfig(
        mechanisms,
        users,
        int(config.for_listener(listener.name, "connections.max.reauth.ms")),
        int(config["connection.failed.authentication.delay.ms"]),
    )


_JAAS = re.compile(
    r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s+(.*?)\s*;\s*$", re.S
)
_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')


def jaas_options(setting: str, text: str, mechanism: str) -> dict[str, str]:
    """The ``key="value"`` options of a JAAS entry for ``mechanism``'s login module."""
    module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
    m = _JAAS.match(text)
    if m is None:
        raise ConfigError(f'{setting}: not a JAAS entry (<LoginModule> required key="value" ...;)')
    found, _, options = m.groups()
    if found != module:
        raise ConfigError(f"{setting}: {mechanism} needs {module}, not {found}")
    out, position = {}, 0
    while position < len(options):
        option = _OPTION.match(options, position)
        if option is None:
            raise ConfigError(
                f"{setting}: cannot read the options from {options[position:]!r}"
                ' (key="value" pairs)'
            )
        out[option.group(1)] = re.sub(r"\\(.)", r"\1", option.group(2))
        position = option.end()
    return out


def plain_users(setting: str, text: str) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of a JAAS entry for Kafka's
    ``PlainLoginModule``, as {name: password}."""
    options = jaas_options(setting, text, "PLAIN")
    users = {
        key[len("user_") :]: value
        for key, value in options.items()
        if key.startswith("user_") and len(key) > len("user_")
    }
    if not users:
        raise ConfigError(f'{setting}: no user_<name>="<password>" option, so no PLAIN users')
    return users


class SaslSession:
    """One connection's SASL state (see the module docstring)."""

    __slots__ = (
        "config",
        "state",
        "mechanism",
        "exchange",
        "principal",
        "expires_at",
        "reauthenticating",
        "bare_tokens",
        "token",
    )

    def __init__(self, config: SaslConfig) -> None:
        self.config = config
        self.state = HANDSHAKE
        self.mechanism = ""
        self.exchange: Any = None  # the mechanism's server side while AUTHENTICATE
        self.principal = ""  # once authenticated: "User:<name>"
        self.expires_at: float | None = None  # time.monotonic() when the session ends
        self.reauthenticating = False
        self.bare_tokens = False  # after SaslHandshake v0: tokens come as bare frames
        self.token = False  # authenticated with a delegation token (delegation_tokens.py)

    @property
    def authenticated(self) -> bool:
        return bool(self.principal)

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def start(
        self, mechanism: str, credentials: ScramCredentials, tokens: DelegationTokens
    ) -> None:
        """SaslHandshake accepted ``mechanism``: its exchange begins."""
        self.mechanism = mechanism
        self.state = AUTHENTICATE
        if mechanism == "PLAIN":
            self.exchange = PlainExchange(self.config.plain_users)
        else:
            self.exchange = ScramExchange(mechanism, credentials, tokens)

    def step(self, token: bytes) -> tuple[bytes, bool]:
        """Feed one SaslAuthenticate token; returns (answer, finished). Raises
        ``AuthenticationFailed``. When finished the session is COMPLETE (its lifetime set)."""
        answer, user = self.exchange.step(token)
        if user is None:
            return answer, False
        principal = f"User:{user}"
        by_token = getattr(self.exchange, "token_owner", None)
        if by_token is not None:  # a delegation token: its owner
            principal = by_token
        if self.reauthenticating and principal != self.principal:
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from {self.principal}"
                f" to {principal}"
            )
        self.token = by_token is not None
        self.principal, self.state, self.exchange = principal, COMPLETE, None
        self.reauthenticating = False
        reauth = self.config.reauth_ms
        self.expires_at = time.monotonic() + reauth / 1000 if reauth > 0 else None
        return answer, True


def failure_message(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL"
        f" mechanism {mechanism}"
    )


class PlainExchange:
    """PLAIN (RFC 4616): one message, ``authzid NUL authcid NUL password``."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(failure_message("PLAIN")) from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different"
                " from username"
            )
        expected = self.users.get(user)
        # the same work whether the user exists or not
        ok = hmac.compare_digest(
            (expected if expected is not None else password + "\0").encode(), password.encode()
        )
        if expected is None or not ok:
            raise AuthenticationFailed(failure_message("PLAIN"))
        return b"", user


_SECRET = os.urandom(32)  # made-up salts for unknown SCRAM users come from it


class ScramExchange:
    """SCRAM (RFC 5802, RFC 7677) through ``scramp``: client-first -> server-first,
    client-final -> server-final."""

    def __init__(
        self, mechanism: str, credentials: ScramCredentials, tokens: DelegationTokens
    ) -> None:
        from scramp import ScramMechanism  # (only SCRAM listeners load it: a faster start)

        self.mechanism = mechanism
        self.credentials = credentials
        self.tokens = tokens
        self.server = ScramMechanism(mechanism).make_server(self._lookup)
        self.first = True
        self.by_token = False  # the client-first message asked for token authentication
        self.token_owner: str | None = None  # set once a token's credentials are used

    def _lookup(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = user
        if self.by_token:
            by_token = self.tokens.credential(user, self.mechanism, int(time.time() * 1000))
            if by_token is not None:
                self.token_owner, salt, stored_key, server_key, iterations = by_token
                return salt, stored_key, server_key, iterations
        else:
            found = self.credentials.get(user, self.mechanism)
            if found is not None:
                return found.salt, found.stored_key, found.server_key, found.iterations
        # an unknown user: a salt that is the same at every attempt, keys nobody can match
        salt = hmac.new(_SECRET, f"{self.mechanism}:{user}".encode(), hashlib.sha256).digest()
        size = hashlib.new(self.mechanism[len("SCRAM-") :].replace("-", "").lower()).digest_size
        return salt[:16], os.urandom(size), os.urandom(size), 4096

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        from scramp import ScramException

        try:
            message = token.decode()
            if self.first:
                self.first = False
                parsed = _without_token_extension(message)
                self.by_token = parsed != message
                self.server.set_client_first(parsed)
                if self.by_token:  # the proof covers the message as the client sent it
                    self.server.client_first_bare = message.split(",", 2)[2]
                return self.server.get_server_first().encode(), None
            self.server.set_client_final(message)
            final = self.server.get_server_final().encode()
        except (ScramException, UnicodeDecodeError):
            raise AuthenticationFailed(failure_message(self.mechanism)) from None
        return final, self.user


def _without_token_extension(message: str) -> str:
    """A SCRAM client-first message without Kafka's ``tokenauth=true`` extension (delegation
    tokens; scramp knows no extensions): the same message when it has none."""
    head, sep, rest = message.partition(",tokenauth=true")
    if not sep or (rest and not rest.startswith(",")):
        return message
    return head + rest
