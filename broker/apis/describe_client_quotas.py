"""DescribeClientQuotas (key 48), versions 0-1: the quotas whose entities match a filter
(``kafka-configs --describe --entity-type users``).

Needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED). Each filter
component names an entity type (``user``, ``client-id``, ``ip``) and a match: EXACT (0) with a name,
DEFAULT (1), or ANY (2) name including the default. An entity matches when every component
does; with ``strict`` it may have no other parts. An unknown entity type or match type is
INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.broker.security.quotas import CLIENT_ID, DEFAULT, IP, USER
from headrace.protocol import ErrorCode, messages

R = messages.DescribeClientQuotasResponse
EXACT, MATCH_DEFAULT, ANY = 0, 1, 2


def handle(broker: Broker, header, request: messages.DescribeClientQuotasRequest):
    if not broker.authorizer.allows_cluster(header.session, Operation.DESCRIBE_CONFIGS):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    wanted = {}
    for c in request.components:
        if c.entity_type not in (USER, CLIENT_ID, IP) or c.match_type not in (
            EXACT,
            MATCH_DEFAULT,
            ANY,
        ):
            return _error(ErrorCode.INVALID_REQUEST, f"Invalid filter component {c.entity_type!r}")
        if c.entity_type in wanted:
            return _error(ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} given twice")
        wanted[c.entity_type] = c
    entries = []
    for (user, client, ip), values in broker.quotas.entries.items():
        parts = {k: v for k, v in ((USER, user), (CLIENT_ID, client), (IP, ip)) if v is not None}
        if request.strict and set(parts) != set(wanted):
            continue
        if not all(_matches(parts.get(kind), c) for kind, c in wanted.items()):
            continue
        entries.append(
            R.EntryData(
                entity=[
                    R.EntityData(entity_type=k, entity_name=v if isinstance(v, str) else None)
                    for k, v in parts.items()
                ],
                values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            )
        )
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


def _matches(part, component) -> bool:
    if part is None:
        return False
    if component.match_type == EXACT:
        return part is not DEFAULT and part == component.match
    if component.match_type == MATCH_DEFAULT:
        return part is DEFAULT
    return True


def _error(code: int, message: str | None):
    return R(throttle_time_ms=0, error_code=code, error_message=message, entries=None)
