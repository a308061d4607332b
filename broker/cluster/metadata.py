"""The cluster metadata the broker is built on: a ZooKeeper cluster (cluster.py's
``Cluster``) or a broker on its own (single_node.py's ``SingleNode``), one surface for both,
so that no code asks whether there is a cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # (cluster.py is imported where a cluster is built: it imports kazoo)
    from .cluster import Cluster
    from .single_node import SingleNode

ClusterMetadata: TypeAlias = "Cluster | SingleNode"


class ClusterError(Exception):
    """Cluster mode cannot start (ZooKeeper unreachable, broker id taken...)."""
