"""headrace.broker.coordinator.share: the share coordinator (KIP-932): where the state of each
share partition (which records a share group has done with) is kept, for the partition leaders,
and the persister those leaders call it through.

share_coordinator.py  The share coordinator: the state of the share-partition keys whose
                      partition of ``__share_group_state`` this broker leads; Initialize, Read,
                      Write, Delete and ReadSummary as Kafka answers them; acks=all writes
share_state_log.py    Share-partition state in the internal topic ``__share_group_state``, in
                      Kafka's record layouts (snapshots, updates, tombstones); the key's
                      partition; replay
state_batches.py      State batches and how a write's batches merge into the stored ones
                      (Kafka's PersisterStateBatchCombiner)
persister.py          The persister: what a partition leader calls to read and write its share
                      partitions' state, here or at the coordinator over the network
"""
