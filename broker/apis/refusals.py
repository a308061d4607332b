"""The checks several APIs make before they act, each giving why a request is refused (an
error code, 0 when it is not), so that every API refuses alike and answers in its own
response's shape.

A group's and a transactional id's: the principal's right on it first (Kafka authorizes
before it looks for the coordinator), then whether this broker is its coordinator and has
loaded it (``not_served``). The ACL APIs': an authorizer is configured, and the principal
has the operation on the cluster. The delegation-token APIs': a SASL session that did not
authenticate with a token, and tokens on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import GROUP, TRANSACTIONAL_ID, AclFilter
from headrace.protocol import ErrorCode


def group_refusal(broker: Broker, session, operation: int, group_id: str) -> int:
    """GROUP_AUTHORIZATION_FAILED without ``operation`` on the group, else why its
    coordinator cannot serve it here (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), else 0."""
    if not broker.authorizer.allows(session, operation, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return broker.groups.not_served(group_id)


def transaction_refusal(broker: Broker, session, operation: int, transactional_id: str) -> int:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED without ``operation`` on the transactional id,
    else why its coordinator cannot serve it here, else 0."""
    if not broker.authorizer.allows(session, operation, TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return broker.transactions.not_served(transactional_id)


def acls_refusal(broker: Broker, session, operation: int) -> tuple[int, str | None] | None:
    """(error code, message) when the ACLs may not be read or changed (``operation``
    DESCRIBE or ALTER on the cluster): SECURITY_DISABLED without an authorizer, as Kafka
    answers, or CLUSTER_AUTHORIZATION_FAILED; None when they may."""
    authorizer = broker.authorizer
    if not authorizer.enabled:
        return ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."
    if not authorizer.allows_cluster(session, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    return None


def acl_filter(f) -> AclFilter:
    """The filter of a DescribeAcls request or of a DeleteAcls filter (the same fields)."""
    return AclFilter(
        f.resource_type_filter,
        f.resource_name_filter,
        f.pattern_type_filter,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


def token_refusal(broker: Broker, session) -> int:
    """DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a listener without SASL or for a session that
    authenticated with a delegation token, DELEGATION_TOKEN_AUTH_DISABLED without
    ``delegation.token.secret.key``, else 0 (Kafka's order)."""
    if session.sasl is None or session.sasl.token:
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    if not broker.delegation_tokens.enabled:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    return ErrorCode.NONE
