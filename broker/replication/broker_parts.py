"""The parts of this broker that its replicas' work needs, held once for the replica manager
and the moves (both are ``BrokerParts``, built by the server from the same parts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .replica_fetcher import ReplicaFetchers

if TYPE_CHECKING:
    from headrace.broker.cluster.cluster import Cluster
    from headrace.broker.log.topics import TopicManager


@dataclass(eq=False, repr=False)
class BrokerParts:
    """This broker's id, its topics, the cluster's view, the replica fetchers (one pool: the
    followers' fetches and the moves' copies) and the settings. A subclass sets up its own
    state in ``__post_init__``."""

    node_id: int
    topics: TopicManager
    cluster: Cluster
    fetchers: ReplicaFetchers
    config: Any
    lag_s: float = field(init=False)  # replica.lag.time.max.ms, in seconds

    def __post_init__(self) -> None:
        self.lag_s = int(self.config["replica.lag.time.max.ms"]) / 1000
