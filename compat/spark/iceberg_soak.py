"""The soak of topics as Iceberg tables in a cluster: a topic with a registered Avro value
schema, a million records produced with acks=all while the leader of a partition is killed
(SIGKILL) twenty times, becomes a table that PySpark reads with exactly the records a
read_committed consumer reads::

    pip install -e '.[iceberg,test]' 'pyspark>=4.0,<4.1'
    python compat/spark/iceberg_soak.py                          # 1,000,000 records, 20 kills
    python compat/spark/iceberg_soak.py --records 50000 --kills 3   # a short one

Exit status 0 only when everything below holds; a summary with the figures is printed last.

How it works. One ZooKeeper (``ZooKeeperServer``, Maven Central's jars) and three brokers
(``BrokerProcess``, one process each, ``zookeeper.session.timeout.ms`` 4 s) that share one
Iceberg catalog and warehouse (a SQLite file and a folder under ``<dir>/iceberg``, so
iceberg.py's Spark session reads them as it reads a single broker's) and each serve the schema
registry. The topic ``clicks`` has ``--partitions`` partitions (4), replication factor 3,
``min.insync.replicas`` 2 and ``iceberg.mode=value_schema_id_prefix``; its ``clicks-value``
subject gets an Avro schema, and every value is written by confluent-kafka's
``AvroSerializer`` (Confluent's wire format: byte 0, the schema id, the Avro body).

The load: one idempotent producer (acks=all) sends ``--records`` records, ids 0 to N-1 (the key
is the id, the value ``{id, kind: "load", page, amount}``), and notes the (partition, offset)
of every acknowledgement. The load is cut into ``kills + 1`` steps: once the records of step i
are acknowledged, the current leader of partition ``i % partitions`` is killed, and restarted
``--down`` seconds later (its registration waits out its old ZooKeeper session, so each kill is
a failover: the controller elects a new leader from the ISR once the 4 s session expires); the
producer may run one step ahead of the kills, never more, so every kill lands in the load and
the load spans every kill. Before the next kill the soak waits until all three brokers are back
in every partition's ISR (else the next kill could leave a partition without a leader from its
ISR). Half-way, a transactional producer writes 100 records (``kind: "aborted"``) over the
partitions, the next kill lands while that transaction is open, and it aborts once the killed
broker is back; the same for 100 records (``kind: "committed"``) across the kill after, which
commit: so each transaction spans a leader change (the new leader's last stable offset must
hold at the open transaction, and its records must be dropped, or kept, by the marker the
coordinator writes to the new leader). Every 5 s a line shows the records sent and
acknowledged, the kills done, the table's rows (its current snapshot's ``total-records``) and
the largest ``headrace_iceberg_lag_seconds`` the brokers' ``/metrics`` showed so far.

The check: once the load is done, the soak waits until the table's
``headrace.next-offset.<partition>`` reach the partitions' end offsets, reads the topic with a
read_committed consumer (``iceberg.read_committed``) and the table with Spark
(``iceberg.session``: Iceberg's Spark runtime, the JDBC catalog on the same SQLite file), and
compares: every broker's lag back to 0, the same (partition, offset) set, the same decoded
values (id, kind, page, amount), no (partition, offset) twice in the table, every acknowledged
record in it with the value it was sent with, no record of the aborted transaction, the
committed transaction's 100, and no id twice in the topic (the producer's retries across leader
changes must not have written a record twice). The brokers' data is kept in ``--dir`` (a new
temporary folder by default) when the run fails.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from iceberg import read_committed, session, verdict  # noqa: E402  (compat/spark/iceberg.py)

TOPIC = "clicks"
TXN_RECORDS = 100
SESSION_MS = 4000
SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "dev.headrace.soak",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def value_of(i: int, kind: str = "load") -> dict:
    return {"id": i, "kind": kind, "page": f"/p/{i % 997}", "amount": i / 100}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """ZooKeeper and three brokers sharing one catalog and warehouse under ``root``."""

    def __init__(self, root: Path, interval_ms: int) -> None:
        from headrace.broker.tools.process import BrokerProcess
        from headrace.broker.tools.zookeeper_server import ZooKeeperServer

        self.root = root
        self.zookeeper = ZooKeeperServer(root / "zookeeper", tick_ms=500)
        self.metrics_ports = [free_port() for _ in range(3)]
        self.registry_ports = [free_port() for _ in range(3)]  # (kept across restarts)
        ice = root / "iceberg"
        self.brokers = [
            BrokerProcess(
                root / f"node{node}",
                {
                    "node.id": node,
                    "zookeeper.session.timeout.ms": SESSION_MS,
                    "iceberg.enabled": "true",
                    "iceberg.commit.interval.ms": interval_ms,
                    "iceberg.catalog.uri": f"sqlite:///{ice / 'catalog.db'}",
                    "iceberg.catalog.warehouse": str(ice / "warehouse"),
                    "schema.registry.listeners": f"http://127.0.0.1:{registry}",
                    "metrics.port": metrics,
                },
                args=["--workers", "1"],
                log_file=root / f"node{node}.log",
            )
            for node, metrics, registry in zip((1, 2, 3), self.metrics_ports, self.registry_ports)
        ]

    def start(self) -> None:
        self.zookeeper.start()
        for b in self.brokers:
            b.overrides["zookeeper.connect"] = self.zookeeper.connect_string
            b.start()

    def stop(self) -> None:
        for b in self.brokers:
            b.kill()
        self.zookeeper.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def registry_urls(self) -> str:
        """Every broker's registry (the client tries the next when one is down)."""
        return ",".join(f"http://127.0.0.1:{port}" for port in self.registry_ports)

    def partitions(self) -> dict:
        """partition -> its metadata (leader, replicas, isrs), from a live broker."""
        from confluent_kafka.admin import AdminClient

        live = ",".join(b.bootstrap for b in self.brokers if b.alive)
        admin = AdminClient({"bootstrap.servers": live})
        return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions

    def largest_lag(self) -> float:
        """The largest ``headrace_iceberg_lag_seconds`` of the topic at the live brokers."""
        lag = 0.0
        for b, port in zip(self.brokers, self.metrics_ports):
            if not b.alive:
                continue
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                text = urllib.request.urlopen(url, timeout=2).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith(f'headrace_iceberg_lag_seconds{{topic="{TOPIC}"}}'):
                    lag = max(lag, float(line.rsplit(" ", 1)[1]))
        return lag


