"""The request path's caps, and the broker-wide counters they are checked against.

``Limits`` holds every bound of the request path (frame sizes, requests and their bytes in
flight per connection and for the broker, unsent response bytes per connection, connection
counts in total and per address, the idle timeout, each socket's send buffer) and the
counters shared by all connections: request bytes in flight (connections paused over the
cap are resumed when it falls back) and open connections per address (``admit``/``leave``).
``admission``, when set, is one more check of a new connection's address (the broker's
connection-rate quotas): it returns why the connection is refused, or None.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger(__name__)

_REJECT_LOG_S = 10.0  # log refused connections at most this often


class Limits:
    """The request path's caps (see the module docstring) and its broker-wide counters."""

    def __init__(
        self,
        *,
        max_frame: int,
        per_connection: int,
        per_broker: int,
        requests_per_connection: int,
        max_first_frame: int | None = None,
        response_bytes: int = 4 << 20,
        max_connections: int = 1 << 30,
        max_connections_per_ip: int = 1 << 30,
        per_ip_overrides: dict[str, int] | None = None,
        idle_ms: int | None = None,
        send_buffer: int = -1,
    ) -> None:
        self.max_frame = max_frame
        self.max_first_frame = max_frame if max_first_frame is None else max_first_frame
        self.per_connection = per_connection
        self.per_broker = per_broker
        self.requests_per_connection = requests_per_connection
        self.response_bytes = response_bytes
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.idle_ms = idle_ms
        self.send_buffer = send_buffer  # SO_SNDBUF of each connection; -1: the kernel's
        self.in_flight = 0
        self.connections = 0
        self._per_ip: dict[str, int] = {}
        self._paused: set[Connection] = set()
        self._refused = 0  # since the last log line about it
        self._refused_logged_at = 0.0
        self.admission: Callable[[str, float], str | None] | None = None

    def acquire(self, conn: Connection, size: int) -> None:
        self.in_flight += size
        if self.in_flight > self.per_broker:
            self._paused.add(conn)

    def release(self, size: int) -> None:
        self.in_flight -= size
        if self._paused and self.in_flight <= self.per_broker:
            paused, self._paused = self._paused, set()
            for conn in paused:
                conn._update_reading()

    def over(self, conn: Connection) -> bool:
        return conn in self._paused

    def forget(self, conn: Connection) -> None:
        self._paused.discard(conn)

    def admit(self, host: str) -> str | None:
        """Count a new connection from ``host``; the reason it is refused, or None."""
        count = self._per_ip.get(host, 0)
        if self.connections >= self.max_connections:
            return f"max.connections ({self.max_connections}) reached"
        cap = self.per_ip_overrides.get(host, self.max_connections_per_ip)
        if count >= cap:
            return f"max.connections.per.ip ({cap}) reached for {host}"
        if self.admission is not None:
            refused = self.admission(host, time.monotonic())
            if refused is not None:
                return refused
        self.connections += 1
        self._per_ip[host] = count + 1
        return None

    def leave(self, host: str) -> None:
        self.connections -= 1
        count = self._per_ip[host] - 1
        if count:
            self._per_ip[host] = count
        else:
            del self._per_ip[host]

    def refused(self, peer: str, reason: str) -> None:
        """Log refused connections, at most one line per ``_REJECT_LOG_S``."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged_at >= _REJECT_LOG_S:
            log.warning(
                "closed %d new connection(s) (the last from %s): %s", self._refused, peer, reason
            )
            self._refused, self._refused_logged_at = 0, now
