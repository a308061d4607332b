"""Record Kafka protocol frames between real clients and Apache Kafka (golden files).

A small asyncio TCP proxy on 127.0.0.1 forwards each client connection to an Apache Kafka
broker and records the frames in both directions. Apache Kafka listens on its own port but
advertises the proxy's port (``advertised.listeners``), so clients that follow Metadata or
FindCoordinator answers always come back through the proxy.

For every (client, API, version) the first complete exchange is saved, without the 4-byte
length prefix, as::

    tests/protocol/golden/{client}__{ApiName}__v{version}__request.bin
    tests/protocol/golden/{client}__{ApiName}__v{version}__response.bin

(a request that never gets an answer, e.g. Produce with acks=0, is saved alone; for Fetch the
first exchange whose answer carries records wins over earlier empty answers), and
``MANIFEST.json`` beside them lists per client the client ids seen and every API version used.

Redo the whole capture (starts Apache Kafka 3.9 from Maven Central, builds compat/java, runs
every client through the proxy, replaces the golden files; a couple of minutes)::

    python compat/capture.py all
    python compat/capture.py all --clients librdkafka,aiokafka   # only some

Clients: ``java39`` and ``java40`` (compat/java with kafka-clients 3.9.x / 4.0.x: admin,
idempotent zstd producer with headers, group consumer, transactions; java40 runs against
Apache Kafka 4.0 and twice, with the classic and the KIP-848 consumer group protocol; every
other client runs against Apache Kafka 3.9), ``librdkafka``
(confluent-kafka: the same scenario, lz4), ``kafka-python`` (gzip producer, group consumer,
admin create/delete topic), ``aiokafka`` (producer, group consumer).

A standalone proxy, e.g. to record any other client or to compare with another broker::

    python compat/capture.py proxy --listen 19092 --upstream 19192 \\
        --client myclient --out /tmp/frames
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "protocol" / "golden"
JAVA_DIR = ROOT / "compat" / "java"
HOST = "127.0.0.1"

API_NAMES = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica",
    "UpdateMetadata", "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups",
    "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "WriteTxnMarkers", "TxnOffsetCommit", "DescribeAcls", "CreateAcls", "DeleteAcls",
    "DescribeConfigs", "AlterConfigs", "AlterReplicaLogDirs", "DescribeLogDirs",
    "SaslAuthenticate", "CreatePartitions", "CreateDelegationToken", "RenewDelegationToken",
    "ExpireDelegationToken", "DescribeDelegationToken", "DeleteGroups", "ElectLeaders",
    "IncrementalAlterConfigs", "AlterPartitionReassignments", "ListPartitionReassignments",
    "OffsetDelete", "DescribeClientQuotas", "AlterClientQuotas", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum",
    "AlterPartition", "UpdateFeatures", "Envelope", "FetchSnapshot", "DescribeCluster",
    "DescribeProducers", "BrokerRegistration", "BrokerHeartbeat", "UnregisterBroker",
    "DescribeTransactions", "ListTransactions", "AllocateProducerIds", "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe", "ControllerRegistration", "GetTelemetrySubscriptions",
    "PushTelemetry", "AssignReplicasToDirs", "ListClientMetricsResources",
    "DescribeTopicPartitions", "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch",
    "ShareAcknowledge", "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter",
    "InitializeShareGroupState", "ReadShareGroupState", "WriteShareGroupState",
    "DeleteShareGroupState", "ReadShareGroupStateSummary", "StreamsGroupHeartbeat",
    "StreamsGroupDescribe", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
]


def api_name(key: int) -> str:
    return API_NAMES[key] if 0 <= key < len(API_NAMES) else f"Api{key}"


FETCH = 1


def has_record_batch(frame: bytes) -> bool:
    """Whether a frame seems to hold a v2 record batch (baseOffset, batchLength that fits,
    partitionLeaderEpoch, magic 2). Used only to prefer Fetch answers that carry records."""
    for i in range(len(frame) - 61 + 1):
        if frame[i + 16] != 2:
            continue
        (length,) = struct.unpack_from(">i", frame, i + 8)
        if 49 <= length and i + 12 + length <= len(frame):
            return True
    return False


def golden_name(client: str, key: int, version: int, direction: str) -> str:
    return f"{client}__{api_name(key)}__v{version}__{direction}.bin"


# --------------------------------------------------------------------------------------------
# The recording proxy


class Recorder:
    """Forwards 127.0.0.1:listen to 127.0.0.1:upstream and records frames per client label.

    ``client`` labels connections accepted from now on; ``None`` forwards without recording.
    Runs its own event loop in a background thread (``start``/``stop``) or inside a caller's
    loop (``serve``).
    """

    def __init__(self, listen: int, upstream: int, out_dir: Path, client: str | None = None):
        self.listen = listen
        self.upstream = upstream
        self.out_dir = Path(out_dir)
        self.client = client
        self.saved: set[tuple[str, int, int, str]] = set()
        self._fetch_data: set[tuple[str, int, int]] = set()
        # client -> api key -> version -> exchanges seen
        self.seen: dict[str, dict[int, dict[int, int]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(int)))
        self.client_ids: dict[str, set[str]] = defaultdict(set)
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[asyncio.Task] = set()
        self._ready = threading.Event()

    # -- saving
    def _save(self, client: str, key: int, version: int, direction: str, frame: bytes) -> None:
        ident = (client, key, version, direction)
        if ident in self.saved:
            return
        self.saved.add(ident)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / golden_name(client, key, version, direction)).write_bytes(frame)

    def _exchange(self, client: str, key: int, version: int, request: bytes,
                  response: bytes | None) -> None:
        self.seen[client][key][version] += 1
        if (client, key, version, "request") in self.saved:
            # a complete exchange beats a request left unanswered (connection closed first);
            # for Fetch, an answer that carries records beats an empty long-poll answer
            unanswered = (client, key, version, "response") not in self.saved
            better_fetch = (key == FETCH and response is not None
                            and (client, key, version) not in self._fetch_data
                            and has_record_batch(response))
            if response is None or not (unanswered or better_fetch):
                return
            self.saved.discard((client, key, version, "request"))
            self.saved.discard((client, key, version, "response"))
        if key == FETCH and response is not None and has_record_batch(response):
            self._fetch_data.add((client, key, version))
        # the first complete exchange gives a matching request/response pair
        self._save(client, key, version, "request", request)
        if response is not None:
            self._save(client, key, version, "response", response)

    # -- connections
    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter):
        client = self.client
        try:
            b_reader, b_writer = await asyncio.open_connection(HOST, self.upstream)
        except OSError:
            c_writer.close()
            return
        pending: dict[int, tuple[int, int, bytes]] = {}

        def on_request(frame: bytes) -> None:
            if len(frame) < 8:
                return
            key, version, corr = struct.unpack_from(">hhi", frame)
            if len(frame) >= 10:
                (n,) = struct.unpack_from(">h", frame, 8)
                if n >= 0 and client:
                    self.client_ids[client].add(frame[10:10 + n].decode("utf-8", "replace"))
            pending[corr] = (key, version, frame)

        def on_response(frame: bytes) -> None:
            if len(frame) < 4:
                return
            (corr,) = struct.unpack_from(">i", frame)
            req = pending.pop(corr, None)
            if req is not None and client:
                self._exchange(client, req[0], req[1], req[2], frame)

        up = asyncio.ensure_future(self._pump(c_reader, b_writer, on_request))
        down = asyncio.ensure_future(self._pump(b_reader, c_writer, on_response))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            for w in (b_writer, c_writer):
                w.close()
            if client:
                for key, version, frame in pending.values():
                    self._exchange(client, key, version, frame, None)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_frame) -> None:
        # a proxy, not a client: it splits both directions into frames and sends no request of
        # its own, so headrace.protocol.client (a client's requests and their answers) does not fit
        buf = bytearray()
        while True:
            try:
                data = await reader.read(1 << 16)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            writer.write(data)
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if size < 0 or len(buf) < 4 + size:
                    break
                on_frame(bytes(buf[4:4 + size]))
                del buf[:4 + size]
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                return

    def _track(self, reader, writer):
        task = asyncio.ensure_future(self._handle(reader, writer))
        self._conns.add(task)
        task.add_done_callback(self._conns.discard)

    async def serve(self) -> None:
        self._server = await asyncio.start_server(self._track, HOST, self.listen)
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    # -- background thread
    def start(self) -> "Recorder":
        def run():
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.serve())
            except asyncio.CancelledError:
                pass
            finally:
                self._loop.close()
        self._thread = threading.Thread(target=run, name="kafka-recorder", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("recording proxy did not start")
        return self

    def idle(self, timeout: float = 10.0) -> None:
        """Wait until every proxied connection has closed (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self._conns and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown():
            for t in list(self._conns):
                t.cancel()
            if self._server:
                self._server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()
        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        if self._thread:
            self._thread.join(10)

    def summary(self) -> dict[str, dict]:
        out = {}
        for client, apis in sorted(self.seen.items()):
            out[client] = {
                "client_ids": sorted(self.client_ids.get(client, ())),
                "api_versions": {api_name(k): sorted(v) for k, v in sorted(apis.items())},
                "exchanges": {api_name(k): sum(v.values()) for k, v in sorted(apis.items())},
            }
        return out


# --------------------------------------------------------------------------------------------
# Client drivers (each produces only a few tiny records)


def drive_java(bootstrap: str, label: str, profile: str | None,
               group_protocols: tuple[str, ...] = ("classic",)) -> None:
    version_dir = _java_build(profile)
    cp = (version_dir / "classpath.txt").read_text().strip()
    for protocol in group_protocols:
        name = label if protocol == "classic" else f"{label}-{protocol}"
        cmd = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", f"{version_dir / 'classes'}:{cp}", "dev.headrace.compat.Scenario",
               bootstrap, name, protocol]
        subprocess.run(cmd, check=True, timeout=300)


