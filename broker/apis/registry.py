"""The Kafka APIs this broker speaks: one module per API under ``headrace.broker.apis``, in API
key order. Each module names its key and versions (``API_KEY``, ``MIN_VERSION``,
``MAX_VERSION``) and answers with ``handle(broker, header, request)``; ApiVersions lists exactly
these. A new API is a new module and a line here."""

from __future__ import annotations

import importlib

# one module per Kafka API, in API key order; ApiVersions lists exactly these
API_MODULES = (
    "produce",  # 0
    "fetch",  # 1
    "list_offsets",  # 2
    "metadata",  # 3
    "offset_commit",  # 8
    "offset_fetch",  # 9
    "find_coordinator",  # 10
    "join_group",  # 11
    "heartbeat",  # 12
    "leave_group",  # 13
    "sync_group",  # 14
    "describe_groups",  # 15
    "list_groups",  # 16
    "sasl_handshake",  # 17
    "api_versions",  # 18
    "create_topics",  # 19
    "delete_topics",  # 20
    "delete_records",  # 21
    "init_producer_id",  # 22
    "offset_for_leader_epoch",  # 23
    "add_partitions_to_txn",  # 24
    "add_offsets_to_txn",  # 25
    "end_txn",  # 26
    "write_txn_markers",  # 27
    "txn_offset_commit",  # 28
    "describe_acls",  # 29
    "create_acls",  # 30
    "delete_acls",  # 31
    "describe_configs",  # 32
    "alter_configs",  # 33
    "alter_replica_log_dirs",  # 34
    "describe_log_dirs",  # 35
    "sasl_authenticate",  # 36
    "create_partitions",  # 37
    "create_delegation_token",  # 38
    "renew_delegation_token",  # 39
    "expire_delegation_token",  # 40
    "describe_delegation_token",  # 41
    "delete_groups",  # 42
    "elect_leaders",  # 43
    "incremental_alter_configs",  # 44
    "alter_partition_reassignments",  # 45
    "list_partition_reassignments",  # 46
    "offset_delete",  # 47
    "describe_client_quotas",  # 48
    "alter_client_quotas",  # 49
    "describe_user_scram_credentials",  # 50
    "alter_user_scram_credentials",  # 51
    "update_features",  # 57
    "describe_cluster",  # 60
    "describe_producers",  # 61
    "unregister_broker",  # 64
    "describe_transactions",  # 65
    "list_transactions",  # 66
    "consumer_group_heartbeat",  # 68
    "consumer_group_describe",  # 69
    "list_config_resources",  # 74
    "describe_topic_partitions",  # 75
    "share_group_heartbeat",  # 76
    "share_group_describe",  # 77
    "share_fetch",  # 78
    "share_acknowledge",  # 79
    "initialize_share_group_state",  # 83
    "read_share_group_state",  # 84
    "write_share_group_state",  # 85
    "delete_share_group_state",  # 86
    "read_share_group_state_summary",  # 87
    "streams_group_heartbeat",  # 88
    "streams_group_describe",  # 89
    "describe_share_group_offsets",  # 90
    "alter_share_group_offsets",  # 91
    "delete_share_group_offsets",  # 92
    "streams_group_topology_description_update",  # 93
)
APIS = {
    m.API_KEY: m for m in (importlib.import_module(f"{__package__}.{name}") for name in API_MODULES)
}

__all__ = ["API_MODULES", "APIS"]
