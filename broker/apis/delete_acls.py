"""DeleteAcls (key 31), versions 1-3: remove the ACLs filters match (``kafka-acls --remove``).

The principal needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every filter);
without an authorizer every filter gets SECURITY_DISABLED. Every filter is matched against the
ACLs as they were before the request (one ACL may be listed under several filters), the
matches are removed from the store in one change, and each filter's answer lists what it
removed. A filter with an unknown code is INVALID_REQUEST and removes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import KazooException

from headrace.broker.security.authorizer import Operation, from_document, to_document
from headrace.protocol import ErrorCode, messages

from .refusals import acl_filter, acls_refusal

R = messages.DeleteAclsResponse


async def handle(broker: Broker, header, request: messages.DeleteAclsRequest):
    refused = acls_refusal(broker, header.session, Operation.ALTER)
    if refused is not None:
        return _all(request, *refused)
    filters = [acl_filter(f) for f in request.filters]
    reasons = [f.invalid() for f in filters]
    matched: list[list] = [[] for _ in filters]

    def remove(value):
        acls = from_document(value)
        for i, f in enumerate(filters):
            if reasons[i] is None:
                matched[i] = [a for a in acls if f.matches(a)]
        gone = {a for m in matched for a in m}
        return to_document(a for a in acls if a not in gone)

    failure = None
    try:
        await broker.acl_document.change(remove)
    except (OSError, KazooException) as e:
        failure = f"The ACLs could not be stored: {e}"
    results = []
    for reason, acls in zip(reasons, matched, strict=True):
        if reason is not None:
            results.append(_result(ErrorCode.INVALID_REQUEST, reason))
        elif failure is not None:
            results.append(_result(ErrorCode.UNKNOWN_SERVER_ERROR, failure))
        else:
            results.append(
                R.DeleteAclsFilterResult(
                    error_code=ErrorCode.NONE,
                    error_message=None,
                    matching_acls=[
                        R.DeleteAclsMatchingAcl(
                            error_code=ErrorCode.NONE,
                            error_message=None,
                            resource_type=a.resource_type,
                            resource_name=a.name,
                            pattern_type=a.pattern_type,
                            principal=a.principal,
                            host=a.host,
                            operation=a.operation,
                            permission_type=a.permission,
                        )
                        for a in acls
                    ],
                )
            )
    return R(throttle_time_ms=0, filter_results=results)


def _result(code: int, message: str | None):
    return R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])


def _all(request: messages.DeleteAclsRequest, code: int, message: str | None):
    return R(throttle_time_ms=0, filter_results=[_result(code, message) for _ in request.filters])