def _java_build(profile: str | None) -> Path:
    before = set(JAVA_DIR.glob("target/kafka-clients-*"))
    cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "package"] + ([f"-P{profile}"] if profile else [])
    print(f"[capture] building compat/java: {' '.join(cmd)}", flush=True)
    res = subprocess.run(cmd, cwd=JAVA_DIR, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"Maven build failed:\n{res.stdout}\n{res.stderr}")
    # the folder name carries the kafka-clients version the profile selected
    wanted = "kafka-clients-4." if profile == "kafka40" else "kafka-clients-3."
    dirs = [d for d in JAVA_DIR.glob("target/kafka-clients-*") if d.name.startswith(wanted)]
    if not dirs:
        raise RuntimeError(f"no build output for {profile or 'default'} (had {before})")
    return max(dirs, key=lambda d: (d / "classpath.txt").stat().st_mtime)


def drive_librdkafka(bootstrap: str, label: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic,
                                       OffsetSpec)
    from confluent_kafka import TopicCollection

    topic, group, txn = f"{label}-topic", f"{label}-group", f"{label}-txn"
    conf = {"bootstrap.servers": bootstrap, "log_level": 3}
    admin = AdminClient(conf)

    def wait(futures):
        for f in (futures.values() if isinstance(futures, dict) else [futures]):
            f.result(timeout=30)

    wait(admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]))
    wait(admin.describe_topics(TopicCollection([topic])))
    wait(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]))
    wait(admin.create_partitions([NewPartitions(topic, 4)]))
    wait(admin.describe_cluster())

    producer = Producer({**conf, "enable.idempotence": True, "compression.type": "lz4",
                         "linger.ms": 5})
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i,
                         headers=[("h", f"x{i}".encode())])
    if producer.flush(30):
        raise RuntimeError("librdkafka producer did not deliver")

    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    if got < 3:
        raise RuntimeError(f"librdkafka consumer got {got} records")
    consumer.commit(asynchronous=False)
    offsets = consumer.committed(consumer.assignment(), timeout=30)

    tp = Producer({**conf, "transactional.id": txn, "compression.type": "lz4"})
    tp.init_transactions(30)
    tp.begin_transaction()
    tp.produce(topic, value=b"committed", partition=0)
    tp.send_offsets_to_transaction([o for o in offsets if o.offset >= 0],
                                   consumer.consumer_group_metadata(), 30)
    tp.commit_transaction(30)
    tp.begin_transaction()
    tp.produce(topic, value=b"aborted", partition=1)
    tp.flush(30)
    tp.abort_transaction(30)
    tp.flush(5)
    consumer.close()

    wait(admin.list_consumer_groups())
    wait(admin.describe_consumer_groups([group]))
    wait(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]))
    wait(admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}))
    wait(admin.delete_consumer_groups([group]))
    wait(admin.delete_topics([topic]))
    del tp, producer, admin


