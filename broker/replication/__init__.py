"""headrace.broker.replication: cluster mode's replicas of a partition on this broker: its
role for each (leader, follower), the followers' fetchers, and moving a partition.

replica_manager.py  This broker's role for each partition it holds a replica of: leader,
                    follower, or neither; and moving partitions (Kafka's reassignment, for
                    every replication factor)
replica_fetcher.py  Replica fetchers: copy partitions from their leader with the Fetch API, as a
                    Kafka follower
hw_checkpoint.py    The high watermarks of a broker's replicas across restarts: Kafka's
                    ``replication-offset-checkpoint``, one file per data directory (cluster
                    mode)

A leader's view of its followers (their log ends, the ISR, acks=all waits) is the partition's
own: ``log/leader_state.py``.
"""
