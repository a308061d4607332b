"""headrace.broker.share: share groups' records at the partition leaders (KIP-932, "queues"):
which records each share group has in flight on each partition, who holds them, and the
share sessions of the consumers fetching them. The groups' membership and assignment are the
group coordinator's (coordinator/group/).

share_partition.py          One share group on one partition: the in-flight records as runs
                            of offsets, acquisition locks, delivery counts, acknowledgements
share_partition_manager.py  The share partitions this broker keeps (where each starts, their
                            bound) and the share sessions
share_sessions.py           Share sessions: a consumer's partitions and epoch between
                            ShareFetch requests, tied to its connection
dead_letters.py             Share groups' dead-letter queues: rejected and exhausted records
                            copied to the group's dead-letter topic
"""