def drive_kafka_python(bootstrap: str, label: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    topic, group = f"{label}-topic", f"{label}-group"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"{label}-admin")
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(3):
        producer.send(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i,
                      headers=[("h", f"x{i}".encode())]).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=15000)
    got = 0
    for _ in consumer:
        got += 1
        if got == 3:
            break
    if got < 3:
        raise RuntimeError(f"kafka-python consumer got {got} records")
    consumer.commit()
    consumer.close()
    admin.describe_topics([topic])
    admin.describe_cluster()
    admin.list_groups()
    admin.describe_groups([group])
    admin.list_group_offsets(group)
    admin.delete_topics([topic])
    admin.close()


def drive_aiokafka(bootstrap: str, label: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, group = f"{label}-topic", f"{label}-group"

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, value=f"v{i}".encode(), key=f"k{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = 0
            deadline = time.monotonic() + 30
            while got < 3 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batch.values())
            if got < 3:
                raise RuntimeError(f"aiokafka consumer got {got} records")
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(run())


# Apache Kafka version each client is captured against (default: the 3.9 line). The 4.0 client
# meets a 4.0 broker, so its frames show the versions 4.x pairs negotiate and KIP-848.
BROKER_VERSION = {"java40": "4.0.2"}
DEFAULT_BROKER = "3.9.2"

