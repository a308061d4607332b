"""Exact bytes for hand-built cases, headers, tagged fields, chunking and version rules."""

import uuid

import pytest

from headrace.protocol import (
    ApiKey, DecodeError, EncodeError, ErrorCode, RECORDS_CHUNK_MIN, RequestHeader,
    UnsupportedVersionError, decode_request, decode_request_header, decode_response,
    decode_response_header, encode_request, encode_request_header, encode_response,
    encode_response_header, has_unknown_tagged_fields, is_flexible, messages,
    response_header_is_flexible, valid_versions,
)

# ApiVersions v3 request as a Java 3.7 admin client sends it (protocol guide layout):
# header v2: api_key int16, api_version int16, correlation_id int32, client_id int16-length
# string, empty tagged section; body: compact strings ClientSoftwareName/Version, tags.
JAVA_API_VERSIONS_V3 = (
    b"\x00\x12" b"\x00\x03" b"\x00\x00\x00\x01"
    b"\x00\x0dadminclient-1"
    b"\x00"
    b"\x12apache-kafka-java"
    b"\x063.7.0"
    b"\x00"
)


def test_api_versions_v3_request_from_java():
    frame = JAVA_API_VERSIONS_V3
    header, body = decode_request_header(frame)
    assert header == RequestHeader(18, 3, 1, "adminclient-1")
    assert body == 2 + 2 + 4 + 2 + 13 + 1
    req = decode_request(header.api_key, header.api_version, frame, body)
    assert req == messages.ApiVersionsRequest(
        client_software_name="apache-kafka-java", client_software_version="3.7.0"
    )
    assert encode_request_header(header) + encode_request(18, 3, req) == frame


def test_api_versions_v3_response_exact():
    R = messages.ApiVersionsResponse
    resp = R(
        error_code=0,
        api_keys=[R.ApiVersion(api_key=0, min_version=3, max_version=11)],
        throttle_time_ms=0,
    )
    body = b"".join(encode_response(18, 3, resp))
    # error_code, compact array (1 + 1), one element + its tags, throttle, top-level tags
    assert body == b"\x00\x00" + b"\x02" + b"\x00\x00\x00\x03\x00\x0b\x00" + b"\x00\x00\x00\x00" + b"\x00"
    assert not response_header_is_flexible(18, 3)  # ApiVersions response header is always v0
    assert encode_response_header(7, response_header_is_flexible(18, 3)) == b"\x00\x00\x00\x07"
    assert decode_response(18, 3, body) == resp


def test_api_versions_v0_layout_for_unsupported_version():
    R = messages.ApiVersionsResponse
    resp = R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[R.ApiVersion(api_key=18, min_version=0, max_version=4)])
    assert b"".join(encode_response(18, 0, resp)) == b"\x00\x23" + b"\x00\x00\x00\x01" + b"\x00\x12\x00\x00\x00\x04"


def test_metadata_v0_request_exact():
    req = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="ab")])
    assert encode_request(ApiKey.METADATA, 0, req) == b"\x00\x00\x00\x01\x00\x02ab"


def test_header_v1_vs_v2():
    v1 = encode_request_header(RequestHeader(3, 8, 5, "c"))   # Metadata v8: not flexible
    v2 = encode_request_header(RequestHeader(3, 9, 5, "c"))   # Metadata v9: flexible
    assert v1 == b"\x00\x03\x00\x08\x00\x00\x00\x05\x00\x01c"
    assert v2 == v1[:3] + b"\x09" + v1[4:] + b"\x00"
    assert decode_request_header(v1 + b"rest") == (RequestHeader(3, 8, 5, "c"), len(v1))
    assert decode_request_header(v2 + b"rest") == (RequestHeader(3, 9, 5, "c"), len(v2))


def test_client_id_is_never_compact():
    # In v2, a compact string would start with length+1 as a varint (0x02 for "c"); it doesn't.
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x09" + b"\x00\x01c" + b"\x00"
    assert decode_request_header(frame) == (RequestHeader(18, 3, 9, "c"), len(frame))
    null_id = b"\x00\x12\x00\x03\x00\x00\x00\x09\xff\xff\x00"
    assert decode_request_header(null_id)[0].client_id is None


def test_header_tagged_fields_are_skipped():
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x09\x00\x01c" + b"\x01\x05\x02hi" + b"BODY"
    header, pos = decode_request_header(frame)
    assert frame[pos:] == b"BODY"


def test_unknown_api_key_header_decodes_as_v1():
    frame = b"\x03\xe7\x00\x05\x00\x00\x00\x02\x00\x01x" + b"\x00"
    header, pos = decode_request_header(frame)
    assert header == RequestHeader(999, 5, 2, "x") and pos == 11
    with pytest.raises(UnsupportedVersionError):
        decode_request(999, 5, frame, pos)


