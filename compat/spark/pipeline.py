"""A PySpark pipeline over Headrace, through Spark's own Kafka connector, unchanged.

Clicks arrive on a topic (key: user, Kafka timestamp: event time). A Structured Streaming job
counts clicks per user in one-minute event-time windows with a ten-second watermark and writes
each closed window, as JSON, to another topic through Spark's Kafka sink, with a checkpoint::

    python compat/spark/pipeline.py                     # starts its own Headrace broker
    python compat/spark/pipeline.py --bootstrap 127.0.0.1:9092

The connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``, matching the installed pyspark)
comes from Maven Central through ``spark.jars.packages``; its Ivy cache is
``~/.cache/headrace/ivy``. Needs ``pip install 'pyspark>=4.0,<4.1'`` and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))
WINDOW = "1 minute"
WATERMARK = "10 seconds"


def connector() -> str:
    """The connector matching the installed pyspark. When Maven Central does not have that
    exact release (yet), the newest one of the same minor line is used; the version can be
    forced with ``HEADRACE_SPARK_KAFKA_VERSION``."""
    import pyspark
    version = pyspark.__version__
    scala = "2.13" if int(version.split(".")[0]) >= 4 else "2.12"
    artifact = f"spark-sql-kafka-0-10_{scala}"
    chosen = os.environ.get("HEADRACE_SPARK_KAFKA_VERSION") or _published(artifact, version)
    return f"org.apache.spark:{artifact}:{chosen}"


def _published(artifact: str, version: str) -> str:
    cache = CACHE / f"{artifact}-{version}.version"
    if cache.exists():
        return cache.read_text().strip()
    import re
    import urllib.request
    url = f"https://repo1.maven.org/maven2/org/apache/spark/{artifact}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            listed = re.findall(r"<version>([^<]+)</version>", resp.read().decode())
    except OSError:
        return version
    minor = ".".join(version.split(".")[:2]) + "."
    same = [v for v in listed if v.startswith(minor) and v.replace(".", "").isdigit()]
    key = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    # the newest release whose modules are all there (the connector needs its token provider)
    chosen = version
    for candidate in sorted(set(same) | {version}, key=key, reverse=True):
        if key(candidate) > key(version):
            continue
        pom = (f"https://repo1.maven.org/maven2/org/apache/spark/"
               f"spark-token-provider-kafka-0-10_{artifact.rsplit('_', 1)[1]}/{candidate}/"
               f"spark-token-provider-kafka-0-10_{artifact.rsplit('_', 1)[1]}-{candidate}.pom")
        try:
            urllib.request.urlopen(urllib.request.Request(pom, method="HEAD"), timeout=30)
        except OSError:
            continue
        if candidate in listed:
            chosen = candidate
            break
    CACHE.mkdir(parents=True, exist_ok=True)
    cache.write_text(chosen)
    return chosen


def session(app: str = "headrace-pipeline"):
    """A local SparkSession bound to 127.0.0.1 with the Kafka connector."""
    from pyspark.sql import SparkSession
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.appName(app).master("local[2]")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.jars.packages", connector())
             .config("spark.jars.ivy", str(CACHE / "ivy"))
             .config("spark.jars.ivySettings", str(Path(__file__).with_name("ivysettings.xml")))
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def clicks_query(spark, bootstrap: str, clicks: str, out: str, checkpoint: str,
                 trigger_seconds: float = 1.0):
    """Start the windowed click count: ``clicks`` -> counts per (window, user) -> ``out``."""
    from pyspark.sql import functions as F
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", clicks)
              .option("startingOffsets", "earliest")
              .load()
              .select(F.col("key").cast("string").alias("user"), F.col("timestamp")))
    counts = (events.withWatermark("timestamp", WATERMARK)
              .groupBy(F.window("timestamp", WINDOW), F.col("user"))
              .count())
    results = counts.select(
        F.col("user").alias("key"),
        F.to_json(F.struct(
            F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss").alias("window_start"),
            F.col("user"), F.col("count"))).alias("value"))
    return (results.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
            .trigger(processingTime=f"{trigger_seconds} seconds")
            .start())


# --- helpers for producing clicks and reading results (kafka-python)


def create_topics(bootstrap: str, names: list[str], partitions: int = 2) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        admin.close()


def produce_clicks(bootstrap: str, topic: str, clicks: list[tuple[str, int]]) -> None:
    """``clicks``: (user, event time in epoch milliseconds)."""
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for f in [producer.send(topic, key=user.encode(), value=b"click", timestamp_ms=ts)
                  for user, ts in clicks]:
            f.get(timeout=30)
    finally:
        producer.close(30)


def read_results(bootstrap: str, topic: str) -> list[dict]:
    """Everything in ``topic`` now (all partitions), decoded from JSON."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return []
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        out: list[dict] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                out += [json.loads(m.value) for m in msgs]
        return out
    finally:
        consumer.close()


def wait_for_results(bootstrap: str, topic: str, count: int, timeout: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = read_results(bootstrap, topic)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(1)


# --- the example


def example(bootstrap: str) -> int:
    stamp = time.strftime("%H%M%S")
    clicks, out = f"clicks-{stamp}", f"clicks-per-minute-{stamp}"
    create_topics(bootstrap, [clicks, out])
    base = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a minute boundary
    data = [("alice", base + 5_000), ("bob", base + 15_000), ("alice", base + 30_000),
            ("alice", base + 65_000), ("carol", base + 70_000), ("bob", base + 119_000),
            ("flush", base + 600_000)]  # moves the watermark past the earlier windows
    produce_clicks(bootstrap, clicks, data)
    spark = session()
    with tempfile.TemporaryDirectory(prefix="headrace-pipeline-") as checkpoint:
        query = clicks_query(spark, bootstrap, clicks, out, checkpoint)
        try:
            results = wait_for_results(bootstrap, out, 5)
        finally:
            query.stop()
    spark.stop()
    for r in sorted(results, key=lambda r: (r["window_start"], r["user"])):
        print(f"{r['window_start']}  {r['user']:6} {r['count']}")
    return 0 if len(results) == 5 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", help="a running broker; default: start Headrace here")
    args = ap.parse_args(argv)
    if args.bootstrap:
        return example(args.bootstrap)
    from headrace.broker.tools.process import BrokerProcess
    with tempfile.TemporaryDirectory(prefix="headrace-pipeline-data-") as data:
        with BrokerProcess(data) as broker:
            print(f"Headrace on {broker.bootstrap}", flush=True)
            return example(broker.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
