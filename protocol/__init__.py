"""Headrace's Kafka codec: bytes in, typed messages out. No I/O.

Public surface:

- ``decode_request_header(frame) -> (RequestHeader, body_offset)``
- ``decode_request(api_key, version, buf, offset=0) -> message``
- ``encode_response(api_key, version, msg) -> list of bytes-like chunks``
- ``encode_response_header(correlation_id, flexible)``, ``response_header_is_flexible(api_key, version)``
- ``encode_request`` / ``decode_response`` (clients and tests), ``encode_message`` / ``decode_message``
- ``valid_versions(api_key)``, ``is_flexible(api_key, version)``, ``ApiKey``, ``ErrorCode``
- ``messages``: the message classes (``messages.FetchResponse``...), built on first use
- ``records``: record batch v2 views and builders
- ``DecodeError`` (malformed input), ``EncodeError``, ``UnsupportedVersionError``
"""

from . import messages, records
from .api import (
    ApiKey,
    UnsupportedVersionError,
    decode_message,
    decode_request,
    decode_response,
    encode_message,
    encode_request,
    encode_response,
    has_unknown_tagged_fields,
    is_flexible,
    request_class,
    response_class,
    valid_versions,
)
from .codec import RECORDS_CHUNK_MIN, DecodeError, EncodeError
from .errors import ErrorCode
from .headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    response_header_is_flexible,
)

__all__ = [
    "ApiKey", "DecodeError", "EncodeError", "ErrorCode", "RECORDS_CHUNK_MIN", "RequestHeader",
    "UnsupportedVersionError", "decode_message", "decode_request", "decode_request_header",
    "decode_response", "decode_response_header", "encode_message", "encode_request",
    "encode_request_header", "encode_response", "encode_response_header",
    "has_unknown_tagged_fields", "is_flexible", "messages", "records", "request_class", "response_class",
    "response_header_is_flexible", "valid_versions",
]
