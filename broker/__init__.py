"""headrace.broker: the broker process, one module per Kafka API, and the coordinators.

Files in the order a reader should open them:

The process
    server.py         ``BrokerServer``: how the pieces are wired, start-up, request dispatch,
                      shutdown
    config.py         broker and topic settings, Kafka's names, types and defaults
    listeners.py      listeners: names, security protocols, bind and advertised addresses
    session.py        who is asking: a connection's listener, principal and SASL state
    tls.py            TLS contexts of SSL and SASL_SSL listeners (PEM files), the certificate
                      principal
    sasl.py           SASL's state machine, PLAIN and SCRAM; scram_credentials.py keeps the
                      SCRAM users salted in the data directory (a cluster: in ZooKeeper)
    inter_broker.py   how this broker reaches the others: the inter-broker listener's TLS
                      and SASL settings (broker_client.py speaks them)
    authorizer.py     ACLs and the decisions made from them (cached per principal and resource)
    quotas.py         client quotas: which applies to a client, and its throttle time
    documents.py      small shared documents (the ACLs, the quotas): the data directory, or a
                      znode every broker of a cluster watches
    topics.py         topics: the table, topics.json, all-or-nothing creation, ``flush``
    partition.py      one partition: its log, the append path, waiting fetches
    producer_state.py a partition's producers: idempotent sequences, open transactions
    background.py     ``run_every``: the loop behind every periodic job
    cli.py, process.py  the ``headrace`` command; a broker in a child process (tests, tools)
    zookeeper_server.py a standalone ZooKeeper from Maven Central's jars (``headrace zookeeper``,
                      the tests); maven.py resolves and caches such class paths

API modules (each ``handle(broker, header, request)``), by family
    produce and fetch   produce.py (log_validator.py: the records inside each batch checked as
                        Kafka's LogValidator does), fetch.py, list_offsets.py
    cluster             api_versions.py, metadata.py, describe_cluster.py,
                        describe_log_dirs.py
    security            sasl_handshake.py, sasl_authenticate.py,
                        describe_user_scram_credentials.py, alter_user_scram_credentials.py,
                        create_acls.py, describe_acls.py, delete_acls.py,
                        describe_client_quotas.py, alter_client_quotas.py
    topic admin         create_topics.py, create_partitions.py, delete_topics.py,
                        delete_records.py, describe_configs.py, alter_configs.py,
                        incremental_alter_configs.py
    classic groups      find_coordinator.py, join_group.py, sync_group.py, heartbeat.py,
                        leave_group.py, describe_groups.py, list_groups.py, delete_groups.py
    consumer groups     consumer_group_heartbeat.py, consumer_group_describe.py (KIP-848)
    offsets             offset_commit.py, offset_fetch.py, offset_delete.py
    transactions        init_producer_id.py (and the producer id blocks), add_partitions_to_txn.py,
                        add_offsets_to_txn.py, txn_offset_commit.py, end_txn.py
    transaction admin   describe_producers.py, describe_transactions.py, list_transactions.py

Coordinators and their state
    group_coordinator.py        groups of both kinds: start-up, offsets, deletion, expiry, and
                                the purge of a deleted topic's offsets
    classic_coordinator.py      classic groups: join, sync, heartbeat, leave, the rebalance
    classic_group.py            the classic group and member model
    group_state.py              the classic state machine as tables
    consumer_group.py           KIP-848 consumer groups: server-side assignment, reconciliation
    group_sessions.py           member session timers (both kinds)
    offset_store.py             committed offsets in ``__consumer_offsets`` (both kinds)
    group_membership.py         a classic group's membership records there
    group_offsets.py            the record layouts of ``__consumer_offsets`` and its replay
    transaction_coordinator.py  transactional ids, fencing, commit and abort
    transaction_state.py        its state machine as tables
    transaction_log.py          its records in ``__transaction_state``
    txn_markers.py              control batches and the aborted-transactions index
    placement.py                rendezvous hashing: which broker coordinates a key, and where
                                each partition's replicas live
    log_cleaner.py              retention and compaction in the background
"""
