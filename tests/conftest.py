"""Shared fixtures: a real Headrace broker process on 127.0.0.1; one ZooKeeper per session."""

from __future__ import annotations

import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from headrace.broker.tools.process import BrokerProcess

# a project of its own, run by tests/broker/test_pytest_plugin.py as its users would run it
collect_ignore = ["plugin_example"]


@pytest.fixture(autouse=True)
def kafka_python_clients_closed():
    """Every kafka-python client a test starts is closed by its end (each has a thread named
    ``kafka-io-<client id>``): one left open goes on reconnecting after its broker stops,
    drawing on the global ``random``, which Hypothesis then reports in whatever property test
    runs next."""
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.name.startswith("kafka-io-")]
    for t in left:
        t.join(5)
    assert not [t.name for t in left if t.is_alive()], "kafka-python clients left open"


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(
        overrides: dict[str, str] | None = None, data_dir: Path | None = None
    ) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


@pytest.fixture
def small_disk(tmp_path, request):
    """A tmpfs of ``request.param`` (default 2m) mounted for the test: a disk that fills up.
    Needs root; skipped otherwise."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    size = getattr(request, "param", "2m")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One standalone ZooKeeper for the whole test session, from Maven Central's jars. Needs
    Java and Maven: without them the tests that use it fail, naming what to install.
    tickTime is 500 ms, so sessions may ask for timeouts from 1 s to 10 s."""
    from headrace.broker.tools.zookeeper_server import ZooKeeperServer

    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_ms=500)
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zookeeper):
    """A connect string chrooted at a fresh ``/t-<uuid>``: each test sees only its own nodes."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError, NotEmptyError

    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(zookeeper.connect_string)
    admin.start(timeout=10)
    admin.ensure_path(chroot)
    yield zookeeper.connect_string + chroot
    try:
        admin.delete(chroot, recursive=True)
    except (NoNodeError, NotEmptyError):
        pass  # an ephemeral node of a session that has not expired yet; the server's to clean
    admin.stop()
    admin.close()


@pytest.fixture
def zk_client(zk_connect):
    """Make started kazoo clients on the test's chroot (session timeout 2 s by default); they
    are stopped at the end of the test."""
    from kazoo.client import KazooClient

    made = []

    def make(timeout: float = 2.0):
        client = KazooClient(zk_connect, timeout=timeout)
        client.start(timeout=10)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()
