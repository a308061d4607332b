"""Request and response headers.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string (int16 length, -1 null). Header v2 (used by flexible request versions) adds a
tagged-field section after client_id; client_id stays a non-compact string.

Response header v0: correlation_id int32. Header v1 (flexible response versions) adds an
empty tagged-field section. ApiVersions responses always use header v0, so a client that does
not yet know the broker's versions can read the reply.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from headrace.record_format import CorruptRecordError, read_uvarint

from .api import ApiKey, is_flexible
from .codec import DecodeError

__all__ = [
    "RequestHeader",
    "decode_request_header",
    "encode_request_header",
    "encode_response_header",
    "response_header_is_flexible",
    "request_header_is_flexible",
]

_HDR = struct.Struct(">hhih")
_CORR = struct.Struct(">i")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header_is_flexible(api_key: int, api_version: int) -> bool:
    """True when the request uses header v2 (the request version is flexible)."""
    return is_flexible(api_key, api_version)


def response_header_is_flexible(api_key: int, api_version: int) -> bool:
    """True when the response uses header v1; never for ApiVersions."""
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version)


def decode_request_header(frame, offset: int = 0) -> tuple[RequestHeader, int]:
    """Decode the header at the start of a request frame (without its length prefix).

    Returns the header and the offset where the body starts. An unknown api key still decodes
    (as header v1) so the caller can answer or close the connection.
    """
    try:
        api_key, api_version, correlation_id, n = _HDR.unpack_from(frame, offset)
    except struct.error:
        raise DecodeError(f"request header truncated ({len(frame) - offset} bytes)") from None
    pos = offset + 10
    if n < 0:
        client_id = None
    else:
        end = pos + n
        if end > len(frame):
            raise DecodeError(f"client_id length {n} exceeds the frame")
        try:
            client_id = str(frame[pos:end], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"client_id is not UTF-8: {e}") from None
        pos = end
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if is_flexible(api_key, api_version):
        if pos < len(frame) and frame[pos] == 0:  # the usual empty tagged section
            pos += 1
        else:
            pos = _skip_tagged_fields(frame, pos)
    return header, pos


def _skip_tagged_fields(buf, pos: int) -> int:
    try:
        count, pos = read_uvarint(buf, pos)
        if count > len(buf) - pos:
            raise DecodeError(f"header tagged field count {count} exceeds the frame")
        for _ in range(count):
            _, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            pos += size
            if pos > len(buf):
                raise DecodeError("header tagged field runs past the frame")
    except CorruptRecordError as e:  # a bad varint
        raise DecodeError(f"header tagged fields: {e}") from None
    return pos


def encode_request_header(header: RequestHeader) -> bytes:
    """Encode a request header, v2 when the request version is flexible, else v1."""
    if header.client_id is None:
        out = _HDR.pack(header.api_key, header.api_version, header.correlation_id, -1)
    else:
        cid = header.client_id.encode("utf-8")
        out = _HDR.pack(header.api_key, header.api_version, header.correlation_id, len(cid)) + cid
    if is_flexible(header.api_key, header.api_version):
        out += b"\x00"
    return out


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v1 (with an empty tagged section) when ``flexible``, else v0."""
    b = _CORR.pack(correlation_id)
    return b + b"\x00" if flexible else b


def decode_response_header(frame, flexible: bool, offset: int = 0) -> tuple[int, int]:
    """(correlation_id, body offset) of a response frame."""
    try:
        (correlation_id,) = _CORR.unpack_from(frame, offset)
    except struct.error:
        raise DecodeError("response header truncated") from None
    pos = offset + 4
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    return correlation_id, pos
