"""DescribeCluster (key 60), versions 0-2: the cluster id, its brokers and its controller
(in a cluster, as registered in ZooKeeper)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import CLUSTER, CLUSTER_NAME, OMITTED_OPERATIONS
from headrace.protocol import ErrorCode, messages

R = messages.DescribeClusterResponse


def handle(broker: Broker, header, request: messages.DescribeClusterRequest):
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        endpoint_type=request.endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        brokers=[
            R.DescribeClusterBroker(broker_id=b, host=e.host, port=e.port, rack=e.rack)
            for b, e in broker.brokers(header.session.listener).items()
        ],
        cluster_authorized_operations=(
            broker.authorizer.operations(header.session, CLUSTER, CLUSTER_NAME)
            if request.include_cluster_authorized_operations
            else OMITTED_OPERATIONS
        ),
    )
