"""Kafka's own kafka-dump-log (``kafka.tools.DumpLogSegments``) reads Headrace's segments.

The data directory claims Kafka's file format; this proves it with Kafka's tool from the
Maven Central jars (``bench/apache_kafka.py``). A Headrace broker (``BrokerProcess``) takes
plain, compressed, idempotent and transactional records (a commit and an abort) from
confluent-kafka, with a small ``segment.bytes`` so there are rolled segments and an active
one, and ``index.interval.bytes=0`` so nearly every batch has index entries; it is stopped
cleanly. Then DumpLogSegments reads every segment's ``.log``, ``.index`` and ``.timeindex``:
it must exit 0, list every batch Headrace wrote (offsets, producer id and epoch, sequence,
codec, control flag, position) and every record at the offset the client was told, with
its value, the transaction markers as COMMIT or ABORT, and report no index mismatch; its
``--index-sanity-check`` must pass every index. Skipped with ``HEADRACE_COMPAT=0``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from headrace.broker.tools.process import BrokerProcess  # noqa: E402
from headrace.storage.examine import segment_batches, segment_paths  # noqa: E402

pytestmark = [
    pytest.mark.skipif(os.environ.get("HEADRACE_COMPAT") == "0", reason="HEADRACE_COMPAT=0"),
    pytest.mark.timeout(600),
]

confluent_kafka = pytest.importorskip("confluent_kafka")

_spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
apache_kafka = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apache_kafka)

DUMP = "kafka.tools.DumpLogSegments"
TOPIC = "dumped"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# what DumpLogSegments prints when an index disagrees with the log
INDEX_ERRORS = ("Mismatches in", "Found timestamp mismatch", "Found out of order timestamp",
                "Indexed offset", "Non-consecutive offsets", "Corrupt", "Exception")


def produce(bootstrap: str, values: list[str], **settings: object) -> dict[str, int]:
    """Produce ``values`` one flush at a time, or all at once with linger; value -> offset."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **settings})
    offsets: dict[str, int] = {}

    def on_delivery(err, msg) -> None:
        assert err is None, err
        offsets[msg.value().decode()] = msg.offset()

    for v in values:
        p.produce(TOPIC, value=v.encode(), key=v[:3].encode(), on_delivery=on_delivery)
    assert p.flush(30) == 0
    return offsets


def transaction(bootstrap: str, values: list[str], commit: bool) -> dict[str, int]:
    offsets: dict[str, int] = {}

    def on_delivery(err, msg) -> None:
        assert err is None, err
        offsets[msg.value().decode()] = msg.offset()

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"dump-{commit}", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(TOPIC, value=v.encode(), on_delivery=on_delivery)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)
    return offsets


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    data = tmp_path_factory.mktemp("dumplog") / "data"
    broker = BrokerProcess(data, {"log.index.interval.bytes": 0,
                                  "transaction.state.log.replication.factor": 1})
    broker.start()
    try:
        broker.create_topic(TOPIC, segment_bytes=1200)
        b = broker.bootstrap
        offsets: dict[str, dict[str, int]] = {}
        # plain: one batch per record (no linger, one in flight)
        offsets["plain"] = {}
        for i in range(12):
            offsets["plain"] |= produce(b, [f"plain-{i:03}"], **{"enable.idempotence": False,
                                                                  "acks": 1})
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            offsets[codec] = produce(b, [f"{codec}-{i:03}" for i in range(20)],
                                     **{"compression.type": codec, "linger.ms": 50,
                                        "enable.idempotence": False})
        offsets["idempotent"] = produce(b, [f"idem-{i:03}" for i in range(30)],
                                        **{"enable.idempotence": True, "linger.ms": 5})
        offsets["committed"] = transaction(b, [f"commit-{i:03}" for i in range(10)], True)
        offsets["aborted"] = transaction(b, [f"abort-{i:03}" for i in range(10)], False)
        offsets["tail"] = produce(b, [f"tail-{i:03}" for i in range(5)], **{"enable.idempotence": False})
    finally:
        code = broker.stop()  # the clean shutdown: a segment Kafka could open as it is
    assert code == 0 and "stopped cleanly" in broker.lines[-1], broker.lines[-20:]
    partition = data / f"{TOPIC}-0"
    return {"dir": partition, "offsets": offsets,
            "segments": [Path(p) for p in segment_paths(str(partition))]}


VERSIONS = [apache_kafka.KAFKA_VERSION, apache_kafka.KAFKA4_VERSION]


def dump(*args: str, version: str = apache_kafka.KAFKA_VERSION) -> subprocess.CompletedProcess:
    cmd = ["java", *apache_kafka.TOOL_JVM_FLAGS, *apache_kafka.log_flags(version, tool=True),
           "-cp", apache_kafka.classpath(version), DUMP, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+): (\S+)", line))


