"""headrace.broker.cluster: cluster mode's metadata: membership and topics in ZooKeeper, the
controller, elections, placement.

cluster.py          Cluster mode (``zookeeper.connect``): membership and topic metadata in
                    ZooKeeper
controller.py       The controller's job (cluster mode): the member brokers, and the partitions
                    that follow them
elections.py        Leader election: what the controller writes into a partition's state when
                    brokers come and go
partition_state.py  A partition's leader and ISR in ZooKeeper (Kafka's ZooKeeper-era ``state``
                    znode)
placement.py        Where things live among brokers: weighted rendezvous (highest random weight)
                    hashing
documents.py        Small JSON documents the whole broker (or the whole cluster) shares: the
                    ACLs, the client quotas
"""
