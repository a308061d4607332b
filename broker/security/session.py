"""Who is asking: the state the broker keeps per client connection, and a request's context.

``Session`` is made at a connection's first request (``Connection.session``): the listener the
client came through, its principal (``User:ANONYMOUS``, the TLS client certificate's subject,
or the SASL user), its address and, on a SASL listener, its authentication state. The
authorizer (``authorizer.py``) decides by principal and address.
``RequestContext`` is what every API module gets as ``header``: the request header's fields
and the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from headrace.broker.config.listeners import Listener
    from headrace.pipeline import Connection

    from .sasl import SaslSession

ANONYMOUS = "User:ANONYMOUS"


class Session:
    """One client connection as the broker sees it."""

    __slots__ = ("listener", "principal", "host", "sasl", "_connection", "_on_close")

    def __init__(self, listener: Listener, connection: Connection) -> None:
        self.listener = listener
        self.principal = ANONYMOUS  # Kafka's principal: "User:<name>"
        self.host = connection.host or ""  # the client's address, as ACLs name hosts
        self.sasl: SaslSession | None = None  # on a SASL listener: its state (sasl.py)
        self._connection: Connection | None = connection  # dropped when it closes
        self._on_close: list = []  # called with this session when the connection closes

    def close(self) -> None:
        """Close the connection (once what was written before has been sent)."""
        if self._connection is not None:
            self._connection.close()

    def authenticated(self) -> None:
        """The client has authenticated: the connection gets its full limits."""
        if self._connection is not None:
            self._connection.authenticated()

    def throttle(self, ms: int) -> None:
        """Neither read nor handle this client's requests for ``ms`` milliseconds (a quota's
        throttle)."""
        if self._connection is not None and ms > 0:
            self._connection.mute(ms / 1000)

    def hold(self, until) -> None:
        """Handle none of this client's later requests until the future ``until`` is done."""
        if self._connection is not None:
            self._connection.hold(until)

    @property
    def user(self) -> str:
        """The principal's name, as quotas name users (``User:alice`` -> ``alice``)."""
        return self.principal.partition(":")[2]

    def when_closed(self, callback) -> None:
        """Call ``callback(session)`` when the connection closes (once per callback)."""
        if callback not in self._on_close:
            self._on_close.append(callback)

    def closed(self) -> None:
        self._connection = None
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback(self)


class RequestContext(NamedTuple):
    """A request's header fields, and the session of its connection."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    session: Session
