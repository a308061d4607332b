"""AlterUserScramCredentials (key 51), version 0: add, replace or delete users' SCRAM
credentials (``kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=x]'
--entity-type users --entity-name alice``).

The client sends the salt, the iteration count and the salted password; the broker keeps the
salt, the count and the two keys derived from it (``scram_credentials.py``), never the
password. Checked per user, as Kafka does, and a user with any error changes nothing: an
unknown mechanism (UNSUPPORTED_SASL_MECHANISM), fewer than 4096 or more than 16384 iterations,
an empty name, salt or salted password of the wrong size (UNACCEPTABLE_CREDENTIAL), a
credential named twice in the request (DUPLICATE_RESOURCE), deleting one that does not exist
(RESOURCE_NOT_FOUND). The accepted changes are written to the data directory before the
answer; a failed write is KAFKA_STORAGE_ERROR for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from collections import Counter

from headrace.broker.security.authorizer import Operation
from headrace.broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MAX_USERS,
    MECHANISMS,
    MIN_ITERATIONS,
    credential,
    digest_size,
)
from headrace.protocol import ErrorCode, messages

MIN_SALT_BYTES = 12

R = messages.AlterUserScramCredentialsResponse
UPSERTION = messages.AlterUserScramCredentialsRequest.ScramCredentialUpsertion


def _error(store, op, upsert: bool) -> tuple[int, str] | None:
    mechanism = MECHANISMS.get(op.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism."
    if not op.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if not upsert:
        if store.get(op.name, mechanism) is None:
            return (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        return None
    if op.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if op.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    # (a salt under 12 bytes could never be used: scramp refuses it at every login)
    if len(op.salt) < MIN_SALT_BYTES or len(op.salted_password) != digest_size(mechanism):
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt or salted password is not acceptable"
    return None


async def handle(broker: Broker, header, request: messages.AlterUserScramCredentialsRequest):
    store = broker.scram_credentials
    ops = [(op, False) for op in request.deletions] + [(op, True) for op in request.upsertions]
    if not broker.authorizer.allows_cluster(header.session, Operation.ALTER):
        return R(
            throttle_time_ms=0,
            results=[
                R.AlterUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                )
                for name in dict.fromkeys(op.name for op, _ in ops)
            ],
        )
    twice = Counter((op.name, op.mechanism) for op, _ in ops)
    errors: dict[str, tuple[int, str]] = {}
    for op, upsert in ops:
        if op.name in errors:
            continue
        if twice[(op.name, op.mechanism)] > 1:
            errors[op.name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        error = _error(store, op, upsert)
        if error is not None:
            errors[op.name] = error
    new_users = {op.name for op, upsert in ops if upsert and op.name not in store.users}
    if len(store.users) + len(new_users - set(errors)) > MAX_USERS:
        for name in new_users - set(errors):
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many users ({MAX_USERS})")
    upserts, deletions = {}, set()
    for op, _ in ops:
        if op.name in errors:
            continue
        mechanism = MECHANISMS[op.mechanism]
        if isinstance(op, UPSERTION):
            upserts[(op.name, mechanism)] = credential(
                mechanism, bytes(op.salt), bytes(op.salted_password), op.iterations
            )
        else:
            deletions.add((op.name, mechanism))
    if upserts or deletions:
        try:
            await store.change(upserts, deletions)
        except OSError as e:
            for op, _ in ops:
                errors.setdefault(op.name, (ErrorCode.KAFKA_STORAGE_ERROR, str(e)))
    results = [
        R.AlterUserScramCredentialsResult(
            user=name,
            error_code=errors.get(name, (ErrorCode.NONE, None))[0],
            error_message=errors.get(name, (ErrorCode.NONE, None))[1],
        )
        for name in dict.fromkeys(op.name for op, _ in ops)
    ]
    return R(throttle_time_ms=0, results=results)
