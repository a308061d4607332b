"""headrace.broker.coordinator.txn: the transaction coordinator: transactional ids, fencing, commit
and abort; producer ids; the markers written on this broker.

transaction_coordinator.py  The transaction coordinator: transactional producer ids, epochs and
                            fencing, the partitions of each open transaction, and the
                            commit/abort markers that close it
transaction_state.py        The transaction state machine, as data: every allowed state change
                            and every per-state answer of the transaction coordinator lives in
                            this file
transaction_log.py          Transaction coordinator state in the internal compacted topic
                            ``__transaction_state``, in Kafka's record layouts
completion.py               Closing decided transactions (markers, then Complete*, tried
                            again until done), and the coordinator's timer
markers.py                  Transaction markers: written on this broker (the leader's side of
                            closing a transaction), and the coordinator's, sent to each leader
add_partitions_manager.py   The leader's side of transactions v2 (KIP-890): a partition joins
                            the producer's transaction when its leader first gets a
                            transactional batch for it, before the batch is appended
producer_ids.py             Producer ids for idempotent and transactional producers, none given
                            twice
"""
