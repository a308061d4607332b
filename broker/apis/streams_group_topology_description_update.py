"""StreamsGroupTopologyDescriptionUpdate (key 93), version 0: a member sends its topology's
description for the broker's description plugin (KIP-1331).

Kafka 4.4 asks a member for it (``TopologyDescriptionRequired`` in the heartbeat answer) only
when the broker has a description plugin configured, and otherwise answers this request
UNSUPPORTED_VERSION ("The broker has no streams group topology description plugin
configured."). Headrace has no such plugin: it never asks, and answers as Kafka does without
one, after Kafka's earlier checks (``streams.version`` 0: UNSUPPORTED_VERSION; READ on the
group: GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import STREAMS_VERSION
from headrace.broker.security.authorizer import GROUP, Operation
from headrace.protocol import ErrorCode, messages

R = messages.StreamsGroupTopologyDescriptionUpdateResponse
NO_PLUGIN = "The broker has no streams group topology description plugin configured."


def handle(broker: Broker, header, request: messages.StreamsGroupTopologyDescriptionUpdateRequest):
    if broker.features.level(STREAMS_VERSION) < 1:
        return R(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=None)
    if not broker.authorizer.allows(header.session, Operation.READ, GROUP, request.group_id):
        return R(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None
        )
    return R(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=NO_PLUGIN)
