"""What the API modules use of the broker: the ``broker`` every ``handle(broker, header,
request)`` gets, named and typed here (app/server.py's ``BrokerServer`` is one; the dispatcher
checks that it is).

A module reaches the broker's parts only through these names: the settings, the topic table,
the cluster metadata (cluster/metadata.py: a ZooKeeper cluster or a broker on its own) the
coordinators and the producer ids, security (the authorizer, quotas,
SCRAM users and the documents that hold ACLs and quotas), the request path's counters, and
the resources the read and write paths share.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from headrace.broker.cluster.documents import Document
    from headrace.broker.cluster.features import Features
    from headrace.broker.cluster.metadata import ClusterMetadata
    from headrace.broker.cluster.znodes import Endpoint
    from headrace.broker.config.config import BrokerConfig
    from headrace.broker.config.listeners import Listener
    from headrace.broker.coordinator.group.group_coordinator import GroupCoordinator
    from headrace.broker.coordinator.share.persister import SharePersister
    from headrace.broker.coordinator.share.share_coordinator import ShareCoordinator
    from headrace.broker.coordinator.txn.producer_ids import ProducerIdManager
    from headrace.broker.coordinator.txn.transaction_coordinator import TransactionCoordinator
    from headrace.broker.log.topics import TopicManager
    from headrace.broker.registry.registry import SchemaRegistry
    from headrace.broker.security.authorizer import Authorizer
    from headrace.broker.security.delegation_tokens import DelegationTokens
    from headrace.broker.security.quotas import ClientQuotas
    from headrace.broker.security.scram_credentials import ScramCredentials
    from headrace.broker.share.share_partition_manager import SharePartitionManager
    from headrace.pipeline import Appender, ByteBudget


class Counters(Protocol):
    """The request path's counters the produce and fetch paths add to (app/metrics.py)."""

    bytes_in: dict[str, int]  # topic -> record batch bytes appended
    bytes_out: dict[str, int]  # topic -> record bytes sent by Fetch
    fetch_reads: list[int]  # reads done on the event loop, in a read thread


class Broker(Protocol):
    config: BrokerConfig
    node_id: int
    cluster_id: str
    data_dir: Path
    topics: TopicManager
    cluster: ClusterMetadata
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    share_coordinator: ShareCoordinator
    share_state: SharePersister  # the share coordinator's client
    producer_ids: ProducerIdManager
    authorizer: Authorizer
    quotas: ClientQuotas
    scram_credentials: ScramCredentials
    acl_document: Document
    quota_document: Document
    group_config_document: Document
    delegation_tokens: DelegationTokens
    delegation_token_document: Document
    features: Features
    schema_registry: SchemaRegistry | None  # None: the registry is off on this broker
    appender: Appender
    read_pool: ThreadPoolExecutor
    fetch_budget: ByteBudget
    shares: SharePartitionManager

    @property
    def metrics(self) -> Counters: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self, listener: Listener | None = None) -> dict[int, Endpoint]: ...

    def advertised(self, listener: Listener | None = None) -> tuple[str, int]: ...
