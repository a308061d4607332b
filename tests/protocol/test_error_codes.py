"""``response_error_codes``: the error codes the metrics count, found by a function made per
API and version, checked against a walk of every field of every response at every version."""

from __future__ import annotations

import pytest

from headrace.protocol import messages, response_error_codes
from headrace.protocol.schema import load_message

from protocol_testgen import all_message_versions, build_message


def every_error_code(spec, version, value) -> list[int]:
    """Each non-zero int16 ``...ErrorCode`` field of ``value``, at any depth: every field looked at."""
    found = []
    for f in spec.fields:
        if version not in f.versions:
            continue
        item = getattr(value, f.attr)
        if f.struct is not None and item is not None:
            for element in item if f.is_array else [item]:
                found += every_error_code(f.struct, version, element)
        elif f.type == "int16" and not f.is_array and f.name.endswith("ErrorCode") and item:
            found.append(item)
    return found


RESPONSES = [(n, v) for n, v in all_message_versions() if n.endswith("Response")]


@pytest.mark.parametrize("name,version", RESPONSES, ids=[f"{n}-v{v}" for n, v in RESPONSES])
def test_every_error_code_of_every_response_is_found(name, version):
    cls = load_message(name)
    for seed in range(3):
        response = build_message(name, version, seed)
        expected = every_error_code(cls._spec.root, version, response)
        assert sorted(response_error_codes(cls.API_KEY, version, response)) == sorted(expected)


def test_errors_of_a_produce_response_at_each_depth():
    R = messages.ProduceResponse
    response = R(
        responses=[
            R.TopicProduceResponse(
                name="a",
                partition_responses=[
                    R.PartitionProduceResponse(index=0, error_code=87),
                    R.PartitionProduceResponse(index=1),
                ],
            ),
            R.TopicProduceResponse(name="b", partition_responses=[]),
            R.TopicProduceResponse(
                name="c", partition_responses=[R.PartitionProduceResponse(index=0, error_code=6)]
            ),
        ]
    )
    assert response_error_codes(0, 9, response) == [87, 6]
    assert response_error_codes(0, 9, R(responses=[])) == []
