"""CreateAcls (key 30), versions 1-3: add ACLs (``kafka-acls --add``).

The principal needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every
creation); without an authorizer every creation gets SECURITY_DISABLED, as Kafka answers. Each
ACL is checked as Kafka checks it (``authorizer.invalid``: INVALID_REQUEST with the reason);
the valid ones are stored (``documents.py``: the data directory, or ZooKeeper in a cluster)
before the answer, and an ACL that exists already is not added twice. Beyond
``authorizer.acls.max.count`` ACLs nothing of the request is added (INVALID_REQUEST).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import KazooException

from headrace.broker.cluster.documents import DocumentTooLarge
from headrace.broker.security.authorizer import Acl, Operation, from_document, invalid, to_document
from headrace.protocol import ErrorCode, messages

from .refusals import acls_refusal

R = messages.CreateAclsResponse


class _TooMany(Exception):
    pass


async def handle(broker: Broker, header, request: messages.CreateAclsRequest):
    authorizer = broker.authorizer
    creations = request.creations
    refused = acls_refusal(broker, header.session, Operation.ALTER)
    if refused is not None:
        return _all(creations, *refused)
    acls = [
        Acl(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        for c in creations
    ]
    errors: list[tuple[int, str | None]] = []
    for acl in acls:
        reason = invalid(acl)
        errors.append(
            (ErrorCode.NONE, None) if reason is None else (ErrorCode.INVALID_REQUEST, reason)
        )
    valid = {a for a, (code, _) in zip(acls, errors, strict=True) if code == ErrorCode.NONE}

    def add(value):
        now = set(from_document(value)) | valid
        if len(now) > authorizer.max_acls:
            raise _TooMany
        return to_document(now)

    failure = None
    if valid:
        try:
            await broker.acl_document.change(add)
        except _TooMany:
            failure = (
                ErrorCode.INVALID_REQUEST,
                f"Too many ACLs: at most {authorizer.max_acls} (authorizer.acls.max.count)",
            )
        except DocumentTooLarge as e:
            failure = (ErrorCode.INVALID_REQUEST, f"The ACLs would not fit: {e}")
        except (OSError, KazooException) as e:
            failure = (ErrorCode.UNKNOWN_SERVER_ERROR, f"The ACLs could not be stored: {e}")
    results = []
    for code, message in errors:
        if code == ErrorCode.NONE and failure is not None:
            code, message = failure
        results.append(R.AclCreationResult(error_code=code, error_message=message))
    return R(throttle_time_ms=0, results=results)


def _all(creations, code: int, message: str | None):
    return R(
        throttle_time_ms=0,
        results=[R.AclCreationResult(error_code=code, error_message=message) for _ in creations],
    )
