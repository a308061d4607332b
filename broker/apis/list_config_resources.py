"""ListConfigResources (key 74), versions 0-1: which resources have configs, by type
(``kafka-configs --describe`` without an entity name).

With DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED). Version 0 (once
ListClientMetricsResources) lists client-metrics subscriptions, of which this broker has none
(it runs no telemetry plugin). Version 1 lists, for each type asked (all when none is): the
topics (TOPIC), the live brokers (BROKER), the groups with group configs (GROUP); BROKER_LOGGER
and CLIENT_METRICS, which Kafka lists too, have no resources here (loggers are set in the
broker's logging configuration, not through the API). A type outside those five is
UNSUPPORTED_VERSION, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .describe_configs import BROKER, GROUP, TOPIC

R = messages.ListConfigResourcesResponse
BROKER_LOGGER, CLIENT_METRICS = 8, 16


def handle(broker: Broker, header, request: messages.ListConfigResourcesRequest):
    if not broker.authorizer.allows_cluster(header.session, Operation.DESCRIBE_CONFIGS):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if header.api_version == 0:
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, config_resources=[])
    supported = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
    types = request.resource_types or supported
    if any(t not in supported for t in types):
        return R(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION)
    found: list[tuple[str, int]] = []
    if GROUP in types:
        found += [(g, GROUP) for g in sorted(broker.groups.configs.by_group)]
    if BROKER in types:
        found += [(str(b), BROKER) for b in broker.brokers(header.session.listener)]
    if TOPIC in types:
        found += [(name, TOPIC) for name in sorted(t.name for t in broker.topics.all_topics())]
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        config_resources=[
            R.ConfigResource(resource_name=name, resource_type=kind) for name, kind in found
        ],
    )
