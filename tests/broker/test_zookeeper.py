"""ZooKeeper from Maven Central's jars, and the kazoo features the cluster will rely on:
ephemeral nodes tied to sessions, watches, compare-and-set, the election recipe, durability."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
import time

import pytest
from kazoo.exceptions import BadVersionError
from kazoo.protocol.states import EventType

from headrace.broker.tools.zookeeper_server import ZOOKEEPER_VERSION, ZooKeeperServer


def four_letter_word(connect_string: str, word: bytes) -> str:
    host, port = connect_string.split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def test_server_starts_on_loopback_and_answers(zookeeper, zk_client):
    assert zookeeper.connect_string.startswith("127.0.0.1:")
    assert four_letter_word(zookeeper.connect_string, b"ruok") == "imok"
    srvr = four_letter_word(zookeeper.connect_string, b"srvr")
    assert f"Zookeeper version: {ZOOKEEPER_VERSION}" in srvr
    assert "Mode: standalone" in srvr
    client = zk_client()
    assert client.get_children("/") == []  # the test's own chroot, empty


def test_ephemeral_node_goes_with_its_session_and_the_watch_fires(zk_client):
    owner, watcher = zk_client(), zk_client()
    owner.create("/broker", b"1", ephemeral=True)
    events: queue.Queue = queue.Queue()
    assert watcher.exists("/broker", watch=events.put) is not None
    owner.stop()  # closes the session: its ephemeral nodes go at once
    event = events.get(timeout=5)
    assert (event.type, event.path) == (EventType.DELETED, "/broker")
    assert watcher.exists("/broker") is None


OWNER_SCRIPT = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(sys.argv[1], timeout=2.0)
client.start(timeout=10)
client.create("/owner", b"x", ephemeral=True)
print("created", flush=True)
time.sleep(60)
"""


def test_ephemeral_node_goes_when_its_process_is_killed(zk_connect, zk_client):
    watcher = zk_client()
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, zk_connect], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "created"
        gone = threading.Event()
        assert watcher.exists("/owner", watch=lambda event: gone.set()) is not None
        proc.kill()  # no close: the node goes when the server expires the session
        proc.wait()
        killed = time.monotonic()
        assert gone.wait(10)
        waited = time.monotonic() - killed
    finally:
        proc.kill()
        proc.wait()
    assert watcher.exists("/owner") is None
    assert 1.0 <= waited <= 8.0  # the 2 s session timeout, on the server's 500 ms ticks


def test_set_with_a_stale_version_fails(zk_client):
    a, b = zk_client(), zk_client()
    a.create("/leader_epoch", b"0")
    _, stat = a.get("/leader_epoch")
    b.set("/leader_epoch", b"1", version=stat.version)  # b wins the race
    with pytest.raises(BadVersionError):
        a.set("/leader_epoch", b"1", version=stat.version)
    assert a.get("/leader_epoch")[0] == b"1"


def test_election_elects_one_and_the_other_takes_over(zk_client):
    clients = {name: zk_client() for name in ("a", "b")}
    elected: queue.Queue = queue.Queue()
    step_down = threading.Event()

    def contend(name: str) -> None:
        def lead() -> None:
            elected.put(name)
            step_down.wait(30)

        try:
            clients[name].Election("/controller", name).run(lead)
        except Exception:
            pass  # the first leader's session is closed under it

    threads = [threading.Thread(target=contend, args=(n,), daemon=True) for n in clients]
    for t in threads:
        t.start()
    first = elected.get(timeout=10)
    other = "b" if first == "a" else "a"
    deadline = time.monotonic() + 10
    while len(clients[other].Election("/controller").contenders()) < 2:
        assert time.monotonic() < deadline, "the second contender never queued"
        time.sleep(0.05)
    assert elected.empty()  # one leader at a time
    clients[first].stop()  # the leader's session ends
    assert elected.get(timeout=10) == other
    step_down.set()
    for t in threads:
        t.join(10)


def test_restart_keeps_persistent_nodes(tmp_path):
    from kazoo.client import KazooClient

    with ZooKeeperServer(tmp_path / "zk", tick_ms=500) as zk:
        port = zk.connect_string
        client = KazooClient(zk.connect_string)
        client.start(timeout=10)
        client.create("/cluster/id", b"abc", makepath=True)
        client.stop()
        zk.restart()  # clean stop, then start on the same port and data
        assert zk.connect_string == port
        client = KazooClient(zk.connect_string)
        client.start(timeout=10)
        client.create("/cluster/epoch", b"7")
        client.stop()
        zk.kill()  # acknowledged writes are synced: they survive SIGKILL too
        zk.start()
        client = KazooClient(zk.connect_string)
        client.start(timeout=10)
        try:
            assert client.get("/cluster/id")[0] == b"abc"
            assert client.get("/cluster/epoch")[0] == b"7"
        finally:
            client.stop()


def test_a_server_that_dies_at_start_is_an_error(tmp_path):
    zk = ZooKeeperServer(tmp_path / "zk", jvm_flags=["-Xmx1k"])
    with pytest.raises(RuntimeError, match="ZooKeeper exited"):
        zk.start(timeout=30)
    assert zk.proc is None
