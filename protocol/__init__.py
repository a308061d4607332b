"""Headrace's Kafka codec: bytes in, typed messages out. No I/O.

Files, in the order to read them:

- ``api.py``: API keys, version tables and the entry points below (what the broker calls)
- ``headers.py``: request and response headers
- ``messages.py``: the message classes (``messages.FetchResponse``...), built on first use;
  ``messages.pyi``: their static types (fields, constructors), written from the schemas by
  ``stubs.py`` (``python -m headrace.protocol.stubs`` after a schema change; a test fails
  while it is not current)
- ``schema.py``: Apache Kafka's JSON schemas read into ``MessageSpec`` trees and classes
  (``schemas/``: Apache Kafka 4.4.0's schemas, as Kafka ships them, of what the kafka-python
  wheel lacks or has in older versions: KIP-848's, the share-group, streams-group and
  telemetry APIs, the coordinators' records, newer versions of a few APIs; they win over the
  wheel's)
- ``codec.py``: compiles a (message, version) into straight-line encode/decode functions
- ``errors.py``: ``ErrorCode``; ``error_response.py``: an error response for any request
- ``records.py``: record batches v2: the hot-path header walk, a builder and a decoder, over
  ``headrace.record_format`` (the byte layout, header parse, CRC-32C and varints)
- ``compression.py``: the batch compression codecs, with bounded decompression
- ``client.py``: a client's connection without I/O: request frames out, response bytes in,
  matched by correlation id (the shells that own sockets are in ``headrace.broker.client``)

Public surface:

- ``decode_request_header(frame) -> (RequestHeader, body_offset)``
- ``decode_request(api_key, version, buf, offset=0) -> message``
- ``encode_response(api_key, version, msg) -> list of bytes-like chunks``
- ``error_response(api_key, version, request, error_code)``: the response reporting
  ``error_code`` for any request (``error_response.py``)
- ``response_error_codes(api_key, version, response)``: the non-zero error codes a response
  carries, at any depth (``error_codes.py``; for metrics)
- ``encode_response_header(correlation_id, flexible)``,
  ``response_header_is_flexible(api_key, version)``
- ``encode_request`` / ``decode_response`` (clients and tests), ``encode_message`` /
  ``decode_message``
- ``valid_versions(api_key)``, ``is_flexible(api_key, version)``, ``ApiKey``, ``ErrorCode``
- ``messages``, ``records``, ``compression``: the modules above
- ``client``: ``ClientConnection`` (``request`` -> bytes, ``receive_data`` -> ``Response``
  events, or ``get_buffer`` / ``buffer_updated`` for a reader into buffers), ``request_frame``,
  ``StreamError``
- ``DecodeError`` (malformed input), ``EncodeError``, ``UnsupportedVersionError``
"""

from . import client, compression, messages, records
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
from .error_codes import response_error_codes
from .error_response import error_response
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
    "response_error_codes",
    "ApiKey",
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "RECORDS_CHUNK_MIN",
    "RequestHeader",
    "UnsupportedVersionError",
    "client",
    "compression",
    "decode_message",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decode_response_header",
    "encode_message",
    "encode_request",
    "encode_request_header",
    "encode_response",
    "encode_response_header",
    "error_response",
    "has_unknown_tagged_fields",
    "is_flexible",
    "messages",
    "records",
    "request_class",
    "response_class",
    "response_header_is_flexible",
    "valid_versions",
]