def segment_files(log: Path) -> str:
    stem = str(log)[: -len(".log")]
    return ",".join([str(log), stem + ".index", stem + ".timeindex"])


@pytest.fixture(scope="module")
def dumped(written) -> dict:
    """Per segment: the batches (header fields) and records DumpLogSegments listed."""
    assert len(written["segments"]) >= 3, "expected rolled segments and an active one"
    files = ",".join(segment_files(s) for s in written["segments"])
    res = dump("--files", files, "--deep-iteration", "--print-data-log")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    batches: list[dict[str, str]] = []
    records: list[dict[str, str]] = []
    for line in res.stdout.splitlines():
        if line.startswith("baseOffset:"):
            batches.append(fields(line))
        elif line.startswith("| offset:"):
            rec = fields(line)
            rec["batch"] = batches[-1]["baseOffset"]
            records.append(rec)
    return {"out": out, "batches": batches, "records": records}


def test_every_batch_is_listed_as_headrace_wrote_it(written, dumped):
    ours = [(b.position, b.header) for s in written["segments"]
            for b in segment_batches(str(s))]
    assert len(dumped["batches"]) == len(ours)
    for theirs, (position, h) in zip(dumped["batches"], ours, strict=True):
        assert theirs["isvalid"] == "true"
        assert int(theirs["baseOffset"]) == h.base_offset
        assert int(theirs["lastOffset"]) == h.base_offset + h.last_offset_delta
        assert int(theirs["count"]) == h.records_count
        assert int(theirs["producerId"]) == h.producer_id
        assert int(theirs["producerEpoch"]) == h.producer_epoch
        assert int(theirs["baseSequence"]) == h.base_sequence
        assert theirs["isTransactional"] == str(h.is_transactional).lower()
        assert theirs["isControl"] == str(h.is_control).lower()
        assert theirs["compresscodec"] == CODECS[h.compression]
        assert int(theirs["position"]) == position
        assert int(theirs["size"]) == h.size


def test_every_record_at_the_offset_the_client_was_told(written, dumped):
    by_offset = {int(r["offset"]): r for r in dumped["records"]}
    batch_of = {int(b["baseOffset"]): b for b in dumped["batches"]}
    for kind, offsets in written["offsets"].items():
        for value, offset in offsets.items():
            rec = by_offset[offset]
            assert rec.get("payload") == value, (kind, offset, rec)
            batch = batch_of[int(rec["batch"])]
            if kind in ("gzip", "snappy", "lz4", "zstd"):
                assert batch["compresscodec"] == kind
            if kind in ("plain", "gzip", "snappy", "lz4", "zstd", "tail"):
                assert batch["producerId"] == "-1", (kind, batch)
            else:
                assert int(batch["producerId"]) >= 0, (kind, batch)
                assert batch["isTransactional"] == str(kind in ("committed", "aborted")).lower()
    # offsets are consecutive: every offset from the first to the last is one record
    listed = sorted(by_offset)
    assert listed == list(range(listed[0], listed[-1] + 1))


def test_transaction_markers(written, dumped):
    markers = [(int(r["offset"]), r["endTxnMarker"], r["batch"]) for r in dumped["records"]
               if "endTxnMarker" in r]
    batch_of = {b["baseOffset"]: b for b in dumped["batches"]}
    assert [m[1] for m in markers] == ["COMMIT", "ABORT"]
    for (offset, _, base), kind in zip(markers, ("committed", "aborted"), strict=True):
        batch = batch_of[base]
        assert batch["isControl"] == "true" and batch["isTransactional"] == "true"
        data = written["offsets"][kind]
        assert offset > max(data.values())
        # the marker belongs to the producer that wrote the transaction's records
        by_offset = {int(r["offset"]): r for r in dumped["records"]}
        pids = {batch_of[by_offset[o]["batch"]]["producerId"] for o in data.values()}
        assert pids == {batch["producerId"]}


def test_no_index_mismatch_in_the_deep_dump(dumped):
    for bad in INDEX_ERRORS:
        assert bad not in dumped["out"], dumped["out"][-3000:]


@pytest.mark.parametrize("version", VERSIONS)
def test_no_index_mismatch(written, version):
    """The indexes alone, verified against the log by Kafka 3.9's tool and 4.0's."""
    files = ",".join(segment_files(s) for s in written["segments"])
    res = dump("--files", files, "--verify-index-only", version=version)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    for bad in INDEX_ERRORS:
        assert bad not in out, out[-3000:]
    # there were index entries to check
    assert any(os.path.getsize(str(s)[:-4] + ".index") for s in written["segments"])


@pytest.mark.parametrize("version", VERSIONS)
def test_index_sanity_check(written, version):
    indexes = [str(s)[: -len(".log")] + suffix for s in written["segments"]
               for suffix in (".index", ".timeindex")]
    res = dump("--files", ",".join(indexes), "--index-sanity-check", version=version)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert out.count("passed sanity check") == len(indexes), out[-3000:]
