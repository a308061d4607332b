"""UpdateFeatures (key 57), versions 0-2: change the cluster's finalized feature levels
(``kafka-features upgrade / downgrade / disable``).

Answered by the controller (another broker answers NOT_CONTROLLER, and the admin client asks
the controller it finds in the metadata), with ALTER on the cluster. The levels of one
request are checked and written together or not at all (cluster/features.py); the one
outcome is the top-level error, which versions 0-1 repeat for each feature (and, as in
Kafka, list the features only when it is NONE). ``validate_only`` (v1+) checks and writes
nothing. Version 0's ``allow_downgrade`` is a safe downgrade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SAFE_DOWNGRADE, UPGRADE, FeatureUpdateError
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.UpdateFeaturesResponse


async def handle(broker: Broker, header, request: messages.UpdateFeaturesRequest):
    v0 = header.api_version == 0
    updates = {
        u.feature: (
            u.max_version_level,
            (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if v0 else u.upgrade_type,
        )
        for u in request.feature_updates
    }
    code: int = ErrorCode.NONE
    message = None
    if not broker.authorizer.allows_cluster(header.session, Operation.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    elif not broker.cluster.controller.active:
        code, message = ErrorCode.NOT_CONTROLLER, "this broker is not the controller"
    else:
        live = {b: e.features for b, e in broker.cluster.brokers.items()}
        try:
            await broker.features.update(updates, live, not v0 and request.validate_only)
        except FeatureUpdateError as e:
            code, message = e.code, e.message
    return R(
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        results=[
            R.UpdatableFeatureResult(feature=name, error_code=code, error_message=message)
            for name in updates
        ]
        if code == ErrorCode.NONE
        else [],
    )
