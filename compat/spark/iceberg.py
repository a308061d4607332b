"""PySpark reads a topic that Headrace writes as an Apache Iceberg table, and gets exactly the
records a read_committed Kafka consumer gets, after a kill -9 of the broker during the load::

    pip install -e '.[iceberg,test]' 'pyspark>=4.0,<4.1'
    python compat/spark/iceberg.py              # exit status 0: the same rows

What it does: starts a broker (``iceberg.enabled=true``, a one-second commit interval), makes a
topic of 2 partitions with ``iceberg.mode=key_value``, produces with acks=all from a thread and
kills the broker (SIGKILL) during the load, twice, restarting it each time; adds a transaction
that is aborted and one that commits; then reads the table through Spark's Iceberg catalog and
compares (partition, offset, key, value) with what a read_committed consumer reads.

Spark reads the embedded catalog as Iceberg's JDBC catalog on the same SQLite file:
``org.apache.iceberg:iceberg-spark-runtime-4.0_2.13`` (matching pyspark 4.0; 3.5_2.12 for
pyspark 3.5) and ``org.xerial:sqlite-jdbc`` from Maven Central through ``spark.jars.packages``,
cached in ``~/.cache/headrace/ivy``; ``jdbc.schema-version=V0`` is the table layout pyiceberg's
SQL catalog makes. Needs Java 17.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

CACHE = Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))
ICEBERG = os.environ.get("HEADRACE_ICEBERG_VERSION", "1.10.1")
SQLITE_JDBC = os.environ.get("HEADRACE_SQLITE_JDBC_VERSION", "3.54.1.0")
TOPIC = "clicks"


def runtime() -> str:
    import pyspark

    major, minor = pyspark.__version__.split(".")[:2]
    scala = "2.13" if int(major) >= 4 else "2.12"
    return f"org.apache.iceberg:iceberg-spark-runtime-{major}.{minor}_{scala}:{ICEBERG}"


def session(data_dir: Path):
    """A local SparkSession with the broker's catalog as ``headrace`` (Iceberg's JDBC catalog
    on ``<data dir>/iceberg/catalog.db``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    ice = data_dir / "iceberg"
    spark = (
        SparkSession.builder.appName("headrace-iceberg")
        .master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.jars.packages", f"{runtime()},org.xerial:sqlite-jdbc:{SQLITE_JDBC}")
        .config("spark.jars.ivy", str(CACHE / "ivy"))
        .config("spark.jars.ivySettings", str(Path(__file__).with_name("ivysettings.xml")))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.headrace", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.headrace.type", "jdbc")
        .config("spark.sql.catalog.headrace.uri", f"jdbc:sqlite:{ice / 'catalog.db'}")
        .config("spark.sql.catalog.headrace.jdbc.schema-version", "V0")
        .config("spark.sql.catalog.headrace.warehouse", (ice / "warehouse").as_uri())
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def read_committed(bootstrap: str, partitions: int, topic: str = TOPIC) -> list[tuple]:
    """(partition, offset, key, value) of everything a read_committed consumer gets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(partitions)
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, quiet = [], 0
    while quiet < 6:
        m = consumer.poll(0.5)
        if m is None:
            quiet += 1
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
            continue
        if not m.error():
            quiet = 0
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    consumer.close()
    return sorted(got)


def load(broker, kills: int, seconds: float) -> set[tuple[int, int]]:
    """Produce with acks=all while the broker is killed ``kills`` times; the acknowledged
    (partition, offset)s."""
    from confluent_kafka import Producer

    acked: set[tuple[int, int]] = set()
    for k in range(kills):
        stop = threading.Event()

        def produce(k=k, stop=stop) -> None:
            p = Producer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "acks": "all",
                    "linger.ms": 2,
                    "message.timeout.ms": 5000,
                }
            )

            def done(err, msg) -> None:
                if err is None:
                    acked.add((msg.partition(), msg.offset()))

            i = 0
            while not stop.is_set():
                try:
                    p.produce(
                        TOPIC,
                        key=f"{k}-{i}".encode(),
                        value=f"click {i}".encode(),
                        on_delivery=done,
                    )
                except BufferError:
                    p.poll(0.05)
                i += 1
                if i % 100 == 0:
                    p.poll(0)
                    time.sleep(0.005)
            p.flush(10)

        t = threading.Thread(target=produce)
        t.start()
        time.sleep(seconds)
        broker.kill()
        stop.set()
        t.join()
        broker.start()
    return acked


def transactions(bootstrap: str) -> None:
    from confluent_kafka import Producer

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spark-iceberg"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(100):
        txn.produce(TOPIC, key=b"aborted", value=f"a{i}".encode(), partition=i % 2)
    txn.abort_transaction(30)
    txn.begin_transaction()
    for i in range(100):
        txn.produce(TOPIC, key=b"committed", value=f"c{i}".encode(), partition=i % 2)
    txn.commit_transaction(30)


def main() -> int:
    from headrace.broker.tools.process import BrokerProcess

    data = Path(tempfile.mkdtemp(prefix="headrace-iceberg-"))
    settings = {"iceberg.enabled": "true", "iceberg.commit.interval.ms": 1000}
    broker = BrokerProcess(data, settings).start()
    try:
        broker.create_topic(TOPIC, partitions=2, iceberg_mode="key_value")
        acked = load(broker, kills=2, seconds=3)
        transactions(broker.bootstrap)
        expected = read_committed(broker.bootstrap, 2)
        started = time.monotonic()
        spark = session(data)
        print(f"spark session: {time.monotonic() - started:.1f} s", flush=True)
        rows: list[tuple] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            spark.sql("REFRESH TABLE headrace.kafka.clicks") if rows else None
            try:
                frame = spark.sql(
                    "SELECT partition, offset, key, value FROM headrace.kafka.clicks"
                ).collect()
            except Exception as e:  # (not made yet)
                print(f"not readable yet: {str(e).splitlines()[0]}", flush=True)
                frame = []
            rows = sorted((r[0], r[1], bytes(r[2]), bytes(r[3])) for r in frame)
            if len(rows) >= len(expected):
                break
            time.sleep(2)
        spark.stop()
    finally:
        broker.stop()
    duplicates = len(rows) - len({(p, o) for p, o, _, _ in rows})
    missing = acked - {(p, o) for p, o, _, _ in rows}
    aborted = sum(1 for r in rows if r[2] == b"aborted")
    print(
        f"acknowledged {len(acked)}, read_committed {len(expected)}, Spark rows {len(rows)},"
        f" duplicates {duplicates}, acknowledged missing {len(missing)}, aborted rows {aborted}"
    )
    return verdict(rows == expected and not missing and not duplicates and not aborted, data)


def verdict(ok: bool, data: Path) -> int:
    """PASS (the data removed) and 0, or FAIL (the data kept, for a look) and 1."""
    if ok:
        shutil.rmtree(data, ignore_errors=True)
    else:
        print(f"the brokers' data (and the table) kept in {data}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
