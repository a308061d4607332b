"""The Kafka APIs this broker speaks, and which versions of each: ``APIS``, in API key order.
ApiVersions lists exactly this table, and dispatch refuses what is not in it. Each API is
answered by a module of ``headrace.broker.apis`` (``handle(broker, header, request)``),
imported by ``handler`` when the API is first asked for: a broker starts without importing the
ones it is not asked for (70 of 73 at a first produce: 15 ms of a 150 ms start). A new API is a
module and a line here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from headrace.protocol import ApiKey

# API key: (its module, the lowest version, the highest version)
APIS: dict[int, tuple[str, int, int]] = {
    ApiKey.PRODUCE: ("produce", 3, 13),
    ApiKey.FETCH: ("fetch", 4, 18),
    ApiKey.LIST_OFFSETS: ("list_offsets", 1, 11),
    ApiKey.METADATA: ("metadata", 0, 13),
    ApiKey.OFFSET_COMMIT: ("offset_commit", 2, 10),
    ApiKey.OFFSET_FETCH: ("offset_fetch", 1, 10),
    ApiKey.FIND_COORDINATOR: ("find_coordinator", 0, 6),
    ApiKey.JOIN_GROUP: ("join_group", 0, 9),
    ApiKey.HEARTBEAT: ("heartbeat", 0, 4),
    ApiKey.LEAVE_GROUP: ("leave_group", 0, 5),
    ApiKey.SYNC_GROUP: ("sync_group", 0, 5),
    ApiKey.DESCRIBE_GROUPS: ("describe_groups", 0, 6),
    ApiKey.LIST_GROUPS: ("list_groups", 0, 5),
    ApiKey.SASL_HANDSHAKE: ("sasl_handshake", 0, 1),
    ApiKey.API_VERSIONS: ("api_versions", 0, 5),
    ApiKey.CREATE_TOPICS: ("create_topics", 2, 7),
    ApiKey.DELETE_TOPICS: ("delete_topics", 1, 6),
    ApiKey.DELETE_RECORDS: ("delete_records", 0, 2),
    ApiKey.INIT_PRODUCER_ID: ("init_producer_id", 0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("offset_for_leader_epoch", 2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("add_partitions_to_txn", 0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: ("add_offsets_to_txn", 0, 4),
    ApiKey.END_TXN: ("end_txn", 0, 5),
    ApiKey.WRITE_TXN_MARKERS: ("write_txn_markers", 1, 2),
    ApiKey.TXN_OFFSET_COMMIT: ("txn_offset_commit", 0, 5),
    ApiKey.DESCRIBE_ACLS: ("describe_acls", 1, 3),
    ApiKey.CREATE_ACLS: ("create_acls", 1, 3),
    ApiKey.DELETE_ACLS: ("delete_acls", 1, 3),
    ApiKey.DESCRIBE_CONFIGS: ("describe_configs", 1, 4),
    ApiKey.ALTER_CONFIGS: ("alter_configs", 0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: ("alter_replica_log_dirs", 1, 2),
    ApiKey.DESCRIBE_LOG_DIRS: ("describe_log_dirs", 1, 5),
    ApiKey.SASL_AUTHENTICATE: ("sasl_authenticate", 0, 2),
    ApiKey.CREATE_PARTITIONS: ("create_partitions", 0, 3),
    ApiKey.CREATE_DELEGATION_TOKEN: ("create_delegation_token", 1, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: ("renew_delegation_token", 1, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: ("expire_delegation_token", 1, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: ("describe_delegation_token", 1, 3),
    ApiKey.DELETE_GROUPS: ("delete_groups", 0, 3),
    ApiKey.ELECT_LEADERS: ("elect_leaders", 0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("incremental_alter_configs", 0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ("alter_partition_reassignments", 0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ("list_partition_reassignments", 0, 0),
    ApiKey.OFFSET_DELETE: ("offset_delete", 0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: ("describe_client_quotas", 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: ("alter_client_quotas", 0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ("describe_user_scram_credentials", 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ("alter_user_scram_credentials", 0, 0),
    ApiKey.UPDATE_FEATURES: ("update_features", 0, 2),
    ApiKey.DESCRIBE_CLUSTER: ("describe_cluster", 0, 2),
    ApiKey.DESCRIBE_PRODUCERS: ("describe_producers", 0, 0),
    ApiKey.UNREGISTER_BROKER: ("unregister_broker", 0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: ("describe_transactions", 0, 0),
    ApiKey.LIST_TRANSACTIONS: ("list_transactions", 0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ("consumer_group_heartbeat", 0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ("consumer_group_describe", 0, 1),
    ApiKey.LIST_CONFIG_RESOURCES: ("list_config_resources", 0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: ("describe_topic_partitions", 0, 0),
    ApiKey.SHARE_GROUP_HEARTBEAT: ("share_group_heartbeat", 1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: ("share_group_describe", 1, 1),
    ApiKey.SHARE_FETCH: ("share_fetch", 1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: ("share_acknowledge", 1, 2),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: ("initialize_share_group_state", 0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: ("read_share_group_state", 0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: ("write_share_group_state", 0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: ("delete_share_group_state", 0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: ("read_share_group_state_summary", 0, 1),
    ApiKey.STREAMS_GROUP_HEARTBEAT: ("streams_group_heartbeat", 0, 1),
    ApiKey.STREAMS_GROUP_DESCRIBE: ("streams_group_describe", 0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ("describe_share_group_offsets", 0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: ("alter_share_group_offsets", 0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: ("delete_share_group_offsets", 0, 0),
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: (
        "streams_group_topology_description_update",
        0,
        0,
    ),
}

# API key -> (its module, the module's ``response_bytes``: None where its responses are small)
_loaded: dict[int, tuple[ModuleType, Callable | None]] = {}


def handler(key: int) -> tuple[ModuleType, Callable | None]:
    """The module that answers API ``key`` (one of ``APIS``), and how large its response to a
    request will be (``response_bytes(broker, request)``; None: small). Looked up once per
    module: a missing module attribute would cost an exception per request."""
    found = _loaded.get(key)
    if found is None:
        module = importlib.import_module(f"{__package__}.{APIS[key][0]}")
        found = _loaded[key] = (module, getattr(module, "response_bytes", None))
    return found


__all__ = ["APIS", "handler"]
