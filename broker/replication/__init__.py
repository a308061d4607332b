"""headrace.broker.replication: cluster mode's copies of a partition: the leader's view of its
followers, the followers' fetchers, and moving a partition.

replica_manager.py  This broker's role for each partition it holds a replica of: leader,
                    follower, or neither
leader_state.py     What the leader of a partition keeps about its followers: their log ends,
                    the ISR, the high watermark, and the acks=all produces waiting for it
replica_fetcher.py  Replica fetchers: copy partitions from their leader with the Fetch API, as a
                    Kafka follower
moves.py            Moving a partition of one replica from one broker to another (cluster mode)
hw_checkpoint.py    The high watermarks of a broker's replicas across restarts: Kafka's
                    ``replication-offset-checkpoint``, one file per data directory (cluster
                    mode)
"""
