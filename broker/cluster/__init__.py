"""headrace.broker.cluster: cluster mode's metadata in ZooKeeper: membership, topics, partition
states, the controller, elections, placement.

cluster.py          This broker's view of the cluster (brokers, topics, partition states,
                    the controller), kept by watches; its registration and its session
                    (fencing when the session is lost)
topic_admin.py      The topic changes a broker writes: create, grow, configs, delete,
                    reassignments, and the last write of a move
controller.py       The controller's job: its election, the member brokers, leader elections,
                    moving partitions where placement puts them; a broker's controlled shutdown
elections.py        Leader election: what the controller writes into a partition's state when
                    brokers come and go
partition_state.py  A partition's leader and ISR in ZooKeeper (Kafka's ZooKeeper-era ``state``
                    znode)
placement.py        Where things live among brokers: weighted rendezvous (highest random weight)
                    hashing
documents.py        Small JSON documents the whole broker (or the whole cluster) shares: the
                    ACLs, the client quotas
znodes.py           The znodes: their paths, and the codecs of what they hold
zk_client.py        The ZooKeeper operations (in worker threads), with the one compare-and-set
                    helper
"""
