"""The transaction state machine, as data: every allowed state change and every per-state
answer of the transaction coordinator lives in this file.

How this works
--------------
A transactional id has one ``TransactionMetadata`` at the coordinator (producer id and
epoch, timeout, the partitions in the current transaction, the state). Its life::

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit
      ^                                   |    \\--EndTxn(abort)/timeout--> PrepareAbort
      |                                   |                              (timeout and a new
      |                                   v                               InitProducerId go
      |                             PrepareEpochFence ------------------> through the fence:
      |                                                                   epoch + 1)
    CompleteCommit <--markers written-- PrepareCommit
    CompleteAbort  <--markers written-- PrepareAbort
    Complete* --InitProducerId (epoch + 1)--> Empty;  Complete* --AddPartitions--> Ongoing
    Empty/Complete* --transactional.id.expiration.ms--> Dead (a tombstone; forgotten)

Every change is written to ``__transaction_state`` and flushed before it takes effect in
memory; while one is being written the id is *pending* and other requests for it get
CONCURRENT_TRANSACTIONS (the client retries). A Prepare* state on disk means the decision
is made: after a restart the coordinator writes the markers and completes it.

Transactions v2 (KIP-890, EndTxn v5): the decision carries the epoch + 1, so the markers fence
whatever the producer sent before it, and the producer goes on with the bumped epoch (a new
producer id when the epoch runs out). An abort with nothing open (Empty, Complete*) is decided
and completed the same way, with no markers.

``TRANSITIONS[target]`` lists the states a transaction may move to ``target`` from (Kafka's
rules). The request tables say what each request does in each state: ``ACCEPT`` (go ahead),
``DONE`` (already so: answer success, change nothing) or an error code.
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class TxnState:
    name: str  # Kafka's name, as DescribeTransactions and ListTransactions report it
    code: int  # the status byte in __transaction_state records

    def __repr__(self) -> str:
        return self.name


EMPTY = TxnState("Empty", 0)
ONGOING = TxnState("Ongoing", 1)
PREPARE_COMMIT = TxnState("PrepareCommit", 2)
PREPARE_ABORT = TxnState("PrepareAbort", 3)
COMPLETE_COMMIT = TxnState("CompleteCommit", 4)
COMPLETE_ABORT = TxnState("CompleteAbort", 5)
DEAD = TxnState("Dead", 6)
PREPARE_EPOCH_FENCE = TxnState("PrepareEpochFence", 7)

ALL = (
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
    PREPARE_ABORT,
    COMPLETE_COMMIT,
    COMPLETE_ABORT,
    DEAD,
    PREPARE_EPOCH_FENCE,
)
BY_CODE = {s.code: s for s in ALL}
BY_NAME = {s.name: s for s in ALL}

TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    # (transactions v2: an abort with no transaction open bumps the epoch all the same)
    PREPARE_ABORT: frozenset(
        {ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}
    ),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}

# States whose markers are being written: the outcome is decided, not yet complete.
COMPLETING = frozenset({PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE})
# States a transaction can expire from (nothing in flight).
IDLE = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})

ACCEPT = "accept"
DONE = "done"
ABORT_FIRST = "abort first"  # InitProducerId on an open transaction: fence and abort it

E = ErrorCode

# InitProducerId for an existing transactional id.
INIT_PRODUCER_ID: dict[TxnState, object] = {
    EMPTY: ACCEPT,
    COMPLETE_COMMIT: ACCEPT,
    COMPLETE_ABORT: ACCEPT,
    ONGOING: ABORT_FIRST,
    PREPARE_COMMIT: E.CONCURRENT_TRANSACTIONS,
    PREPARE_ABORT: E.CONCURRENT_TRANSACTIONS,
    PREPARE_EPOCH_FENCE: E.CONCURRENT_TRANSACTIONS,
    DEAD: ACCEPT,
}

# AddPartitionsToTxn and AddOffsetsToTxn.
ADD_PARTITIONS: dict[TxnState, object] = {
    EMPTY: ACCEPT,
    ONGOING: ACCEPT,
    COMPLETE_COMMIT: ACCEPT,
    COMPLETE_ABORT: ACCEPT,
    PREPARE_COMMIT: E.CONCURRENT_TRANSACTIONS,
    PREPARE_ABORT: E.CONCURRENT_TRANSACTIONS,
    PREPARE_EPOCH_FENCE: E.CONCURRENT_TRANSACTIONS,
    DEAD: E.INVALID_PRODUCER_ID_MAPPING,
}

# EndTxn: (state, commit?) -> what to do.
END_TXN: dict[tuple[TxnState, bool], object] = {
    (ONGOING, True): ACCEPT,
    (ONGOING, False): ACCEPT,
    (PREPARE_COMMIT, True): E.CONCURRENT_TRANSACTIONS,
    (PREPARE_COMMIT, False): E.INVALID_TXN_STATE,
    (PREPARE_ABORT, True): E.INVALID_TXN_STATE,
    (PREPARE_ABORT, False): E.CONCURRENT_TRANSACTIONS,
    (COMPLETE_COMMIT, True): DONE,  # a retry of a commit that completed
    (COMPLETE_COMMIT, False): E.INVALID_TXN_STATE,
    (COMPLETE_ABORT, True): E.INVALID_TXN_STATE,
    (COMPLETE_ABORT, False): DONE,
    (EMPTY, True): E.INVALID_TXN_STATE,
    (EMPTY, False): E.INVALID_TXN_STATE,
    (PREPARE_EPOCH_FENCE, True): E.CONCURRENT_TRANSACTIONS,
    (PREPARE_EPOCH_FENCE, False): E.CONCURRENT_TRANSACTIONS,
    (DEAD, True): E.INVALID_PRODUCER_ID_MAPPING,
    (DEAD, False): E.INVALID_PRODUCER_ID_MAPPING,
}

# EndTxn of transactions v2 (KIP-890: every EndTxn bumps the epoch): (state, commit?, retry?)
# -> what to do, where a retry is the EndTxn that made the current epoch asked again (with
# the epoch before its bump). ACCEPT: decide with the epoch + 1; ABORT_EMPTY: the same for an
# abort with no partition in the transaction (markers to no one); DONE: answer with the
# current producer id and epoch.
ABORT_EMPTY = "abort empty"
END_TXN_V2: dict[tuple[TxnState, bool, bool], object] = {
    (state, commit, retry): E.INVALID_TXN_STATE
    for state in ALL
    for commit in (True, False)
    for retry in (True, False)
}
END_TXN_V2.update(
    {
        (ONGOING, True, False): ACCEPT,
        (ONGOING, False, False): ACCEPT,
        (EMPTY, False, False): ABORT_EMPTY,
        (COMPLETE_COMMIT, True, True): DONE,
        (COMPLETE_COMMIT, False, False): ABORT_EMPTY,
        (COMPLETE_ABORT, False, True): DONE,
        (COMPLETE_ABORT, False, False): ABORT_EMPTY,
        (PREPARE_COMMIT, True, True): E.CONCURRENT_TRANSACTIONS,
        (PREPARE_ABORT, False, True): E.CONCURRENT_TRANSACTIONS,
        (PREPARE_EPOCH_FENCE, True, False): E.CONCURRENT_TRANSACTIONS,
        (PREPARE_EPOCH_FENCE, False, False): E.CONCURRENT_TRANSACTIONS,
    }
)

# TxnOffsetCommit (checked with the coordinator: the group's offsets partition must be in
# the ongoing transaction).
TXN_OFFSET_COMMIT: dict[TxnState, object] = {
    s: (
        ACCEPT
        if s is ONGOING
        else E.CONCURRENT_TRANSACTIONS
        if s in COMPLETING
        else E.INVALID_TXN_STATE
    )
    for s in ALL
}


class IllegalTransition(RuntimeError):
    """A state change the table does not allow (a bug in the coordinator)."""


def check_transition(source: TxnState, target: TxnState) -> None:
    if source not in TRANSITIONS[target]:
        raise IllegalTransition(f"transaction state {source} -> {target} is not allowed")


assert set(TRANSITIONS) == set(ALL) == set(INIT_PRODUCER_ID) == set(ADD_PARTITIONS)
assert {k for k, _ in END_TXN} == set(ALL)