DRIVERS = {
    "java39": lambda b, l: drive_java(b, l, None),
    "java40": lambda b, l: drive_java(b, l, "kafka40", ("classic", "consumer")),
    "librdkafka": drive_librdkafka,
    "kafka-python": drive_kafka_python,
    "aiokafka": drive_aiokafka,
}


# --------------------------------------------------------------------------------------------
# Whole capture


def _load_apache_kafka():
    spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that are free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def capture_all(clients: list[str], out_dir: Path, proxy_port: int = 0,
                kafka_port: int = 0) -> int:
    """Run ``clients`` one after another through a recorder in front of Apache Kafka (one
    broker per Kafka version needed). Ports default to free ephemeral ones, so nothing else on
    the machine wanders into the capture."""
    failures: list[str] = []
    summary: dict[str, dict] = {}
    by_version: dict[str, list[str]] = {}
    for name in clients:
        by_version.setdefault(BROKER_VERSION.get(name, DEFAULT_BROKER), []).append(name)
    for version, names in by_version.items():
        summary.update(_capture_with(version, names, out_dir, proxy_port, kafka_port, failures))
    _write_manifest(out_dir, summary)
    for name in clients:
        files = sorted(out_dir.glob(f"{name}__*.bin"))
        size = sum(f.stat().st_size for f in files)
        print(f"[capture] {name}: {len(files)} files, {size} bytes", flush=True)
    if failures:
        print(f"[capture] failed clients: {', '.join(failures)}", flush=True)
    return 1 if failures else 0


def _capture_with(version: str, clients: list[str], out_dir: Path, proxy_port: int,
                  kafka_port: int, failures: list[str]) -> dict[str, dict]:
    ak = _load_apache_kafka()
    ports = free_ports(4)
    proxy_port = proxy_port or ports[0]
    kafka_port = kafka_port or ports[1]
    data_dir = Path(tempfile.mkdtemp(prefix="headrace-capture-"))
    kafka = ak.ApacheKafka(data_dir, port=kafka_port, controller_port=ports[2],
                           internal_port=ports[3], advertised_port=proxy_port, version=version,
                           offsets_partitions=1, txn_partitions=1)
    recorder = Recorder(proxy_port, kafka_port, out_dir)
    try:
        recorder.start()
        kafka.start()
        for name in clients:
            for old in out_dir.glob(f"{name}__*.bin"):
                old.unlink()
            print(f"[capture] {name} against Apache Kafka {version}", flush=True)
            recorder.client = name
            t0 = time.monotonic()
            try:
                DRIVERS[name](f"{HOST}:{proxy_port}", name)
            except Exception as exc:  # keep going: other clients still give useful frames
                failures.append(name)
                print(f"[capture] {name} FAILED: {exc!r}", flush=True)
            recorder.idle(15)
            recorder.client = None
            print(f"[capture] {name} done in {time.monotonic() - t0:.1f}s", flush=True)
    finally:
        recorder.stop()
        kafka.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    summary = recorder.summary()
    for entry in summary.values():
        entry["broker"] = f"Apache Kafka {version}"
    return summary


def _write_manifest(out_dir: Path, summary: dict) -> None:
    path = out_dir / "MANIFEST.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest.update(summary)
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="record Kafka frames between clients and a broker")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="start Apache Kafka and capture every client")
    a.add_argument("--clients", default=",".join(DRIVERS))
    a.add_argument("--out", type=Path, default=GOLDEN)
    a.add_argument("--proxy-port", type=int, default=0, help="default: a free port")
    a.add_argument("--kafka-port", type=int, default=0, help="default: a free port")
    p = sub.add_parser("proxy", help="run the recording proxy alone until interrupted")
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--client", required=True)
    p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    if args.cmd == "all":
        clients = [c for c in args.clients.split(",") if c]
        unknown = [c for c in clients if c not in DRIVERS]
        if unknown:
            ap.error(f"unknown clients {unknown}; known: {list(DRIVERS)}")
        return capture_all(clients, args.out, args.proxy_port, args.kafka_port)

    recorder = Recorder(args.listen, args.upstream, args.out, client=args.client)
    try:
        asyncio.run(recorder.serve())
    except KeyboardInterrupt:
        pass
    _write_manifest(args.out, recorder.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