class Load:
    """The producer thread, its acknowledgements, and the steps it may run ahead to."""

    def __init__(self, cluster: Cluster, records: int, serialize) -> None:
        self.cluster = cluster
        self.records = records
        self.serialize = serialize
        self.acked: dict[tuple[int, int], int] = {}  # (partition, offset) -> id
        self.failed = 0
        self.sent = 0
        self.kills = 0  # done so far
        self.allowed = 0  # the producer sends ids below this
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.serialization import MessageField, SerializationContext

        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 300000,
                "queue.buffering.max.messages": 200000,
                "log_level": 3,  # (not the disconnects every kill brings, at level 6)
            }
        )
        ctx = SerializationContext(TOPIC, MessageField.VALUE)

        def delivered(err, msg) -> None:
            if err is None:
                self.acked[(msg.partition(), msg.offset())] = int(msg.key())
            else:
                self.failed += 1

        i = 0
        while i < self.records:
            if i >= self.allowed:
                producer.poll(0.05)
                continue
            value = self.serialize(value_of(i), ctx)
            try:
                producer.produce(TOPIC, key=b"%d" % i, value=value, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
                continue
            i += 1
            self.sent = i
            if i % 1000 == 0:
                producer.poll(0)
        while producer.flush(1) > 0:
            pass
        self.done.set()


class Transactions:
    """The transactional producer: a transaction is opened (its 100 records written to the
    partitions, not yet ended) before a kill and ended after it, so it spans a leader change."""

    def __init__(self, bootstrap: str, serialize, partitions: int) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.ctx = SerializationContext(TOPIC, MessageField.VALUE)
        self.serialize = serialize
        self.partitions = partitions
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "iceberg-soak", "log_level": 3}
        )
        _retried(self.producer.init_transactions)

    def open(self, kind: str) -> None:
        self.producer.begin_transaction()
        for i in range(TXN_RECORDS):
            value = self.serialize(value_of(i, kind), self.ctx)
            self.producer.produce(
                TOPIC, key=kind.encode(), value=value, partition=i % self.partitions
            )
        self.producer.flush(60)

    def end(self, commit: bool) -> None:
        p = self.producer
        _retried(p.commit_transaction if commit else p.abort_transaction)


def _retried(call) -> None:
    """``call(timeout)``, again while it fails with a retriable error (a coordinator or a
    leader moving)."""
    from confluent_kafka import KafkaException

    for attempt in range(10):
        try:
            return call(60)
        except KafkaException as e:
            if not e.args[0].retriable() or attempt == 9:
                raise
            print(f"  (retrying: {e.args[0].str()})", flush=True)
            time.sleep(1)


