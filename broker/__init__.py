"""headrace.broker: the broker, as sub-packages from the top down.

A module imports its own sub-package and those below it in this list, never one above
(``tests/test_layers.py`` checks it), so the list is also the order to read them in from the
outside in:

app/           the process: ``BrokerServer`` wires the pieces, starts, dispatches requests to
               the APIs and shuts down; the ``headrace`` command; ``headrace.Broker`` in the
               calling process; the metrics endpoint
tools/         the admin commands (``headrace topics``, ``groups``, ``dump-log``, ``verify``)
               and the processes tests and tools start: a broker, ZooKeeper
apis/          one module per Kafka API, and the registry of them
iceberg/       topics as Iceberg tables: committed records of the led partitions, written as
               Parquet and committed as snapshots with the offsets they reach
registry/      the schema registry: Confluent's REST API on a listener of its own, its state
               in the compacted topic ``_schemas``
share/         share groups' records at the partition leaders: in-flight records, locks,
               delivery counts, share sessions
coordinator/   ``txn/``: the transaction coordinator, producer ids, markers;
               ``share/``: the share coordinator (share groups' state in
               ``__share_group_state``) and the persister partition leaders call it through;
               ``group/``: classic, KIP-848 consumer, share and streams groups and
               committed offsets, all kept in ``__consumer_offsets``
replication/   cluster mode's replicas here: this broker's role for each partition (leader,
               follower), the replica fetchers, moving a partition
client/        the broker as a Kafka client: of the other brokers, and of a running broker
               (the admin commands)
security/      who is asking and what they may do: sessions, TLS, SASL, SCRAM users, ACLs,
               client quotas
log/           the topics and partitions this broker holds: the topic table, a partition's
               append path and high watermark, its leader's view of the followers, producer
               state, record checks, the log cleaner
cluster/       cluster mode's metadata in ZooKeeper: membership, topics, partition states,
               the controller, elections, placement
config/        settings, with Kafka's names, types and defaults; listeners
background.py  ``run_every``: the loop behind every periodic job; the wall clock

Below broker/ are ``headrace.pipeline`` (the request path: connections, handler queues, the
append and flush stages), ``headrace.storage`` (segmented logs) and ``headrace.protocol``
(Kafka's wire format). Each sub-package's ``__init__`` is the map of its files.

Where a lower sub-package calls back into a higher one, it says what it needs as a
``Protocol`` of its own, which the higher one's class fulfils: the cluster tells the topic
table of topic changes (``cluster.TopicTable``) and the replica manager of partition states
(``cluster.PartitionRoles``), and a broker on its own has the topic table make its topic
changes (``single_node.LocalTopics``); the topic table tells the roles of its partitions
(``roles.Roles``).
"""
