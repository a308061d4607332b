"""``headrace dump-log`` and ``headrace verify`` on data written by a real broker and real
clients, then on the same files with a byte changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

import headrace

VALUES = [b"value-%03d" % i for i in range(120)]


def headrace_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headrace", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A stopped broker's data: topic ``audit`` (1 partition, small segments, gzip batches,
    an idempotent producer's keyed records with a header) and a committed transaction."""
    path = tmp_path_factory.mktemp("data")
    with headrace.Broker(data_dir=path) as broker:
        broker.create_topic("audit", segment_bytes=2048, index_interval_bytes=200)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "compression.type": "gzip",
                "linger.ms": 0,
            }
        )
        for i, v in enumerate(VALUES):
            producer.produce("audit", v, key=b"k%d" % i, headers=[("trace", b"t")])
            if i % 5 == 4:
                producer.flush(30)
        assert producer.flush(30) == 0
        txn = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "audit-txn"}
        )
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("audit", b"in-a-transaction")
        txn.commit_transaction(30)
    return path


def copy_of(data_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(data_dir), str(target)], check=True)
    return target / "audit-0"


def batches(dump: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+): (\S+)", line)) for line in dump.splitlines() if line.startswith("baseOffset")]


def test_dump_log_shows_batches_and_records(data_dir):
    partition = data_dir / "audit-0"
    assert len(list(partition.glob("*.log"))) > 1  # several segments
    done = headrace_cli("dump-log", str(partition), "--print-data")
    assert done.returncode == 0, done.stderr
    found = batches(done.stdout)
    # offsets run on without a gap from segment to segment, all CRCs valid
    offsets = [(int(b["baseOffset"]), int(b["lastOffset"])) for b in found]
    assert offsets[0][0] == 0
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(offsets, offsets[1:]))
    assert {b["crcValid"] for b in found} == {"true"}
    data = [b for b in found if b["isTransactional"] == "false"]
    assert "gzip" in {b["compresscodec"] for b in data}  # (librdkafka sends tiny ones plain)
    assert len({b["producerId"] for b in data}) == 1 and data[0]["producerId"] != "-1"
    assert sum(int(b["count"]) for b in data) == len(VALUES)
    # the records: every value in order, with its key, sequence and header key
    records = [line for line in done.stdout.splitlines() if line.startswith("| offset")]
    payloads = [re.search(r"payload: (\S+)", r).group(1) for r in records if "payload" in r]
    assert payloads == [v.decode() for v in VALUES] + ["in-a-transaction"]
    assert "key: k7 " in records[7] and "sequence: 7 " in records[7] and "headerKeys: [trace]" in records[7]
    # the transaction: its batch and the commit marker after it
    txn_batches = [b for b in found if b["isTransactional"] == "true"]
    assert [b["isControl"] for b in txn_batches] == ["false", "true"]
    assert "endTxnMarker: COMMIT" in done.stdout
    # an index file
    index = sorted(partition.glob("*.index"))[0]
    entries = headrace_cli("dump-log", str(index)).stdout.splitlines()[1:]
    assert entries and all(re.fullmatch(r"offset: \d+ position: \d+", e) for e in entries)


def test_verify_passes_on_intact_data(data_dir):
    done = headrace_cli("verify", str(data_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.match(r"verified \d+ partition\(s\), \d+ segment\(s\), \d+ batch\(es\)", done.stdout)
    assert "no problems" in done.stdout
    shown = headrace_cli("verify", str(data_dir / "audit-0"), "--progress")
    assert shown.returncode == 0
    assert "verifying [" in shown.stderr and "100%" in shown.stderr


def test_verify_finds_a_changed_byte_in_a_record(data_dir, tmp_path):
    partition = copy_of(data_dir, tmp_path)
    segment = sorted(partition.glob("*.log"))[1]  # one in the middle of the log
    found = batches(headrace_cli("dump-log", str(segment)).stdout)
    victim = found[2]
    position, size = int(victim["position"]), int(victim["size"])
    with open(segment, "r+b") as f:  # a byte in the records, past the 61-byte header
        f.seek(position + size - 3)
        byte = f.read(1)
        f.seek(position + size - 3)
        f.write(bytes([byte[0] ^ 0x40]))
    done = headrace_cli("verify", str(partition.parent))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        f"first bad position: {segment}: position {position}: CRC-32C does not match"
    )
    dumped = batches(headrace_cli("dump-log", str(segment)).stdout)
    assert [b["crcValid"] for b in dumped].count("false") == 1
    assert dumped[2]["crcValid"] == "false"


def test_verify_finds_a_broken_header_and_a_bad_index_entry(data_dir, tmp_path):
    partition = copy_of(data_dir, tmp_path)
    first = sorted(partition.glob("*.log"))[0]
    found = batches(headrace_cli("dump-log", str(first)).stdout)
    position = int(found[1]["position"])
    with open(first, "r+b") as f:  # batchLength of the second batch: past the file's end
        f.seek(position + 8)
        f.write((1 << 30).to_bytes(4, "big"))
    done = headrace_cli("verify", str(partition))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == f"first bad position: {first}: position {position}: bad batch header"
    dump = headrace_cli("dump-log", str(first))
    assert dump.returncode == 1 and f"Found a corrupt batch at position {position}" in dump.stdout

    partition = copy_of(data_dir, tmp_path / "again")
    index = sorted(partition.glob("*.index"))[0]
    assert os.path.getsize(index) >= 16
    with open(index, "r+b") as f:  # the second entry's position: no batch starts there
        f.seek(8 + 4)
        f.write((3).to_bytes(4, "big"))
    done = headrace_cli("verify", str(partition))
    assert done.returncode == 1
    first_line = done.stdout.splitlines()[0]
    assert first_line.startswith(f"first bad position: {index}: position 8: offset ")
    assert first_line.endswith("-> position 3, where the segment has no batch")


def test_verify_refuses_a_directory_without_segments(tmp_path):
    done = headrace_cli("verify", str(tmp_path))
    assert done.returncode == 1
    assert "holds no segments" in done.stderr
