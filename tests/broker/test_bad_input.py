"""Bad input gets a Kafka error code or a closed connection; the broker keeps serving and
loses nothing it acknowledged."""

from __future__ import annotations

import struct

import pytest

from headrace.protocol import ApiKey, ErrorCode, RequestHeader, encode_request_header, messages
from headrace.protocol.records import Record, build_batch

from kafkawire import WireClient

MAX_FRAME = 1 << 20
MAX_BATCH = 10_000


@pytest.fixture(scope="module")
def broker(kafka_broker_factory):
    b = kafka_broker_factory({
        "socket.request.max.bytes": MAX_FRAME,
        "message.max.bytes": MAX_BATCH,
        "auto.create.topics.enable": False,
    })
    with WireClient(b.port) as client:
        create(client, "victim")
        # acknowledged before any bad input arrives; must read back intact at the end
        assert produce(client, "victim", batch(b"precious")).error_code == ErrorCode.NONE
    yield b
    with WireClient(b.port) as client:
        records = fetch(client, "victim")
        # as sent, but for the leader epoch the broker stamps in (0: a broker on its own)
        stored = batch(b"precious", base_offset=0, leader_epoch=0)
        assert bytes(records) == bytes(stored), "acknowledged data intact"
    assert b.proc.poll() is None, "the broker is still running"
    b.kill()


def batch(value: bytes, base_offset: int = 0, size: int = 0, leader_epoch: int = -1) -> bytes:
    return build_batch([Record(key=b"k", value=value + b"." * size, timestamp=1_700_000_000_000)],
                       base_offset=base_offset, partition_leader_epoch=leader_epoch)


def create(client, name):
    C = messages.CreateTopicsRequest
    r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]))
    assert r.topics[0].error_code == ErrorCode.NONE


def produce(client, topic, records, version=9):
    P = messages.ProduceRequest
    r = client.request(ApiKey.PRODUCE, version, P(
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])],
    ))
    return r.responses[0].partition_responses[0]


def fetch(client, topic, offset=0):
    F = messages.FetchRequest
    r = client.request(ApiKey.FETCH, 12, F(
        max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
    ))
    return r.responses[0].partitions[0].records


def still_serving(broker):
    with WireClient(broker.port) as client:
        r = client.request(ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert r.error_code == ErrorCode.NONE


def header(api_key, version, correlation_id=1):
    return encode_request_header(RequestHeader(api_key, version, correlation_id, "bad"))


@pytest.mark.parametrize("size", [-1, -(1 << 31), MAX_FRAME + 1, 0x7FFFFFFF])
def test_frame_size_out_of_bounds_closes(broker, size):
    with WireClient(broker.port) as client:
        client.send_raw(struct.pack(">i", size) + b"\0" * 64)
        assert client.closed_by_peer()
    still_serving(broker)


def test_unknown_api_key_closes(broker):
    with WireClient(broker.port) as client:
        body = header(9999, 0)
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    still_serving(broker)


def test_too_new_api_versions_gets_unsupported_version_with_the_list(broker):
    with WireClient(broker.port) as client:
        body = header(ApiKey.API_VERSIONS, 99) + b"\x00garbage-from-the-future"
        client.send_raw(struct.pack(">i", len(body)) + body)
        frame = client.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 1
        from headrace.protocol import decode_response

        r = decode_response(ApiKey.API_VERSIONS, 0, frame, 4)
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
        listed = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert listed[ApiKey.API_VERSIONS] == (0, 5)
        assert listed[ApiKey.PRODUCE][0] == 0


def test_unsupported_version_of_other_apis_closes(broker):
    with WireClient(broker.port) as client:
        body = header(ApiKey.METADATA, 99) + b"\x00" * 8
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    with WireClient(broker.port) as client:  # listed for old librdkafka, refused all the same
        body = header(ApiKey.PRODUCE, 2) + b"\x00" * 8
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    still_serving(broker)


@pytest.mark.parametrize("tail", [
    b"",                                   # body missing
    b"\x00\x00",                           # truncated in the first field
    struct.pack(">i", 0x7FFFFFFF),         # array count far beyond the bytes left
    struct.pack(">i", 1000) + b"\x00\x05ab",  # count of 1000 topics, 4 bytes of them
])
def test_truncated_or_overcounted_body_closes(broker, tail):
    with WireClient(broker.port) as client:
        body = header(ApiKey.METADATA, 4) + tail
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    still_serving(broker)


def test_huge_compact_array_count_in_flexible_request_closes(broker):
    with WireClient(broker.port) as client:
        # Metadata v12: tagged header section (0), then topics as compact array: varint 2^31
        body = header(ApiKey.METADATA, 12) + b"\x00" + b"\x80\x80\x80\x80\x08"
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    still_serving(broker)


def test_crc_mismatch_is_corrupt_message(broker):
    with WireClient(broker.port) as client:
        create(client, "crc")
        data = bytearray(batch(b"flip me"))
        data[-1] ^= 0x01
        assert produce(client, "crc", bytes(data)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(client, "crc", batch(b"fine")).base_offset == 0, "nothing was appended"


def test_garbage_records_are_corrupt_message(broker):
    with WireClient(broker.port) as client:
        create(client, "garbage")
        assert produce(client, "garbage", b"\x00" * 70).error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(client, "garbage", batch(b"x")[:40]).error_code == ErrorCode.CORRUPT_MESSAGE


def test_batch_over_message_max_bytes(broker):
    with WireClient(broker.port) as client:
        create(client, "big")
        assert produce(client, "big", batch(b"x", size=MAX_BATCH)).error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(client, "big", batch(b"x", size=100)).base_offset == 0


def test_unknown_topic_without_auto_create(broker):
    with WireClient(broker.port) as client:
        assert produce(client, "nobody-made-me", batch(b"x")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        M = messages.MetadataRequest
        r = client.request(ApiKey.METADATA, 12, M(topics=[M.MetadataRequestTopic(name="nobody-made-me")], allow_auto_topic_creation=True))
        assert r.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_out_of_range(broker):
    with WireClient(broker.port) as client:
        F = messages.FetchRequest
        r = client.request(ApiKey.FETCH, 12, F(
            max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
            topics=[F.FetchTopic(topic="victim", partitions=[F.FetchPartition(partition=0, fetch_offset=1000, partition_max_bytes=1 << 20)])],
        ))
        assert r.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_invalid_topic_names_and_settings(broker):
    C = messages.CreateTopicsRequest
    with WireClient(broker.port) as client:
        r = client.request(ApiKey.CREATE_TOPICS, 7, C(topics=[
            C.CreatableTopic(name="bad/name", num_partitions=1, replication_factor=1),
            C.CreatableTopic(name="rf3", num_partitions=1, replication_factor=3),
            C.CreatableTopic(name="zero", num_partitions=0, replication_factor=1),
            C.CreatableTopic(name="cfg", num_partitions=1, replication_factor=1,
                             configs=[C.CreatableTopicConfig(name="no.such.setting", value="1")]),
            C.CreatableTopic(name="victim", num_partitions=1, replication_factor=1),
        ]))
        assert [t.error_code for t in r.topics] == [
            ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_REPLICATION_FACTOR,
            ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_CONFIG, ErrorCode.TOPIC_ALREADY_EXISTS,
        ]
