"""API keys, version tables and the request/response codec entry points.

``decode_request`` / ``encode_response`` are what the broker calls on every request. Each
looks up the message class for the API key (its schema file is read on first use), then the
compiled function for the version (generated on first use, see ``codec``), so the steady-state
cost is two dict lookups plus the generated code itself.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from .codec import DecodeError, EncodeError, get_decoder, get_encoder
from .schema import GeneratedClass, load_message

__all__ = [
    "ApiKey",
    "UnsupportedVersionError",
    "valid_versions",
    "is_flexible",
    "request_class",
    "response_class",
    "decode_request",
    "encode_request",
    "decode_response",
    "encode_response",
    "decode_message",
    "encode_message",
    "has_unknown_tagged_fields",
]


class ApiKey(IntEnum):
    """Kafka API keys, by Kafka's names, for every API the codec has a schema for (the broker
    answers and lists those with a module in broker/apis/)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93

    @property
    def schema_name(self) -> str:
        """CamelCase name used by the schema files:
        ``ApiKey.LIST_OFFSETS.schema_name == "ListOffsets"``."""
        return "".join(w.capitalize() for w in self.name.split("_"))


class UnsupportedVersionError(DecodeError):
    """The API key is unknown or the version is outside what its schema defines."""


_request_classes: dict[int, GeneratedClass] = {}
_response_classes: dict[int, GeneratedClass] = {}


def _class_for(api_key: int, suffix: str, table: dict) -> GeneratedClass:
    cls = table.get(api_key)
    if cls is None:
        try:
            name = ApiKey(api_key).schema_name + suffix
        except ValueError:
            raise UnsupportedVersionError(f"unknown api key {api_key}") from None
        cls = table[api_key] = load_message(name)
    return cls


def request_class(api_key: int) -> GeneratedClass:
    """The request message class for ``api_key`` (e.g. ``ProduceRequest`` for 0)."""
    return _class_for(api_key, "Request", _request_classes)


def response_class(api_key: int) -> GeneratedClass:
    """The response message class for ``api_key``."""
    return _class_for(api_key, "Response", _response_classes)


def valid_versions(api_key: int) -> tuple[int, int]:
    """(min, max) versions the schema defines for ``api_key``."""
    return request_class(api_key).VALID_VERSIONS


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of this API uses the flexible (compact, tagged) encoding.

    Follows the schema's ``flexibleVersions`` even beyond the valid range (as Kafka does for
    headers of too-new requests). Unknown keys are not flexible.
    """
    lo = _flexible_from.get(api_key)
    if lo is None:
        try:
            flex = request_class(api_key)._spec.flexible
        except UnsupportedVersionError:
            return False
        lo = _flexible_from[api_key] = flex.lo if not flex.empty else 1 << 16
    return version >= lo


_flexible_from: dict[int, int] = {}


def _check_version(cls, version: int) -> None:
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersionError(f"{cls.__name__} v{version} is not in {lo}-{hi}")


_CONVERTED = (struct.error, IndexError, ValueError, OverflowError, TypeError)


def decode_message(cls, version: int, buf, offset: int = 0, *, exact: bool = True):
    """Decode ``cls`` at ``version`` from ``buf[offset:]``; returns the message.

    With ``exact`` (the default) trailing bytes after the message are an error. Any malformed
    input raises ``DecodeError``; nothing else escapes.
    """
    dec = cls._decoders.get(version)
    if dec is None:
        _check_version(cls, version)
        dec = get_decoder(cls, version)
    if type(buf) is memoryview:
        mv = buf if buf.ndim == 1 and buf.itemsize == 1 else buf.cast("B")
    else:
        mv = memoryview(buf)
    try:
        msg, pos = dec(mv, offset)
    except DecodeError:
        raise
    except _CONVERTED as e:
        raise DecodeError(f"{cls.__name__} v{version}: malformed at or before offset: {e!r}") from e
    if exact and pos != len(mv):
        raise DecodeError(f"{cls.__name__} v{version}: {len(mv) - pos} trailing bytes")
    return msg


def encode_message(msg, version: int) -> list:
    """Encode ``msg`` (an instance of a message class) at ``version``; returns a list of chunks."""
    cls = type(msg)
    enc = cls._encoders.get(version)
    if enc is None:
        _check_version(cls, version)
        enc = get_encoder(cls, version)
    try:
        return enc(msg)
    except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as e:
        if isinstance(e, EncodeError):
            raise
        raise EncodeError(f"{cls.__name__} v{version}: {e}") from e


def decode_request(api_key: int, version: int, buf, offset: int = 0):
    """Decode a request body starting at ``offset`` (e.g. the offset after the header)."""
    cls = _request_classes.get(api_key) or request_class(api_key)
    return decode_message(cls, version, buf, offset)


def decode_response(api_key: int, version: int, buf, offset: int = 0):
    """Decode a response body starting at ``offset``."""
    cls = _response_classes.get(api_key) or response_class(api_key)
    return decode_message(cls, version, buf, offset)


def encode_request(api_key: int, version: int, msg) -> bytes:
    """Encode a request body (no header) as one bytes object."""
    _expect(msg, request_class(api_key))
    return b"".join(encode_message(msg, version))


def encode_response(api_key: int, version: int, msg) -> list:
    """Encode a response body (no header) as a list of bytes-like chunks.

    Records of at least ``RECORDS_CHUNK_MIN`` bytes appear as their own chunks, uncopied, so
    the caller can hand the list to ``transport.writelines``.
    """
    _expect(msg, _response_classes.get(api_key) or response_class(api_key))
    return encode_message(msg, version)


def _expect(msg, cls) -> None:
    if type(msg) is not cls:
        raise EncodeError(f"expected a {cls.__name__}, got {type(msg).__name__}")


def has_unknown_tagged_fields(msg) -> bool:
    """Whether decoding ``msg`` met tagged fields its schema does not define (anywhere inside)."""
    from .schema import Struct

    stack = [msg]
    while stack:
        o = stack.pop()
        if o._unknown_tags:
            return True
        for name in o._fields:
            v = getattr(o, name)
            if isinstance(v, Struct):
                stack.append(v)
            elif type(v) is list and v and isinstance(v[0], Struct):
                stack.extend(v)
    return False
