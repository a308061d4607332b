"""The broker-to-broker client against a real broker process: pipelined requests matched by
correlation id, at most N in flight, reconnection after the remote was killed and restarted,
and the bounds (a response frame over the limit, a peer that never answers)."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from headrace.broker.client.broker_client import BrokerClient, NetworkError, RequestTimedOut
from headrace.protocol import ApiKey, messages

M = messages.MetadataRequest
NODE = 1


def metadata_for(name: str):
    return M(topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)


async def test_many_pipelined_requests_get_their_own_responses(broker):
    client = BrokerClient(lambda node: ("127.0.0.1", broker.port) if node == NODE else None,
                          max_in_flight=8)
    peak = 0

    async def sample():
        nonlocal peak
        while True:
            peak = max(peak, client.in_flight(NODE))
            await asyncio.sleep(0)

    async def one(i: int):
        return await client.send(NODE, ApiKey.METADATA, 9, metadata_for(f"t{i}"), 10)

    sampler = asyncio.ensure_future(sample())
    try:
        responses = await asyncio.gather(*(one(i) for i in range(300)))
        assert [r.topics[0].name for r in responses] == [f"t{i}" for i in range(300)]
        sampler.cancel()
        assert 1 < peak <= 8, f"{peak} requests in flight at once"
        assert len(client._connections) == 1
        with pytest.raises(NetworkError, match="no address"):
            await client.send(2, ApiKey.METADATA, 9, metadata_for("x"), 5)
    finally:
        await client.close()
    with pytest.raises(NetworkError, match="closed"):
        await client.send(NODE, ApiKey.METADATA, 9, metadata_for("x"), 5)


async def test_reconnects_after_the_remote_is_killed_and_restarted(broker):
    client = BrokerClient(lambda node: ("127.0.0.1", broker.port), connect_timeout=2)
    try:
        C = messages.CreateTopicsRequest
        r = await client.send(NODE, ApiKey.CREATE_TOPICS, 5, C(topics=[C.CreatableTopic(
            name="w", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10_000), 10)
        assert r.topics[0].error_code == 0
        waiting = asyncio.ensure_future(
            client.send(NODE, ApiKey.FETCH, 11, long_poll_fetch(), 30))
        await asyncio.sleep(0.3)
        assert client.in_flight(NODE) == 1
        broker.kill()
        with pytest.raises(NetworkError):  # the request waiting on the connection fails
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(NetworkError):  # nothing listens
            await client.send(NODE, ApiKey.METADATA, 9, metadata_for("b"), 5)
        await asyncio.to_thread(broker.restart)
        r = await client.send(NODE, ApiKey.METADATA, 9, metadata_for("c"), 10)
        assert r.topics[0].name == "c"
    finally:
        await client.close()


def long_poll_fetch():
    """A Fetch of the empty topic ``w`` the broker holds for 20 s: a request left in flight."""
    F = messages.FetchRequest
    return F(replica_id=-1, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20,
             isolation_level=0, topics=[F.FetchTopic(topic="w", partitions=[F.FetchPartition(
                 partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


async def test_a_response_frame_over_the_limit_is_refused(broker):
    # an ApiVersions response is a few hundred bytes, a Heartbeat's a dozen
    client = BrokerClient(lambda node: ("127.0.0.1", broker.port), max_response_bytes=100)
    H = messages.HeartbeatRequest
    try:
        with pytest.raises(NetworkError, match="response frame of .* bytes"):
            await client.send(NODE, ApiKey.API_VERSIONS, 0, messages.ApiVersionsRequest(), 10)
        r = await client.send(NODE, ApiKey.HEARTBEAT, 0, H(group_id="g", generation_id=1,
                                                            member_id="m"), 10)
        assert r.error_code != 0  # an answer (the group is unknown), on a new connection
    finally:
        await client.close()


@pytest.fixture
async def rogue_peer():
    """A peer speaking just enough TCP: it reads requests and either answers each with a frame
    length of 2 GiB - 1 (and nothing after) or never answers."""
    mode = {"answer": b""}
    writers = []

    async def serve(reader, writer):
        writers.append(writer)
        while await reader.read(65536):
            if mode["answer"]:
                writer.write(mode["answer"])

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], mode
    for w in writers:
        w.close()
    server.close()


async def test_a_huge_frame_length_fails_at_once_and_a_silent_peer_times_out(rogue_peer):
    port, mode = rogue_peer
    client = BrokerClient(lambda node: ("127.0.0.1", port))
    try:
        mode["answer"] = struct.pack(">i", 2**31 - 1)
        started = time.monotonic()
        with pytest.raises(NetworkError, match="2147483647 bytes"):
            await client.send(NODE, ApiKey.METADATA, 9, metadata_for("a"), 10)
        assert time.monotonic() - started < 2

        mode["answer"] = b""
        started = time.monotonic()
        with pytest.raises(RequestTimedOut):
            await client.send(NODE, ApiKey.METADATA, 9, metadata_for("a"), 0.5)
        assert 0.4 < time.monotonic() - started < 3
        assert client.in_flight(NODE) == 0
    finally:
        await client.close()


async def test_each_channel_has_connections_of_its_own_so_a_long_poll_holds_up_no_other(broker):
    """A broker answers a connection's requests in the order they came: a request behind a
    long poll on the same connection waits for it; on another channel's connection it does
    not. Closing the client closes its channels."""
    client = BrokerClient(lambda node: ("127.0.0.1", broker.port))
    fetcher, markers = client.channel("fetcher"), client.channel("markers")
    assert (fetcher.client_id, markers.client_id) == ("headrace-broker-fetcher", "headrace-broker-markers")
    C = messages.CreateTopicsRequest
    r = await markers.send(NODE, ApiKey.CREATE_TOPICS, 5, C(topics=[C.CreatableTopic(
        name="w", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10_000), 10)
    assert r.topics[0].error_code == 0
    waiting = asyncio.ensure_future(fetcher.send(NODE, ApiKey.FETCH, 11, long_poll_fetch(), 30))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    answered = await markers.send(NODE, ApiKey.METADATA, 9, metadata_for("w"), 10)
    assert answered.topics[0].error_code == 0 and time.monotonic() - started < 5
    assert (fetcher.in_flight(NODE), markers.in_flight(NODE)) == (1, 0)
    with pytest.raises(RequestTimedOut):  # the same connection: behind the long poll
        await fetcher.send(NODE, ApiKey.METADATA, 9, metadata_for("w"), 2)
    with pytest.raises(NetworkError):  # (a timed-out request closes its connection)
        await asyncio.wait_for(waiting, 5)
    waiting = asyncio.ensure_future(fetcher.send(NODE, ApiKey.FETCH, 11, long_poll_fetch(), 30))
    await asyncio.sleep(0.3)
    await client.close()
    with pytest.raises(NetworkError):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(NetworkError, match="closed"):
        await markers.send(NODE, ApiKey.METADATA, 9, metadata_for("w"), 5)


async def test_a_response_to_no_request_fails_the_connection_at_once(rogue_peer):
    port, mode = rogue_peer
    client = BrokerClient(lambda node: ("127.0.0.1", port))
    try:
        mode["answer"] = struct.pack(">ii", 5, 12345) + b"\x00"
        started = time.monotonic()
        with pytest.raises(NetworkError, match="correlation id 12345, which no request is waiting for"):
            await client.send(NODE, ApiKey.METADATA, 9, metadata_for("a"), 10)
        assert time.monotonic() - started < 2 and client.in_flight(NODE) == 0
    finally:
        await client.close()
