"""The authorizer: Kafka's ACLs, and the decision whether a principal may do an operation.

How this works
--------------
An ACL is seven values, as Kafka has them (``Acl``): resource type (topic, group, cluster,
transactional id...), resource name, pattern type (LITERAL: the name itself, or ``*`` for every
resource of the type; PREFIXED: every name that starts with it), principal (``User:alice``,
``User:*`` for everyone), host (a client's address, ``*`` for any), operation and permission
(ALLOW or DENY). ``Authorizer.replace`` takes the whole set (from the data directory, or in a
cluster from ZooKeeper, ``acl_store.py``) and indexes it by (resource type, name) for the
literal ones and by (resource type, prefix) for the prefixed ones, with the prefix lengths in
use per type, so that the ACLs of one resource are found with a few dictionary lookups.

``allows(session, operation, resource type, name)`` decides as Kafka's AclAuthorizer: a super
user (``super.users``) may do everything; a resource no ACL matches is allowed only when
``allow.everyone.if.no.acl.found``; otherwise a DENY that matches the principal (or
``User:*``), the host (or ``*``) and the operation (or ALL) refuses, else an ALLOW that
matches allows, where ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and ALLOW of
ALTER_CONFIGS allows DESCRIBE_CONFIGS. Nothing else is allowed. Without an authorizer
(``authorizer.class.name`` empty) everything is allowed.

Decisions are cached per (principal, host, operation, resource type, name): the produce and
fetch paths ask once per topic per request, and a hit is one dictionary lookup. The cache
holds at most ``authorizer.cache.max.entries`` decisions (the oldest go first) and is emptied
whenever the ACLs change.

Filters (DescribeAcls, DeleteAcls) are ``AclFilter``: ANY resource type, operation or
permission and a null name, principal or host match everything; pattern type ANY matches the
name exactly whatever the pattern type, MATCH matches every ACL that applies to the name
(literal equal, literal ``*``, prefixes of it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

from headrace.broker.config.config import BrokerConfig, super_users

if TYPE_CHECKING:
    from .session import Session


class Who(Protocol):
    """What a decision reads of the asker: a ``Session``, or the schema registry's HTTP
    principal."""

    @property
    def principal(self) -> str: ...

    @property
    def host(self) -> str: ...


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ALLOW, DENY = Permission.ALLOW, Permission.DENY

# the operations each resource type has (what authorized_operations fields may hold)
OPERATIONS = {
    TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE),
    CLUSTER: (
        Operation.CREATE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
    ),
    TRANSACTIONAL_ID: (Operation.WRITE, Operation.DESCRIBE),
}
OMITTED_OPERATIONS = -(1 << 31)  # an authorized_operations field that was not asked for

# an ALLOW of any of these operations allows the key operation too (ALL allows everything)
_ALLOWED_BY = {
    Operation.DESCRIBE: frozenset(
        (
            Operation.ALL,
            Operation.DESCRIBE,
            Operation.READ,
            Operation.WRITE,
            Operation.DELETE,
            Operation.ALTER,
        )
    ),
    Operation.DESCRIBE_CONFIGS: frozenset(
        (Operation.ALL, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)
    ),
}


@dataclass(frozen=True, slots=True)
class Acl:
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def encode(self) -> list:
        return [
            self.resource_type,
            self.name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        ]

    @classmethod
    def decode(cls, item: list) -> Acl:
        t, name, pattern, principal, host, op, permission = item
        return cls(
            int(t), str(name), int(pattern), str(principal), str(host), int(op), int(permission)
        )


def invalid(acl: Acl) -> str | None:
    """Why CreateAcls must refuse ``acl`` (Kafka's checks), or None."""
    if acl.resource_type not in ResourceType._value2member_map_ or acl.resource_type in (
        ResourceType.UNKNOWN,
        ResourceType.ANY,
    ):
        return f"Invalid resource type {acl.resource_type}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {acl.pattern_type}: ACLs are LITERAL or PREFIXED"
    if acl.operation not in Operation._value2member_map_ or acl.operation in (
        Operation.UNKNOWN,
        Operation.ANY,
    ):
        return f"Invalid operation {acl.operation}"
    if acl.permission not in (ALLOW, DENY):
        return f"Invalid permission type {acl.permission}"
    kind, _, name = acl.principal.partition(":")
    if not kind or not name:
        return f"Invalid principal {acl.principal!r}: it must be Type:name (User:alice)"
    if not acl.host:
        return "Invalid host: it must be an address or *"
    if not acl.name:
        return "Resource name must not be empty"
    if acl.resource_type == CLUSTER and acl.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def invalid(self) -> str | None:
        """Why a filter cannot be used (unknown codes), or None."""
        for value, kind in (
            (self.resource_type, ResourceType),
            (self.pattern_type, PatternType),
            (self.operation, Operation),
            (self.permission, Permission),
        ):
            if value not in kind._value2member_map_ or value == 0:
                return f"Invalid {kind.__name__} {value} in the filter"
        return None

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Operation.ANY and acl.operation != self.operation:
            return False
        if self.permission != Permission.ANY and acl.permission != self.permission:
            return False
        name, pattern = self.name, self.pattern_type
        if pattern == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.name in (name, WILDCARD)
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.name)
        if pattern != PatternType.ANY and acl.pattern_type != pattern:
            return False
        return name is None or acl.name == name


