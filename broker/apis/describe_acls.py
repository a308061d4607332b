"""DescribeAcls (key 29), versions 1-3: the ACLs a filter matches (``kafka-acls --list``).

The principal needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED); without an
authorizer the answer is SECURITY_DISABLED. A filter with an unknown code is INVALID_REQUEST.
Matching ACLs are grouped by resource (type, name, pattern type), as Kafka answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .refusals import acl_filter, acls_refusal

R = messages.DescribeAclsResponse


def handle(broker: Broker, header, request: messages.DescribeAclsRequest):
    refused = acls_refusal(broker, header.session, Operation.DESCRIBE)
    if refused is not None:
        return _error(*refused)
    wanted = acl_filter(request)
    reason = wanted.invalid()
    if reason is not None:
        return _error(ErrorCode.INVALID_REQUEST, reason)
    resources: dict[tuple, list] = {}
    for acl in broker.authorizer.find(wanted):
        resources.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
            R.AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        resources=[
            R.DescribeAclsResource(
                resource_type=t, resource_name=name, pattern_type=pattern, acls=acls
            )
            for (t, name, pattern), acls in resources.items()
        ],
    )


def _error(code: int, message: str | None):
    return R(throttle_time_ms=0, error_code=code, error_message=message, resources=[])
