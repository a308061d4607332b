"""Client quotas: byte rates and request time per user and client id, as Kafka keeps them.

How this works
--------------
A quota entity names a user, a client id, or both; either part may be the default
(``<default>`` in Kafka's tools, a null name on the wire). Its values are
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second) and
``request_percentage`` (handler time, 100 = one thread's whole time). An entity may instead
name an IP address alone (or the default IP), with ``connection_creation_rate``: new
connections per second from that address (KIP-612), measured the same way (one connection
costs 1); a connection over it is closed at once, before anything is read from it. An entity
is (user, client id, ip), the parts not named None. They are set with
AlterClientQuotas and kept as a shared document (``documents.py``: the data directory, or
ZooKeeper in a cluster). ``replace`` takes the whole set.

Which quota applies to a client is found as Kafka finds it, separately for each kind, the first
entity that has a value for it in this order:

  1. user + client id    2. user + default client id    3. user
  4. default user + client id    5. default user + default client id    6. default user
  7. client id    8. default client id

The usage is counted per entity that matched, with the default parts taken as the client's own
name: a quota on user ``alice`` is shared by all her clients, a default user quota holds every
user separately.

Measuring. Kafka keeps a sampled rate (``quota.window.num`` samples of
``quota.window.size.seconds``, the window at least all samples but one long) and, when a
request takes it over the quota, throttles for (rate - quota) / quota x window, which is the
time until the rate is back at the quota; it reads one request of a connection at a time, so
one throttle follows each request over the quota. Headrace reads ahead (pipelining): several
requests may be read before a throttle begins and a long throttle lets every sample expire,
after which a sampled rate would forgive the burst. So each entity keeps instead the moment
its usage so far is paid for at the quota rate (``paid_until``, one float): a use of ``v``
moves it to ``max(paid_until, now - allowance) + v / quota``, and the throttle time is how
far that lies ahead of now. The allowance, (``quota.window.num`` - 1) x
``quota.window.size.seconds``, is Kafka's minimum window: a client quiet for that long may
send that much at once, and a single burst is throttled exactly as Kafka throttles it, while
over time the rate is the quota however the requests were read. The broker puts the throttle
time in the response's ``throttle_time_ms`` and neither reads the connection nor handles its
queued requests for that long (``Session.throttle``, ``Connection.mute``).

Bounds: at most ``client.quota.max.entities`` quota entities are stored (AlterClientQuotas
beyond it is refused) and as many entities' usage tracked (the oldest one goes first; it
starts again from nothing if its client comes back). With no quota set, a request costs one
attribute check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .session import Session

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
CONNECTION_RATE = "connection_creation_rate"
# a throttle time is bounded only by this (it may cover several requests read ahead)
MAX_THROTTLE_MS = 3_600_000
# the keys AlterClientQuotas accepts for user and client-id entities
KEYS = (PRODUCE, FETCH, REQUEST, "controller_mutation_rate")


class _Default:
    """The default part of an entity (``<default>``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()
Part = str | _Default | None  # a name, the default, or not part of the entity (None)
Entity = tuple[Part, Part, Part]  # (user, client id, ip)


def resolve(entries: dict, user: str, client_id: str, key: str):
    """(quota, the entity usage is counted for) for a client, or None (see the module
    docstring for the order)."""
    for u, c in (
        (user, client_id),
        (user, DEFAULT),
        (user, None),
        (DEFAULT, client_id),
        (DEFAULT, DEFAULT),
        (DEFAULT, None),
        (None, client_id),
        (None, DEFAULT),
    ):
        values = entries.get((u, c, None))
        if values is not None and key in values:
            counted = (user if u is not None else None, client_id if c is not None else None)
            return values[key], counted
    return None


class ClientQuotas:
    """The quotas and the usage measured against them (see the module docstring)."""

    def __init__(self, config) -> None:
        self.samples = int(config["quota.window.num"])
        self.window_s = int(config["quota.window.size.seconds"])
        self.max_entities = int(config["client.quota.max.entities"])
        self.allowance_s = (self.samples - 1) * self.window_s
        self.entries: dict[Entity, dict[str, float]] = {}
        self.active: frozenset[str] = frozenset()  # the kinds some entity has a value for
        self._paid: dict[tuple, float] = {}  # entity -> when its usage is paid for

    def replace(self, entries: dict[Entity, dict[str, float]]) -> None:
        self.entries = {k: dict(v) for k, v in entries.items() if v}
        self.active = frozenset(key for values in self.entries.values() for key in values)
        self._paid = {}

    def tracked(self) -> int:
        return len(self._paid)

    def throttle_ms(
        self, session: Session, client_id: str | None, key: str, value: float, now: float
    ) -> int:
        """Count ``value`` (bytes, or request time in percent-seconds) against the client's
        quota of kind ``key``; the throttle time in ms it has earned (0: within its quota)."""
        return self._use(session, client_id, key, value, now, refund=False)[0]

    def connection_refused(self, host: str, now: float) -> str | None:
        """Count a new connection from ``host`` against its ``connection_creation_rate``;
        why it is refused, or None."""
        if CONNECTION_RATE not in self.active:
            return None
        for ip in (host, DEFAULT):
            values = self.entries.get((None, None, ip))
            if values is not None and CONNECTION_RATE in values:
                break
        else:
            return None
        quota, paid = values[CONNECTION_RATE], self._paid
        entity = (CONNECTION_RATE, host)
        paid_until = paid.get(entity)
        if paid_until is None:
            if len(paid) >= self.max_entities > 0:
                del paid[next(iter(paid))]
            paid_until = now - self.allowance_s
        before = max(paid_until, now - self.allowance_s)
        if before > now:  # the connections before this one are not paid for yet
            return f"connection_creation_rate ({quota:g}/s) reached for {host}"
        paid[entity] = before + 1 / quota
        return None

    def fetch_throttle_ms(
        self, session: Session, client_id: str | None, value: float, now: float
    ) -> tuple[int, bool]:
        """A fetch response of ``value`` bytes against ``consumer_byte_rate``: (throttle time
        in ms, whether the records go out). As in Kafka, a fetch over the quota is answered
        without records and its bytes are not counted, so the client fetches them again once
        its throttle has passed; except a response larger on its own than the allowance
        (quota x (``quota.window.num`` - 1) windows), which would never fit: it goes out
        whole with its throttle time."""
        return self._use(session, client_id, FETCH, value, now, refund=True)

    def _use(
        self,
        session: Session,
        client_id: str | None,
        key: str,
        value: float,
        now: float,
        refund: bool,
    ) -> tuple[int, bool]:
        found = resolve(self.entries, session.user, client_id or "", key)
        if found is None:
            return 0, True
        quota, counted = found
        if quota <= 0:
            return 0, True
        paid = self._paid
        entity = (key, *counted)
        paid_until = paid.get(entity)
        if paid_until is None:
            if len(paid) >= self.max_entities > 0:
                del paid[next(iter(paid))]  # the oldest entity tracked
            paid_until = now - self.allowance_s  # a new client has its allowance
        before = max(paid_until, now - self.allowance_s)
        after = before + value / quota
        ms = min(int((after - now) * 1000), MAX_THROTTLE_MS) if after > now else 0
        if ms and refund and value / quota <= self.allowance_s:
            paid[entity] = before  # not counted: nothing is sent
            return ms, False
        paid[entity] = after
        return ms, True


# the stored document ---------------------------------------------------------------------


def _part(entity: dict, kind: str) -> Part:
    if kind not in entity:
        return None
    return DEFAULT if entity[kind] is None else str(entity[kind])


def from_document(value) -> dict[Entity, dict[str, float]]:
    if not value:
        return {}
    return {
        (_part(e["entity"], USER), _part(e["entity"], CLIENT_ID), _part(e["entity"], IP)): {
            str(k): float(v) for k, v in e["values"].items()
        }
        for e in value["entries"]
    }


def to_document(entries: dict[Entity, dict[str, float]]) -> dict:
    out = []
    for (u, c, ip), values in entries.items():
        entity: dict[str, str | None] = {}
        for kind, part in ((USER, u), (CLIENT_ID, c), (IP, ip)):
            if part is not None:
                entity[kind] = None if part is DEFAULT else str(part)
        out.append({"entity": entity, "values": values})
    return {"version": 1, "entries": out}
