"""DescribeUserScramCredentials (key 50), version 0: which SCRAM mechanisms each user has a
credential for, and its iteration count (never the salt or keys).

No users (null or empty) means every user. An unknown user gets RESOURCE_NOT_FOUND, a user
named twice DUPLICATE_RESOURCE, each in its own result, as Kafka answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.broker.security.scram_credentials import MECHANISM_TYPES
from headrace.protocol import ErrorCode, messages

R = messages.DescribeUserScramCredentialsResponse


def handle(broker: Broker, header, request: messages.DescribeUserScramCredentialsRequest):
    if not broker.authorizer.allows_cluster(header.session, Operation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, error_code=code, error_message=None, results=[])
    users = broker.scram_credentials.users
    names = [u.name for u in request.users] if request.users else sorted(users)
    results = []
    for name in dict.fromkeys(names):
        result = R.DescribeUserScramCredentialsResult(
            user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[]
        )
        results.append(result)
        if names.count(name) > 1:
            result.error_code = ErrorCode.DUPLICATE_RESOURCE
            result.error_message = (
                "Cannot describe SCRAM credentials for the same user twice in a single"
                f" request: {name}"
            )
        elif name not in users:
            result.error_code = ErrorCode.RESOURCE_NOT_FOUND
            result.error_message = (
                f"Attempt to describe a user credential that does not exist: {name}"
            )
        else:
            result.credential_infos = [
                R.CredentialInfo(mechanism=MECHANISM_TYPES[mechanism], iterations=c.iterations)
                for mechanism, c in sorted(users[name].items())
            ]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)