class Authorizer:
    """The ACLs and the decisions made from them (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        # (BrokerConfig has checked these settings: the name is one of AUTHORIZER_CLASSES)
        self.enabled = bool(str(config["authorizer.class.name"]).strip())
        self.super_users = super_users(str(config["super.users"]))
        self.allow_everyone = bool(config["allow.everyone.if.no.acl.found"])
        self.max_acls = int(config["authorizer.acls.max.count"])
        self.cache_max = int(config["authorizer.cache.max.entries"])
        self.acls: frozenset[Acl] = frozenset()
        self._literal: dict[tuple[int, str], list[Acl]] = {}
        self._prefixed: dict[tuple[int, str], list[Acl]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}
        self._by_type: dict[int, list[Acl]] = {}
        self._cache: dict[tuple, bool] = {}

    def replace(self, acls: Iterable[Acl]) -> None:
        """The ACLs are now ``acls``: index them, forget every cached decision."""
        acls = frozenset(acls)
        literal: dict[tuple[int, str], list[Acl]] = {}
        prefixed: dict[tuple[int, str], list[Acl]] = {}
        by_type: dict[int, list[Acl]] = {}
        for acl in acls:
            index = literal if acl.pattern_type == PatternType.LITERAL else prefixed
            index.setdefault((acl.resource_type, acl.name), []).append(acl)
            by_type.setdefault(acl.resource_type, []).append(acl)
        lengths: dict[int, set[int]] = {}
        for t, prefix in prefixed:
            lengths.setdefault(t, set()).add(len(prefix))
        self.acls = acls
        self._literal, self._prefixed, self._by_type = literal, prefixed, by_type
        self._prefix_lengths = {t: sorted(n) for t, n in lengths.items()}
        self._cache = {}

    def cached_decisions(self) -> int:
        return len(self._cache)

    # decisions --------------------------------------------------------------------------

    def allows(self, session: Who, operation: int, resource_type: int, name: str) -> bool:
        """Whether ``session``'s principal may do ``operation`` on the resource."""
        if not self.enabled:
            return True
        principal = session.principal
        if principal in self.super_users:
            return True
        key = (principal, session.host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, session.host, operation, resource_type, name)
            cache = self._cache
            if len(cache) >= self.cache_max:
                if self.cache_max <= 0:
                    return decision
                del cache[next(iter(cache))]  # the oldest decision
            cache[key] = decision
        return decision

    def allows_cluster(self, session: Session, operation: int) -> bool:
        return self.allows(session, operation, CLUSTER, CLUSTER_NAME)

    def operations(self, session: Session, resource_type: int, name: str) -> int:
        """The ``authorized_operations`` bit field of the resource for ``session``."""
        return sum(
            1 << op
            for op in OPERATIONS[ResourceType(resource_type)]
            if self.allows(session, op, resource_type, name)
        )

    def allows_any(self, session: Session, operation: int, resource_type: int) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (Kafka's
        ``authorizeByResourceType``, as InitProducerId asks for WRITE on any topic): an ALLOW
        for it that no DENY of every resource (literal ``*``, prefix "") takes back; with
        no ACL of the type at all, ``allow.everyone.if.no.acl.found``."""
        if not self.enabled or session.principal in self.super_users:
            return True
        acls = self._by_type.get(resource_type, [])
        if not acls:
            return self.allow_everyone
        matching = [a for a in acls if self._applies(a, session.principal, session.host)]
        for acl in matching:
            if (
                acl.permission == DENY
                and acl.operation in (operation, Operation.ALL)
                and (
                    acl.name == WILDCARD
                    if acl.pattern_type == PatternType.LITERAL
                    else acl.name == ""
                )
            ):
                return False
        allowed_by = _ALLOWED_BY.get(Operation(operation), (Operation.ALL, operation))
        return any(a.permission == ALLOW and a.operation in allowed_by for a in matching)

    @staticmethod
    def _applies(acl: Acl, principal: str, host: str) -> bool:
        return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str):
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_everyone
        applies = self._applies
        for acl in acls:
            if (
                acl.permission == DENY
                and acl.operation in (operation, Operation.ALL)
                and applies(acl, principal, host)
            ):
                return False
        allowed_by = _ALLOWED_BY.get(Operation(operation), (Operation.ALL, operation))
        return any(
            acl.permission == ALLOW
            and acl.operation in allowed_by
            and applies(acl, principal, host)
            for acl in acls
        )

    def matching(self, resource_type: int, name: str) -> list[Acl]:
        """Every ACL that applies to the resource: literal on its name or ``*``, and
        prefixed on a prefix of its name."""
        out = list(self._literal.get((resource_type, name), ()))
        out += self._literal.get((resource_type, WILDCARD), ())
        for n in self._prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            out += self._prefixed.get((resource_type, name[:n]), ())
        return out

    # filters ----------------------------------------------------------------------------

    def find(self, acl_filter: AclFilter) -> list[Acl]:
        return sorted(
            (a for a in self.acls if acl_filter.matches(a)),
            key=lambda a: (a.resource_type, a.name, a.pattern_type, a.principal, a.operation),
        )


def from_document(value) -> list[Acl]:
    """The ACLs a stored document (``documents.py``, name ``acls``) holds."""
    return [] if not value else [Acl.decode(item) for item in value["acls"]]


def to_document(acls: Iterable[Acl]) -> dict:
    return {"version": 1, "acls": [a.encode() for a in sorted(acls, key=Acl.encode)]}
