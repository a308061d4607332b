"""ListTransactions (key 66), versions 0-2: the transactional ids this coordinator knows.

Filters: states (unknown state names are returned in ``unknown_state_filters``), producer
ids, v1 a minimum duration (transactions open at least that long; -1 none), v2 a regular
expression the id must match (Java's ``Pattern.matches`` semantics: the whole id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import re
import time

from headrace.broker.coordinator.txn.transaction_state import BY_NAME, ONGOING
from headrace.broker.security.authorizer import TRANSACTIONAL_ID, Operation
from headrace.protocol import ErrorCode, messages

R = messages.ListTransactionsResponse


def handle(broker: Broker, header, request: messages.ListTransactionsRequest):
    version = header.api_version
    wanted = set()
    unknown = []
    for name in request.state_filters:
        if name in BY_NAME:
            wanted.add(BY_NAME[name])
        else:
            unknown.append(name)
    pids = set(request.producer_id_filters)
    duration = request.duration_filter if version >= 1 else -1
    pattern = request.transactional_id_pattern if version >= 2 else None
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
            unknown_state_filters=[],
            transaction_states=[],
        )
    now = int(time.time() * 1000)
    states = []
    for txn in broker.transactions.transactions():
        tid = txn.transactional_id
        if not broker.authorizer.allows(header.session, Operation.DESCRIBE, TRANSACTIONAL_ID, tid):
            continue
        if wanted and txn.state not in wanted:
            continue
        if pids and txn.producer_id not in pids:
            continue
        if duration >= 0 and not (txn.state is ONGOING and now - txn.start_ms >= duration):
            continue
        if regex is not None and not regex.fullmatch(tid):
            continue
        states.append(
            R.TransactionState(
                transactional_id=tid, producer_id=txn.producer_id, transaction_state=txn.state.name
            )
        )
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        unknown_state_filters=unknown,
        transaction_states=states,
    )
