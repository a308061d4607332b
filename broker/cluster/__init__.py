"""headrace.broker.cluster: the cluster metadata: in ZooKeeper (membership, topics, partition
states, the controller, elections, placement), or of a broker on its own.

metadata.py         ``ClusterMetadata``: the one surface of both kinds, so that no code asks
                    whether there is a cluster
single_node.py      A broker on its own: a cluster of one (topics in ``topics.json``, written
                    by the topic table; documents and producer-id blocks in the data directory)
cluster.py          This broker's view of the cluster (brokers, topics, partition states,
                    the controller), kept by watches; its registration and its session
                    (fencing when the session is lost)
topic_admin.py      The topic changes a broker writes: create, grow, configs, delete,
                    reassignments, and the last write of a move
controller.py       The controller's job: its election, the member brokers, leader elections,
                    rebalancing the partitions over the members; a broker's controlled shutdown
elections.py        Leader election: what the controller writes into a partition's state when
                    brokers come and go
partition_state.py  A partition's leader and ISR in ZooKeeper (Kafka's ZooKeeper-era ``state``
                    znode)
placement.py        Where things live among brokers: weighted rendezvous (highest random weight)
                    hashing, and rebalancing from where they are
documents.py        Small JSON documents the whole broker (or the whole cluster) shares: the
                    ACLs, the client quotas, the feature levels (a file, or a znode)
features.py         Feature versions (KIP-584): the levels this broker supports, the levels
                    the cluster finalized, UpdateFeatures
znodes.py           The znodes: their paths, and the codecs of what they hold
zk_client.py        The ZooKeeper operations (in worker threads), with the one compare-and-set
                    helper
"""