def wait_for(check, timeout: float, what: str) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:  # (a broker just killed: ask again)
            pass
        time.sleep(0.5)
    print(f"  (gave up waiting for {what} after {timeout:.0f} s)", flush=True)
    return False


def kill_leaders(
    cluster: Cluster, load: Load, kills: int, partitions: int, down: float, serialize
) -> None:
    """The kills, one a step (counted in ``load.kills``). Kill ``kills // 2`` lands while the
    aborted transaction is open, the next one while the committed one is."""
    step = load.records // (kills + 1)
    load.allowed = min(load.records, 2 * step)
    txn = None
    aborted_at, committed_at = kills // 2, kills // 2 + 1
    for k in range(kills):
        wait_for(lambda k=k: len(load.acked) >= (k + 1) * step, 600, f"step {k + 1} acknowledged")
        if k == aborted_at:
            txn = Transactions(cluster.bootstrap, serialize, partitions)
            txn.open("aborted")
        elif k == committed_at and txn is not None:
            txn.open("committed")
        p = k % partitions
        leader = cluster.partitions()[p].leader
        victim = cluster.brokers[leader - 1]
        victim.kill()
        load.kills += 1
        print(f"  kill {load.kills}: node {leader}, leader of partition {p}", flush=True)
        load.allowed = min(load.records, (k + 3) * step)
        time.sleep(down)
        victim.start(timeout=60)
        wait_for(
            lambda: all(len(m.isrs) == 3 for m in cluster.partitions().values()),
            120,
            "every partition's ISR of 3",
        )
        if txn is not None and k in (aborted_at, committed_at):
            txn.end(commit=k == committed_at)
            print(f"  transaction {'committed' if k == committed_at else 'aborted'}", flush=True)
    if txn is not None and kills == 1:  # (no second kill for it)
        txn.open("committed")
        txn.end(commit=True)
    load.allowed = load.records


def end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "iceberg-soak-ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def table_state(catalog) -> tuple[int, dict[int, int]]:
    """(rows, partition -> next offset) of the table now ((0, {}) before it is made)."""
    from headrace.broker.iceberg.tables import NEXT_OFFSET

    try:
        table = catalog.load_table(f"kafka.{TOPIC}")
    except Exception:  # (not made yet)
        return 0, {}
    snapshot = table.current_snapshot()
    rows = int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot else 0
    offsets = {
        int(k[len(NEXT_OFFSET) :]): int(v)
        for k, v in table.properties.items()
        if k.startswith(NEXT_OFFSET)
    }
    return rows, offsets