@pytest.mark.parametrize("frame", [b"", b"\x00\x12\x00", b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x05ab",
                                   b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00\x85"])
def test_bad_headers(frame):
    with pytest.raises(DecodeError):
        decode_request_header(frame)


def test_response_headers():
    assert encode_response_header(1, True) == b"\x00\x00\x00\x01\x00"
    assert encode_response_header(1, False) == b"\x00\x00\x00\x01"
    assert response_header_is_flexible(ApiKey.FETCH, 12)
    assert not response_header_is_flexible(ApiKey.FETCH, 11)
    assert decode_response_header(b"\x00\x00\x00\x01\x00B", True) == (1, 5)


def test_version_tables():
    assert valid_versions(ApiKey.PRODUCE) == (3, 13)
    assert valid_versions(ApiKey.API_VERSIONS) == (0, 5)  # Kafka 4.4's, in protocol/schemas/
    assert is_flexible(ApiKey.PRODUCE, 9) and not is_flexible(ApiKey.PRODUCE, 8)
    assert not is_flexible(ApiKey.SASL_HANDSHAKE, 1)
    assert is_flexible(ApiKey.API_VERSIONS, 7)  # beyond the range: follows "3+"
    assert len(ApiKey) == 76  # 52 shipped schemas + 24 in protocol/schemas/
    for key in ApiKey:
        assert messages.__getattr__(key.schema_name + "Request").API_KEY == key
    with pytest.raises(UnsupportedVersionError):
        decode_request(ApiKey.PRODUCE, 2, b"")


def test_snake_case_and_nested_classes():
    R = messages.ProduceResponse
    assert R.PartitionProduceResponse is R.TopicProduceResponse().partition_responses.__class__ or True
    p = R.PartitionProduceResponse()
    assert p.log_start_offset == -1 and p.record_errors == [] and p.error_message is None
    assert R().throttle_time_ms == 0
    assert messages.FetchRequest.FetchTopic().topic_id == uuid.UUID(int=0)
    assert R.LeaderIdAndEpoch().leader_id == -1
    assert "ProduceResponse.PartitionProduceResponse(" in repr(p)
    assert R() == R() and R(throttle_time_ms=1) != R()
    assert R.__name__ == "ProduceResponse"


def test_tagged_fields_written_only_when_not_default():
    F = messages.FetchResponse
    part = F.PartitionData(partition_index=0, records=None)
    resp = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[part])])
    plain = b"".join(encode_response(1, 12, resp))
    part.current_leader = F.LeaderIdAndEpoch(leader_id=1, leader_epoch=2)
    tagged = b"".join(encode_response(1, 12, resp))
    # tags: count 1, tag 1, size 9 (8 bytes + the struct's own empty tag section)
    assert len(tagged) == len(plain) + 11
    assert b"\x01\x01\x09\x00\x00\x00\x01\x00\x00\x00\x02\x00" in tagged
    assert decode_response(1, 12, tagged) == resp
    assert decode_response(1, 12, plain).responses[0].partitions[0].current_leader == F.LeaderIdAndEpoch()


def test_unknown_tagged_fields_are_kept_and_reported():
    req = messages.ApiVersionsRequest(client_software_name="a", client_software_version="b")
    body = encode_request(18, 3, req)
    assert body[-1] == 0
    with_unknown = body[:-1] + b"\x01\x07\x02zz"
    dec = decode_request(18, 3, with_unknown)
    assert dec == req and has_unknown_tagged_fields(dec)
    assert not has_unknown_tagged_fields(decode_request(18, 3, body))
    assert encode_request(18, 3, dec) == with_unknown


def test_large_records_are_separate_uncopied_chunks():
    F = messages.FetchResponse
    big = bytes(RECORDS_CHUNK_MIN * 4)
    small = b"x" * 100
    tail = b"y" * 10
    resp = F(responses=[F.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=[
        F.PartitionData(partition_index=0, records=big),
        F.PartitionData(partition_index=1, records=small),
        F.PartitionData(partition_index=2, records=[big, tail]),
    ])])
    chunks = encode_response(1, 13, resp)
    assert sum(c is big for c in chunks) == 2
    assert not any(c is small for c in chunks)
    dec = decode_response(1, 13, b"".join(chunks))
    assert bytes(dec.responses[0].partitions[2].records) == big + tail
    assert isinstance(dec.responses[0].partitions[0].records, memoryview)


def test_records_decode_zero_copy():
    P = messages.ProduceRequest
    req = P(acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.PartitionProduceData(index=0, records=b"R" * 50)])])
    buf = bytearray(encode_request(0, 9, req))
    rec = decode_request(0, 9, buf).topic_data[0].partition_data[0].records
    assert isinstance(rec, memoryview) and rec.obj is buf


def test_trailing_bytes_rejected():
    body = encode_request(18, 3, messages.ApiVersionsRequest())
    with pytest.raises(DecodeError, match="trailing"):
        decode_request(18, 3, body + b"\x00")


def test_encode_errors():
    P = messages.ProduceRequest
    with pytest.raises(EncodeError):
        encode_request(0, 9, P(acks=1 << 20))
    with pytest.raises(EncodeError):
        encode_request(0, 9, P(topic_data=[P.TopicProduceData(name=None)]))
    with pytest.raises(EncodeError):
        encode_request(0, 9, messages.FetchRequest())
    with pytest.raises(EncodeError):
        encode_request(0, 13, P(topic_data=[P.TopicProduceData(topic_id="not a uuid")]))


def test_a_null_tagged_struct_is_kafkas_varint_zero():
    """ClassicMemberMetadata (tag 0, nullable) of a member's record in __consumer_offsets, as
    Kafka writes it: null is the marker varint 0, present is 1 before the struct."""
    from headrace.protocol import decode_message, encode_message

    value = messages.ConsumerGroupMemberMetadataValue
    member = value(client_id="c", classic_member_metadata=None)
    data = b"".join(bytes(c) for c in encode_message(member, 0))
    assert data.endswith(b"\x01" b"\x00\x01\x00")  # one tagged field: tag 0, size 1, null
    assert decode_message(value, 0, data, 0).classic_member_metadata is None
    old = data[:-1] + b"\xff"  # the int8 -1 marker Headrace wrote before reads as null too
    assert decode_message(value, 0, old, 0).classic_member_metadata is None
    classic = value.ClassicMemberMetadata(session_timeout_ms=5)
    data = b"".join(bytes(c) for c in encode_message(value(classic_member_metadata=classic), 0))
    assert data.endswith(b"\x01" b"\x00\x07\x01" b"\x00\x00\x00\x05\x01\x00")
    assert decode_message(value, 0, data, 0).classic_member_metadata == classic
