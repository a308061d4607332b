"""AlterClientQuotas (key 49), versions 0-1: set or remove quotas of users and client ids
(``kafka-configs --alter --add-config producer_byte_rate=1048576 --entity-type users
--entity-name alice``).

Needs ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every entry). Each
entry is checked as Kafka checks it (INVALID_REQUEST with the reason): entity types ``user``
and ``client-id`` at most once each (a null name is the default), keys
``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage`` and
``controller_mutation_rate`` (kept, not enforced), values above 0, no key twice; or an ``ip``
entity alone (an IP address, or null for the default), whose only key is
``connection_creation_rate``. The valid entries are stored
(``documents.py``) before the answer unless ``validate_only``; beyond
``client.quota.max.entities`` entities nothing of the request is stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import ipaddress

from kazoo.exceptions import KazooException

from headrace.broker.cluster.documents import DocumentTooLarge
from headrace.broker.security.authorizer import Operation
from headrace.broker.security.quotas import (
    CLIENT_ID,
    CONNECTION_RATE,
    DEFAULT,
    IP,
    KEYS,
    USER,
    from_document,
    to_document,
)
from headrace.protocol import ErrorCode, messages

R = messages.AlterClientQuotasResponse


class _TooMany(Exception):
    pass


def _check(entry):
    """(entity key, {key: value or None to remove}) or the reason to refuse."""
    parts = {}
    for e in entry.entity:
        if e.entity_type not in (USER, CLIENT_ID, IP):
            return f"Invalid entity type {e.entity_type!r}"
        if e.entity_type in parts:
            return f"Entity type {e.entity_type} given twice"
        if e.entity_name == "" and e.entity_type == USER:
            return "A user entity's name must not be empty"
        if e.entity_type == IP and e.entity_name is not None:
            try:
                ipaddress.ip_address(e.entity_name)
            except ValueError:
                return f"{e.entity_name!r} is not an IP address"
        parts[e.entity_type] = DEFAULT if e.entity_name is None else e.entity_name
    if not parts:
        return "The entity is empty"
    if IP in parts and len(parts) > 1:
        return "An ip entity cannot be combined with a user or client-id"
    keys = (CONNECTION_RATE,) if IP in parts else KEYS
    ops: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key not in keys:
            return f"Invalid quota config key {op.key!r} for a {'/'.join(parts)} entity"
        if op.key in ops:
            return f"Quota config key {op.key} given twice"
        if not op.remove and not op.value > 0:
            return f"Quota {op.key} must be above 0, not {op.value}"
        ops[op.key] = None if op.remove else float(op.value)
    return (parts.get(USER), parts.get(CLIENT_ID), parts.get(IP)), ops


async def handle(broker: Broker, header, request: messages.AlterClientQuotasRequest):
    quotas = broker.quotas
    if not broker.authorizer.allows_cluster(header.session, Operation.ALTER_CONFIGS):
        return _answer(
            request, [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)] * len(request.entries)
        )
    checked = [_check(entry) for entry in request.entries]
    outcomes: list[tuple[int, str | None]] = [
        (ErrorCode.INVALID_REQUEST, c) if isinstance(c, str) else (ErrorCode.NONE, None)
        for c in checked
    ]
    changes = [c for c in checked if not isinstance(c, str)]

    def change(value):
        entries = from_document(value)
        for key, ops in changes:
            values = dict(entries.get(key, {}))
            for k, v in ops.items():
                if v is None:
                    values.pop(k, None)
                else:
                    values[k] = v
            if values:
                entries[key] = values
            else:
                entries.pop(key, None)
        if len(entries) > quotas.max_entities:
            raise _TooMany
        return to_document(entries)

    failure = None
    if changes:
        try:
            if request.validate_only:
                change(None if not quotas.entries else to_document(quotas.entries))
            else:
                await broker.quota_document.change(change)
        except _TooMany:
            failure = (
                f"Too many quota entities: at most {quotas.max_entities}"
                " (client.quota.max.entities)"
            )
            failure_code = ErrorCode.INVALID_REQUEST
        except DocumentTooLarge as e:
            failure, failure_code = f"The quotas would not fit: {e}", ErrorCode.INVALID_REQUEST
        except (OSError, KazooException) as e:
            failure, failure_code = (
                f"The quotas could not be stored: {e}",
                ErrorCode.UNKNOWN_SERVER_ERROR,
            )
    if failure is not None:
        outcomes = [
            (failure_code, failure) if code == ErrorCode.NONE else (code, m) for code, m in outcomes
        ]
    return _answer(request, outcomes)


def _answer(request: messages.AlterClientQuotasRequest, outcomes):
    return R(
        throttle_time_ms=0,
        entries=[
            R.EntryData(
                error_code=code,
                error_message=message,
                entity=[
                    R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ],
            )
            for entry, (code, message) in zip(request.entries, outcomes, strict=True)
        ],
    )
