"""headrace.broker.apis: one module per Kafka API, each ``handle(broker, header, request)``.

registry.py lists them in API key order, with the versions of each (ApiVersions answers from
it); a module is imported when its API is first asked for. A new API is a module and a line
there. context.py names (and types) what a module may use of its ``broker``; mypy
holds every module to it. refusals.py holds the checks several modules make before they act
(a group's or a transactional id's rights and coordinator, the ACL APIs'). A module returns
its response, ``None`` (acks=0) or an awaitable of either; ``app/dispatch.py`` decodes the
request and encodes the answer. By family:

produce and fetch   produce.py (leader_hints.py: KIP-951's hints in a NOT_LEADER answer),
                    fetch.py, list_offsets.py, offset_for_leader_epoch.py
cluster             api_versions.py, metadata.py, describe_topic_partitions.py,
                    describe_cluster.py, describe_log_dirs.py, alter_replica_log_dirs.py,
                    unregister_broker.py, update_features.py
security            sasl_handshake.py, sasl_authenticate.py,
                    describe_user_scram_credentials.py, alter_user_scram_credentials.py,
                    create_acls.py, describe_acls.py, delete_acls.py,
                    describe_client_quotas.py, alter_client_quotas.py,
                    create_delegation_token.py, renew_delegation_token.py,
                    expire_delegation_token.py, describe_delegation_token.py
topic admin         create_topics.py, create_partitions.py, delete_topics.py,
                    delete_records.py, describe_configs.py, alter_configs.py,
                    incremental_alter_configs.py, list_config_resources.py, elect_leaders.py,
                    alter_partition_reassignments.py, list_partition_reassignments.py
classic groups      find_coordinator.py, join_group.py, sync_group.py, heartbeat.py,
                    leave_group.py, describe_groups.py, list_groups.py, delete_groups.py
consumer groups     consumer_group_heartbeat.py, consumer_group_describe.py (KIP-848)
share groups        share_group_heartbeat.py, share_group_describe.py, share_fetch.py,
                    share_acknowledge.py (KIP-932), describe_share_group_offsets.py,
                    alter_share_group_offsets.py, delete_share_group_offsets.py
streams groups      streams_group_heartbeat.py, streams_group_describe.py,
                    streams_group_topology_description_update.py (KIP-1071)
offsets             offset_commit.py, offset_fetch.py, offset_delete.py
transactions        init_producer_id.py, add_partitions_to_txn.py, add_offsets_to_txn.py,
                    txn_offset_commit.py, end_txn.py, write_txn_markers.py
transaction admin   describe_producers.py, describe_transactions.py, list_transactions.py
share group state   initialize_share_group_state.py, read_share_group_state.py,
                    write_share_group_state.py, delete_share_group_state.py,
                    read_share_group_state_summary.py (brokers to the share coordinator)
"""
