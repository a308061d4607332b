"""Connections cost little while idle and are bounded in number: thousands of idle ones,
frames trickled a byte at a time on many, connections over max.connections or
max.connections.per.ip (closed at once), and connections.max.idle.ms; a well-behaved client is
served within a second throughout."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from boundsprobe import (
    MB,
    Watch,
    api_versions_frame,
    closed_soon,
    fds,
    open_idle,
    produce_one,
    raise_nofile,
    round_trip,
    rss,
)
from kafkawire import WireClient

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages

MANY = 3000


def start(tmp_path, **overrides) -> BrokerProcess:
    b = BrokerProcess(
        tmp_path / "data", {k.replace("_", "."): str(v) for k, v in overrides.items()}
    )
    return b.start()


def close_all(socks):
    for s in socks:
        s.close()


def test_idle_connections_cost_a_few_kb_and_accepting_stays_responsive(tmp_path):
    n = 10_000
    raise_nofile(n + 1000)
    b = start(tmp_path, max_connections=n + 100, max_connections_per_ip=n + 100)
    try:
        raise_nofile(n + 1000, pid=b.pid)
        round_trip(b.port)
        before, fds_before = rss(b.pid), fds(b.pid)
        socks = open_idle(b.port, n)
        # the broker has accepted them all once it counts their fds
        deadline = time.monotonic() + 20
        while fds(b.pid) < fds_before + n - 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fds(b.pid) >= fds_before + n - 5
        trips = [round_trip(b.port) for _ in range(5)]
        per_connection = (rss(b.pid) - before) / n
        print(
            f"{n} idle connections: {per_connection / 1024:.1f} KiB each, ApiVersions round trip "
            f"{min(trips) * 1000:.1f}-{max(trips) * 1000:.1f} ms"
        )
        assert per_connection < 8 * 1024
        assert max(trips) < 1.0
        close_all(socks)
    finally:
        b.kill()


def test_frames_trickled_a_byte_at_a_time_hold_little(tmp_path):
    # frames get their whole size at once only within half the request budget: 8 MiB here
    b = start(tmp_path, max_connections_per_ip=MANY + 100, queued_max_request_bytes=16 * MB)
    raise_nofile(2 * MANY + 1000, pid=b.pid)
    raise_nofile(2 * MANY + 1000)
    try:
        before = rss(b.pid)
        fresh = open_idle(b.port, MANY // 2)  # announce 500 KiB (under the first-request cap)
        known = open_idle(b.port, MANY // 2)  # one valid request, then announce 100 MiB
        for s in known:
            s.sendall(api_versions_frame())
        for s in known:
            s.settimeout(10)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
        streams = [(s, struct.pack(">i", 500 * 1024) + b"x" * 64) for s in fresh]
        streams += [(s, struct.pack(">i", 100 * MB) + b"x" * 64) for s in known]
        with Watch(b.pid, b.port) as watch:
            for i in range(len(streams[0][1])):  # one byte on every connection, round after round
                for s, data in streams:
                    s.send(data[i : i + 1])
                time.sleep(0.05)
        grown = watch.max_rss - before
        print(f"trickle on {MANY} connections: {watch.summary()}, grown {grown / MB:.1f} MiB")
        assert grown < MANY * 16 * 1024 + 8 * MB, f"{grown / MANY:.0f} bytes per connection"
        assert watch.slowest < 1.0, watch.summary()
        assert not any(closed_soon(s, 0.01) for s, _ in streams[:10])  # still open, still waiting
        close_all(fresh + known)
    finally:
        b.kill()


def test_the_first_request_of_a_connection_is_capped_at_512_kib(tmp_path):
    b = start(tmp_path)
    try:
        s = open_idle(b.port, 1)[0]
        s.sendall(struct.pack(">i", 600 * 1024) + b"x" * 100)
        assert closed_soon(s), "a first frame over 512 KiB closes the connection"
        with WireClient(b.port) as client:  # after one valid request, socket.request.max.bytes
            client.request(
                ApiKey.API_VERSIONS,
                3,
                messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
            )
            code = produce_one(client, "big-first", bytes(600 * 1024))
            # answered (the topic does not exist), not closed
            assert code in (
                ErrorCode.NONE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
    finally:
        b.kill()


def test_connections_over_max_connections_are_closed_at_once(tmp_path):
    b = start(tmp_path, max_connections=MANY, max_connections_per_ip=MANY + 100)
    raise_nofile(2 * MANY + 1000, pid=b.pid)
    raise_nofile(2 * MANY + 1000)
    try:
        with Watch(b.pid, b.port) as watch:
            socks = open_idle(b.port, MANY - 1)  # one left for the watch's client
            time.sleep(0.5)
        print(f"{MANY} connections: {watch.summary()}")
        assert watch.slowest < 1.0, watch.summary()
        socks += open_idle(b.port, 1)  # at the limit now
        time.sleep(0.2)
        over = open_idle(b.port, 20)
        assert all(closed_soon(s) for s in over), "over max.connections: closed"
        assert not closed_soon(socks[0], 0.05) and not closed_soon(socks[-1], 0.05)
        assert fds(b.pid) < watch.fds[0] + MANY + 10
        socks.pop().close()
        time.sleep(0.3)
        assert round_trip(b.port) < 1.0, "room again once one closed"
        refusals = [line for line in b.lines if "new connection" in line]
        assert 1 <= len(refusals) <= 2, refusals
        close_all(socks + over)
    finally:
        b.kill()


def test_max_connections_per_ip_and_its_overrides(tmp_path):
    b = start(tmp_path, max_connections_per_ip=5, max_connections_per_ip_overrides="127.0.0.2:8")
    try:
        first = open_idle(b.port, 5)
        extra = open_idle(b.port, 1)
        assert closed_soon(extra[0]), "a 6th connection from 127.0.0.1 is closed"
        other = open_idle(b.port, 8, source="127.0.0.2")
        assert not any(closed_soon(s, 0.05) for s in other), "127.0.0.2 may open 8"
        ninth = open_idle(b.port, 1, source="127.0.0.2")
        assert closed_soon(ninth[0])
        first[0].close()
        time.sleep(0.3)
        again = open_idle(b.port, 1)
        assert not closed_soon(again[0], 0.2), "room again after one closed"
        close_all(first + extra + other + ninth + again)
    finally:
        b.kill()


def test_connections_max_idle_ms_closes_idle_connections_only(tmp_path):
    b = start(tmp_path, connections_max_idle_ms=600)
    try:
        idle = open_idle(b.port, 1)[0]
        with WireClient(b.port) as busy:
            started = time.monotonic()
            while time.monotonic() - started < 2.0:
                busy.request(
                    ApiKey.API_VERSIONS,
                    3,
                    messages.ApiVersionsRequest(
                        client_software_name="t", client_software_version="1"
                    ),
                )
                time.sleep(0.2)
            assert closed_soon(idle, 0.1), "idle for 2 s: closed"
            busy.request(
                ApiKey.API_VERSIONS,
                3,
                messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
            )  # still open
    finally:
        b.kill()


def test_per_ip_overrides_are_checked_at_start_up():
    from headrace.broker.config.config import BrokerConfig, connection_overrides
    from headrace.broker.config.settings import ConfigError

    assert connection_overrides("127.0.0.1:200, broker-host:5,[::1]:7") == {
        "127.0.0.1": 200,
        "broker-host": 5,
        "::1": 7,
    }
    with pytest.raises(ConfigError):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.1"})
    with pytest.raises(ConfigError):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.1:many"})
