"""The headrace command: settings from files and overrides, clear errors, clean stops."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from headrace.broker.tools.process import BrokerProcess


def run(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True, text=True, timeout=timeout)


def test_unknown_setting_is_a_clear_error(tmp_path):
    result = run("serve", "--data-dir", str(tmp_path), "--override", "log.flush.intervall.ms=5")
    assert result.returncode == 2
    assert "unknown setting 'log.flush.intervall.ms'" in result.stderr


def test_bad_value_and_bad_file_are_clear_errors(tmp_path):
    result = run("serve", "--data-dir", str(tmp_path), "--override", "num.partitions=many")
    assert result.returncode == 2 and "num.partitions" in result.stderr
    props = tmp_path / "server.properties"
    # Java reads a line without '=' or ':' as a key ("this") and a value after the space
    props.write_text("# comment\nnum.partitions=3\nthis line has no separator\n")
    result = run("serve", "--config", str(props))
    assert result.returncode == 2 and "unknown setting 'this'" in result.stderr
    props.write_text("broker.rack=\\u12\n")  # an escape Java refuses
    result = run("serve", "--config", str(props))
    assert result.returncode == 2 and "Invalid \\u escape" in result.stderr


def test_unusable_data_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run("serve", "--port", "0", "--data-dir", str(blocker / "data"))
    assert result.returncode == 3
    assert "data directory" in result.stderr


def test_config_file_settings_take_effect(tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource

    props = tmp_path / "server.properties"
    props.write_text("num.partitions = 3\nlog.segment.bytes: 1048576\n")
    broker = BrokerProcess(tmp_path / "data", args=["--config", str(props)]).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["num.partitions"].value == "3"
        assert configs["log.segment.bytes"].value == "1048576"
    finally:
        broker.kill()


def test_settings_lists_every_setting():
    result = run("settings")
    assert result.returncode == 0
    assert "log.flush.interval.messages=" in result.stdout
    assert "socket.request.max.bytes=104857600" in result.stdout


def test_ready_without_info_logging(tmp_path):
    """Readiness comes from the ready file, not from a log line: a quiet broker starts too."""
    from confluent_kafka.admin import AdminClient

    broker = BrokerProcess(tmp_path / "data", args=["--log-level", "WARNING"]).start()
    try:
        assert broker.port != 0
        assert not any("listening" in line for line in broker.lines)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.list_topics(timeout=30).brokers
    finally:
        assert broker.stop() == 0


def test_a_first_produce_reads_no_package_metadata_and_loads_no_zookeeper_client(
    tmp_path, monkeypatch
):
    """Most of a start is importing. A broker on its own answers a client's first produce
    without importing ``importlib.metadata`` (the ``crc32c`` package's ``__init__`` does, to
    read its own version: about 14 ms) or the ZooKeeper client. ``-X importtime``
    (PYTHONPROFILEIMPORTTIME) lists what the broker process imported."""
    from confluent_kafka import Producer

    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    log = tmp_path / "broker.log"
    broker = BrokerProcess(tmp_path / "data", log_file=log).start()
    try:
        delivered = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce("first", b"value", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None]
    finally:
        assert broker.stop() == 0
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in log.read_text().splitlines()
        if line.startswith("import time:")
    }
    assert "headrace.broker.app.server" in imported  # (the listing is there)
    assert not {"importlib.metadata", "kazoo.client"} & imported


def test_ready_file_holds_the_bound_address_until_exit(tmp_path):
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "headrace", "serve", "--port", "0",
                             "--data-dir", str(tmp_path / "data"), "--ready-file", str(ready)],
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        host, port = ready.read_text().strip().rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        socket.create_connection((host, int(port)), timeout=5).close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    assert not ready.exists()


def test_start_failure_shows_the_broker_output(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = BrokerProcess(tmp_path / "data", port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match="cannot listen"):
            broker.start()
    assert broker.proc is None


FRAMES = """
import resource, sys
from headrace.broker.app.cli import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def frames():  # eight 1 MiB request frames in flight, then freed, as a busy broker's
    return [bytearray(1 << 20) for _ in range(8)]
frames()
before = faults()
for _ in range(50):
    frames()
print(faults() - before)
"""


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc")
def test_a_broker_process_reuses_freed_frames_instead_of_faulting_in_fresh_memory():
    def page_faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FRAMES, mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    pages = 50 * 8 * (1 << 20) // 4096
    assert page_faults("default") > pages // 2  # glibc gives the frames' memory back each time
    assert page_faults("kept") < pages // 100
