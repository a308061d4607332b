"""Pipelined produce on one connection: in-order offsets and responses, shared fsyncs."""

from __future__ import annotations

import asyncio
import struct

from headrace.broker.config.config import BrokerConfig
from headrace.broker.app.server import BrokerServer
from headrace.protocol import (
    ApiKey,
    RequestHeader,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_header,
    messages,
)
from headrace.protocol.records import Record, build_batch

P = messages.ProduceRequest
VERSION = 9


def produce_frame(correlation_id: int, topic: str, batch: bytes) -> bytes:
    request = P(
        transactional_id=None, acks=-1, timeout_ms=30_000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    body = encode_request_header(RequestHeader(ApiKey.PRODUCE, VERSION, correlation_id, "pipelining-test"))
    body += encode_request(ApiKey.PRODUCE, VERSION, request)
    return struct.pack(">i", len(body)) + body


async def test_five_pipelined_durable_produces_share_fsyncs_and_stay_in_order(tmp_path):
    config = BrokerConfig({
        "log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.flush.interval.messages": "1",  # flush before every ack
    })
    broker = BrokerServer(config)
    await broker.start()
    try:
        await broker.topics.create("pipelined", 1, {})
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        batches = [build_batch([Record(key=None, value=b"r%d-%d" % (i, j)) for j in range(10)]) for i in range(5)]
        flushes_before = broker.group_commit.flushes
        # all five requests leave in one write, without waiting for any response
        writer.write(b"".join(produce_frame(i + 1, "pipelined", b) for i, b in enumerate(batches)))
        responses = []
        for _ in range(5):
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            frame = await reader.readexactly(size)
            correlation_id, offset = decode_response_header(frame, True)
            responses.append((correlation_id, decode_response(ApiKey.PRODUCE, VERSION, frame, offset)))
        writer.close()

        assert [c for c, _ in responses] == [1, 2, 3, 4, 5], "responses in request order"
        parts = [r.responses[0].partition_responses[0] for _, r in responses]
        assert [p.error_code for p in parts] == [0] * 5
        assert [p.base_offset for p in parts] == [0, 10, 20, 30, 40], "offsets assigned in order"
        flushes = broker.group_commit.flushes - flushes_before
        assert 1 <= flushes < 5, f"{flushes} flushes for 5 durable produces"
        log = broker.topics.get("pipelined").partitions[0].log
        assert log.recovery_point == 50, "everything acknowledged was flushed"
    finally:
        await broker.stop()
