"""The cluster metadata the broker is built on: a ZooKeeper cluster (cluster.py's
``Cluster``) or a broker on its own (single_node.py's ``SingleNode``), one surface for both,
so that no code asks whether there is a cluster."""

from __future__ import annotations

from .cluster import Cluster
from .single_node import SingleNode

ClusterMetadata = Cluster | SingleNode
