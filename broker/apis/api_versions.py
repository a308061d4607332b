"""ApiVersions (key 18), versions 0-4: which APIs and versions this broker speaks.

The list is built from ``registry.APIS``. Produce is listed from version 0, as Apache Kafka 4
does, because older librdkafka turns compression off when v0 is missing; v0-2 requests are
still refused. A client that asks with a newer ApiVersions version than ours gets
UNSUPPORTED_VERSION in the v0 layout, with the list, and retries with a version we know.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.protocol import ApiKey, ErrorCode, messages

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION, MAX_VERSION = 0, 4

# versions we list below the first one we accept (see the module docstring)
_LISTED_MIN = {ApiKey.PRODUCE: 0}


def _api_keys():
    from .registry import APIS

    ApiVersion = messages.ApiVersionsResponse.ApiVersion
    return [
        ApiVersion(
            api_key=key,
            min_version=_LISTED_MIN.get(key, api.MIN_VERSION),
            max_version=api.MAX_VERSION,
        )
        for key, api in sorted(APIS.items())
    ]


def handle(broker: Broker, header, request: messages.ApiVersionsRequest):
    return messages.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys())


def unsupported():
    return messages.ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys()
    )