def spark_rows(root: Path) -> list[tuple]:
    """(partition, offset, id, kind, page, amount) of every row, as Spark reads the table."""
    spark = session(root)
    try:
        frame = spark.sql(
            "SELECT partition, offset, value.id, value.kind, value.page, value.amount"
            f" FROM headrace.kafka.{TOPIC}"
        ).toArrow()
    finally:
        spark.stop()
    return list(zip(*(frame.column(i).to_pylist() for i in range(6))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=20, help="at least 1")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--down", type=float, default=3.0, help="seconds a killed broker is down")
    parser.add_argument("--interval-ms", type=int, default=1000, help="iceberg.commit.interval.ms")
    parser.add_argument("--dir", type=Path, help="where the data goes (default: a new temp folder)")
    args = parser.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyiceberg.catalog.sql import SqlCatalog

    root = args.dir or Path(tempfile.mkdtemp(prefix="headrace-iceberg-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cluster = Cluster(root, args.interval_ms)
    cluster.start()
    print(f"cluster up in {time.monotonic() - started:.1f} s, data in {root}", flush=True)
    lag = [0.0]
    try:
        topic = NewTopic(
            TOPIC,
            args.partitions,
            replication_factor=3,
            config={"iceberg.mode": "value_schema_id_prefix", "min.insync.replicas": "2"},
        )
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([topic])[TOPIC].result(30)
        wait_for(lambda: len(cluster.partitions()) == args.partitions, 30, "the topic")
        registry = SchemaRegistryClient({"url": cluster.registry_urls()})
        serialize = AvroSerializer(registry, json.dumps(SCHEMA))
        serialize(value_of(0), SerializationContext(TOPIC, MessageField.VALUE))  # (registers)
        (root / "iceberg").mkdir(exist_ok=True)  # (the brokers make it at their first round)
        catalog = SqlCatalog(
            "headrace",
            uri=f"sqlite:///{root / 'iceberg' / 'catalog.db'}",
            warehouse=(root / "iceberg" / "warehouse").as_uri(),
        )
        load = Load(cluster, args.records, serialize)
        loading = time.monotonic()
        killer = threading.Thread(
            target=kill_leaders,
            args=(cluster, load, args.kills, args.partitions, args.down, serialize),
            daemon=True,
        )
        load.thread.start()
        killer.start()

        def progress() -> int:
            rows, _ = table_state(catalog)
            lag[0] = max(lag[0], cluster.largest_lag())
            print(
                f"{time.monotonic() - loading:6.0f} s  sent {load.sent}  acknowledged"
                f" {len(load.acked)}  kills {load.kills}/{args.kills}  table rows {rows}"
                f"  largest lag {lag[0]:.1f} s",
                flush=True,
            )
            return rows

        while killer.is_alive() or not load.done.is_set():
            time.sleep(5)
            progress()
        load_s = time.monotonic() - loading
        print(f"load done in {load_s:.0f} s", flush=True)
        ends = end_offsets(cluster.bootstrap, args.partitions)
        caught = time.monotonic()
        while any(table_state(catalog)[1].get(p, 0) < e for p, e in ends.items()):
            if time.monotonic() - caught > 300:
                print("the table did not catch up in 300 s", flush=True)
                break
            time.sleep(2)
            progress()
        catch_up_s = time.monotonic() - caught
        lag[0] = max(lag[0], cluster.largest_lag())
        print(f"table caught up {catch_up_s:.1f} s after the load", flush=True)
        # every broker's lag goes back to 0 (no broker waits for records the table has)
        wait_for(lambda: cluster.largest_lag() == 0, 30, "every broker's lag to be 0")
        lag_after = cluster.largest_lag()
        consumed = read_committed(cluster.bootstrap, args.partitions, TOPIC)
        deserialize = AvroDeserializer(registry)
        ctx = SerializationContext(TOPIC, MessageField.VALUE)
        expected = {}
        for p, o, _, value in consumed:
            v = deserialize(value, ctx)
            expected[(p, o)] = (v["id"], v["kind"], v["page"], v["amount"])
        print(f"read_committed: {len(consumed)} records", flush=True)
        rows = spark_rows(root)
        print(f"Spark: {len(rows)} rows", flush=True)
    finally:
        cluster.stop()
    got = {(r[0], r[1]): tuple(r[2:]) for r in rows}
    duplicates = len(rows) - len(got)
    acked_missing = [k for k, i in load.acked.items() if got.get(k) != value_tuple(i)]
    aborted = sum(1 for v in got.values() if v[1] == "aborted")
    committed = sum(1 for v in got.values() if v[1] == "committed")
    loaded = [v[0] for v in expected.values() if v[1] == "load"]
    twice = len(loaded) - len(set(loaded))
    differ = len(set(got.items()) ^ set(expected.items()))
    elapsed = time.monotonic() - started
    warned = warnings(root)
    for line in warned[:10]:
        print(line[:300])
    ok = (
        not duplicates
        and not acked_missing
        and not aborted
        and committed == TXN_RECORDS
        and not differ
        and not twice
        and load.kills == args.kills
        and len(load.acked) == args.records
        and lag_after == 0
    )
    print(
        f"\nsummary: {args.records} records, {args.partitions} partitions, RF 3,"
        f" {load.kills} of {args.kills} kills\n"
        f"  acknowledged       {len(load.acked)} (failed deliveries {load.failed})\n"
        f"  read_committed     {len(expected)}\n"
        f"  Spark rows         {len(rows)}\n"
        f"  duplicates         {duplicates} (same partition and offset twice in the table)\n"
        f"  missing            {len(acked_missing)} (acknowledged, not in the table as sent)\n"
        f"  differing          {differ} (table vs read_committed, by partition, offset, value)\n"
        f"  ids twice in topic {twice}\n"
        f"  aborted seen       {aborted}; committed transaction rows {committed}\n"
        f"  load               {load_s:.0f} s; table caught up {catch_up_s:.1f} s after it\n"
        f"  largest lag seen   {lag[0]:.1f} s (headrace_iceberg_lag_seconds);"
        f" once caught up {lag_after:.1f} s\n"
        f"  broker warnings    {len(warned)} (lines at WARNING or above in node*.log)\n"
        f"  time taken         {elapsed:.0f} s"
    )
    return verdict(ok, root)


def warnings(root: Path) -> list[str]:
    """The brokers' log lines at WARNING or above."""
    return [
        f"{log.stem}: {line}"
        for log in sorted(root.glob("node*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if " WARNING " in line or " ERROR " in line or " CRITICAL " in line
    ]


def value_tuple(i: int) -> tuple:
    v = value_of(i)
    return (v["id"], v["kind"], v["page"], v["amount"])


if __name__ == "__main__":
    sys.exit(main())
