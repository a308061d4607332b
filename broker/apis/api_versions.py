"""ApiVersions (key 18), versions 0-5: which APIs and versions this broker speaks, and
(v3+) the feature versions it supports and the cluster has finalized (cluster/features.py).
From v5 (KIP-1242) a client names the cluster id and node id it means to reach; when this
broker is not that one it gets REBOOTSTRAP_REQUIRED (its metadata is stale), as from Kafka.

The list is built from ``registry.APIS``. Produce is listed from version 0, as Apache Kafka 4
does, because older librdkafka turns compression off when v0 is missing; v0-2 requests are
still refused. A client that asks with a newer ApiVersions version than ours gets
UNSUPPORTED_VERSION in the v0 layout, with the list, and retries with a version we know.
As in Kafka, a feature supported from level 0 is left out below v4 (older clients refuse a
minimum of 0), and a feature finalized at level 0 (off) is not listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SUPPORTED
from headrace.protocol import ApiKey, ErrorCode, messages

from .registry import APIS

# versions we list below the first one we accept (see the module docstring)
_LISTED_MIN: dict[int, int] = {ApiKey.PRODUCE: 0}


def _api_keys():
    ApiVersion = messages.ApiVersionsResponse.ApiVersion
    return [
        ApiVersion(api_key=key, min_version=_LISTED_MIN.get(key, lowest), max_version=highest)
        for key, (_, lowest, highest) in sorted(APIS.items())
    ]


R = messages.ApiVersionsResponse


def handle(broker: Broker, header, request: messages.ApiVersionsRequest):
    if (
        header.api_version >= 5
        and request.cluster_id is not None
        and (request.cluster_id != broker.cluster_id or request.node_id != broker.node_id)
    ):
        return R(error_code=ErrorCode.REBOOTSTRAP_REQUIRED, api_keys=[])
    features = broker.features
    return R(
        error_code=ErrorCode.NONE,
        api_keys=_api_keys(),
        supported_features=[
            R.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in sorted(SUPPORTED.items())
            if lo > 0 or header.api_version >= 4
        ],
        finalized_features_epoch=features.epoch,
        finalized_features=[
            R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(features.levels.items())
        ],
    )


def unsupported():
    return R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())
