"""``error_response``: an error response for any request, from the schemas.

Requests captured from real clients (``golden/``) get responses that encode, decode, carry
the error and name back every topic and partition (or group, resource...) the request named;
a default request of every version of every API gets one that encodes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from headrace.protocol import (
    ApiKey,
    decode_request,
    decode_request_header,
    decode_response,
    encode_response,
    error_response,
    request_class,
    valid_versions,
)
from headrace.protocol.schema import Struct

GOLDEN = Path(__file__).parent / "golden"
REQUESTS = sorted(GOLDEN.glob("*__request.bin"))
ERROR = -1  # UNKNOWN_SERVER_ERROR


def errors_in(msg) -> list[int]:
    """Every ``*error_code`` value anywhere in ``msg``."""
    found, stack = [], [msg]
    while stack:
        item = stack.pop()
        for name in item._fields:
            value = getattr(item, name)
            if name.endswith("error_code"):
                found.append(value)
            elif isinstance(value, Struct):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, Struct))
    return found


def named(msg, depth: int = 0) -> set[tuple]:
    """(topic, partition) pairs a topics/partitions message names, by any of Kafka's field
    names for them."""
    pairs = set()
    for topics_field in ("topics", "topic_data", "responses", "v3_and_below_topics",
                         "results_by_topic_v3_and_below"):
        for t in getattr(msg, topics_field, None) or []:
            topic = getattr(t, "name", None) or getattr(t, "topic", None) or ""
            topic_id = getattr(t, "topic_id", None)
            for parts_field in ("partitions", "partition_data", "partition_responses",
                                "partition_indexes", "results_by_partition"):
                for p in getattr(t, parts_field, None) or []:
                    index = p if isinstance(p, int) else next(
                        getattr(p, f) for f in ("partition_index", "partition", "index")
                        if hasattr(p, f))
                    pairs.add((topic or topic_id, index))
    return pairs


@pytest.mark.parametrize("path", REQUESTS, ids=[p.name for p in REQUESTS])
def test_golden_request_gets_an_error_response_naming_what_it_asked(path):
    frame = path.read_bytes()
    header, offset = decode_request_header(frame)
    key, version = header.api_key, header.api_version
    request = decode_request(key, version, frame, offset)
    response = error_response(key, version, request, ERROR)
    back = decode_response(key, version, b"".join(encode_response(key, version, response)))
    assert back == response
    found = errors_in(back)
    assert set(found) <= {ERROR, 0}
    if key == ApiKey.METADATA and not request.topics and version < 13:
        assert ERROR not in found  # all topics asked; no top-level error field before v13
    else:
        assert ERROR in found
    if key == ApiKey.FETCH:
        request.topics = [t for t in request.topics if t.partitions]  # not the forgotten ones
    assert named(back) == named(request)
    groups = getattr(request, "groups", None)
    if key in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE):
        assert [g.group_id for g in back.groups] == list(groups or request.group_ids)
    if key == ApiKey.DELETE_GROUPS:
        assert [g.group_id for g in back.results] == request.groups_names


def every_version() -> list[tuple[int, int]]:
    out = []
    for key in ApiKey:
        lo, hi = valid_versions(key)
        out += [(key, v) for v in range(lo, hi + 1)]
    return out


@pytest.mark.parametrize("key, version", every_version())
def test_every_version_of_every_api_has_an_error_response(key, version):
    request = request_class(key)()
    response = error_response(key, version, request, ERROR)
    back = decode_response(key, version, b"".join(encode_response(key, version, response)))
    assert back == response
