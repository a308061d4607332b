"""Spark's Kafka source and sink over Headrace (convention: compat/kit.py).

Scenarios: a batch read with every column checked; the windowed click count of
``pipeline.py`` with exact aggregates; the same stopped and restarted from its checkpoint
(nothing lost, nothing twice); ``startingOffsets``/``endingOffsets`` per partition;
``startingOffsetsByTimestamp``; ``subscribePattern``.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

import importlib.util

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# compat/spark/pipeline.py, loaded by path ("pipeline" is also a Headrace package)
_spec = importlib.util.spec_from_file_location("spark_pipeline",
                                               Path(__file__).with_name("pipeline.py"))
pipeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pipeline)

from compat import kit  # noqa: E402
from compat.kit import expect  # noqa: E402

BASE = 1_700_000_040_000 - 1_700_000_040_000 % 60_000  # a minute boundary, in epoch ms


def produce(bootstrap: str, topic: str, recs: list[tuple[int, bytes, bytes, list, int]]) -> None:
    """(partition, key, value, headers, timestamp ms)"""
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for f in [producer.send(topic, partition=p, key=k, value=v, headers=h, timestamp_ms=ts)
                  for p, k, v, h, ts in recs]:
            f.get(timeout=30)
    finally:
        producer.close(30)


def sample(n: int, partitions: int) -> list:
    return [(i % partitions, f"k{i}".encode(), f"v{i}".encode(),
             [("seq", str(i).encode()), ("src", b"compat")], BASE + i * 1000) for i in range(n)]


def batch(spark, bootstrap: str, **options):
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows(df) -> list[tuple]:
    from pyspark.sql import functions as F
    out = df.select("topic", "partition", "offset", F.col("key").cast("string"),
                    F.col("value").cast("string"), F.unix_millis("timestamp").alias("ts"),
                    "timestampType", *(["headers"] if "headers" in df.columns else []))
    return [tuple(r) for r in out.collect()]


def batch_read(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    pipeline.create_topics(bootstrap, [topic], partitions=2)
    recs = sample(100, 2)
    produce(bootstrap, topic, recs)
    spark = pipeline.session(prefix)
    df = batch(spark, bootstrap, subscribe=topic, includeHeaders="true",
               startingOffsets="earliest", endingOffsets="latest")
    expect(df.count() == 100, f"count() is {df.count()}, want 100")
    got = sorted(rows(df), key=lambda r: (r[1], r[2]))
    want = []
    for p in range(2):
        mine = [r for r in recs if r[0] == p]
        for offset, (_, k, v, h, ts) in enumerate(mine):
            want.append((topic, p, offset, k.decode(), v.decode(), ts, 0,
                         [(a, b) for a, b in h]))
    got = [(*r[:7], [(h["key"], bytes(h["value"])) for h in r[7]]) for r in got]
    for w, g in zip(want, got):
        expect(w == g, f"row {g} != expected {w}")
    spark.stop()


def clicks(users_at: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(u, BASE + s * 1000) for u, s in users_at]


def expected_counts(data: list[tuple[str, int]], flush_ms: int) -> Counter:
    c = Counter()
    for user, ts in data:
        if ts < flush_ms - 70_000:  # windows closed by the watermark the flush event sets
            start = ts - ts % 60_000
            c[(start, user)] += 1
    return c


def result_counts(results: list[dict]) -> Counter:
    from datetime import datetime, timezone
    c = Counter()
    for r in results:
        start = int(datetime.strptime(r["window_start"], "%Y-%m-%dT%H:%M:%S")
                    .replace(tzinfo=timezone.utc).timestamp() * 1000)
        expect((start, r["user"]) not in c, f"window {r} written twice")
        c[(start, r["user"])] = r["count"]
    return c


PHASE1 = [("alice", 1), ("bob", 2), ("alice", 20), ("carol", 59),      # minute 0
          ("alice", 61), ("bob", 75), ("alice", 90)]                    # minute 1, first half
PHASE2 = [("bob", 100), ("carol", 110), ("alice", 119),                 # minute 1, second half
          ("alice", 125), ("alice", 130), ("dave", 170),                # minute 2
          ("bob", 200), ("carol", 239)]                                 # minute 3
FLUSH = ("flush", 900)                                                  # closes minutes 0-3


def count_clicks(spark, bootstrap: str, src: str, out: str, ckpt: str, count: int,
                 timeout: float = 120):
    """Run the click count (resuming from the checkpoint in ``ckpt``) until ``out`` holds
    ``count`` results, then stop it. Returns the stopped query and the results read."""
    query = pipeline.clicks_query(spark, bootstrap, src, out, ckpt)
    try:
        results = pipeline.wait_for_results(bootstrap, out, count, timeout=timeout)
        query.processAllAvailable()
    finally:
        query.stop()
    return query, results


def streaming_windows(bootstrap: str, prefix: str) -> None:
    src, out = f"{prefix}-clicks", f"{prefix}-counts"
    pipeline.create_topics(bootstrap, [src, out])
    data = clicks(PHASE1 + PHASE2)
    pipeline.produce_clicks(bootstrap, src, data + clicks([FLUSH]))
    want = expected_counts(data, BASE + FLUSH[1] * 1000)
    spark = pipeline.session(prefix)
    with tempfile.TemporaryDirectory(prefix="headrace-spark-ckpt-") as ckpt:
        query, results = count_clicks(spark, bootstrap, src, out, ckpt, len(want))
    expect(query.exception() is None, f"query failed: {query.exception()}")
    got = result_counts(pipeline.read_results(bootstrap, out))
    expect(got == want, f"aggregates {sorted(got.items())}, want {sorted(want.items())}"
           f" ({len(results)} results)")
    spark.stop()


def streaming_restart(bootstrap: str, prefix: str) -> None:
    src, out = f"{prefix}-clicks", f"{prefix}-counts"
    pipeline.create_topics(bootstrap, [src, out])
    spark = pipeline.session(prefix)
    with tempfile.TemporaryDirectory(prefix="headrace-spark-ckpt-") as ckpt:
        # phase 1: minute 0 and half of minute 1; the watermark (1:30 - 10 s) closes minute 0
        pipeline.produce_clicks(bootstrap, src, clicks(PHASE1))
        first = expected_counts(clicks(PHASE1), BASE + 130_000)
        count_clicks(spark, bootstrap, src, out, ckpt, len(first), timeout=90)
        got1 = result_counts(pipeline.read_results(bootstrap, out))
        expect(got1 == first, f"before the restart: {sorted(got1.items())}, "
                              f"want {sorted(first.items())}")
        # phase 2: the rest arrives while the query is stopped; restart from the checkpoint
        pipeline.produce_clicks(bootstrap, src, clicks(PHASE2 + [FLUSH]))
        data = clicks(PHASE1 + PHASE2)
        want = expected_counts(data, BASE + FLUSH[1] * 1000)
        count_clicks(spark, bootstrap, src, out, ckpt, len(want), timeout=90)
    got = result_counts(pipeline.read_results(bootstrap, out))
    expect(got == want, f"after the restart: {sorted(got.items())}, want {sorted(want.items())}")
    spark.stop()


def starting_offsets(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    pipeline.create_topics(bootstrap, [topic], partitions=2)
    produce(bootstrap, topic, sample(20, 2))
    spark = pipeline.session(prefix)
    df = batch(spark, bootstrap, subscribe=topic,
               startingOffsets=f'{{"{topic}":{{"0":5,"1":-2}}}}',
               endingOffsets=f'{{"{topic}":{{"0":8,"1":-1}}}}')
    got = sorted((r[1], r[2]) for r in rows(df))
    want = [(0, o) for o in (5, 6, 7)] + [(1, o) for o in range(10)]
    expect(got == want, f"read {got}, want {want}")
    # a stream that starts at "latest" sees only what comes after it started
    stream_out = f"{prefix}-latest"
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .writeStream.format("memory").queryName(stream_out.replace("-", "_")).start())
    try:
        query.processAllAvailable()
        produce(bootstrap, topic, [(0, b"late", b"late", [], BASE + 99_000)])
        query.processAllAvailable()
        seen = [tuple(r) for r in spark.sql(
            f"select cast(value as string), offset from {stream_out.replace('-', '_')}").collect()]
    finally:
        query.stop()
    expect(seen == [("late", 10)], f"a stream from latest read {seen}, want [('late', 10)]")
    spark.stop()


def starting_offsets_by_timestamp(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    pipeline.create_topics(bootstrap, [topic], partitions=2)
    recs = sample(20, 2)
    produce(bootstrap, topic, recs)
    spark = pipeline.session(prefix)
    since = BASE + 9_000
    df = batch(spark, bootstrap, subscribe=topic,
               startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{since},"1":{since}}}}}',
               endingOffsets="latest")
    got = sorted(r[3] for r in rows(df))
    want = sorted(k.decode() for _, k, _, _, ts in recs if ts >= since)
    expect(got == want, f"read keys {got}, want {want}")
    spark.stop()


def subscribe_pattern(bootstrap: str, prefix: str) -> None:
    a, b, other = f"{prefix}-pat-a", f"{prefix}-pat-b", f"{prefix}-other"
    pipeline.create_topics(bootstrap, [a, b, other], partitions=1)
    for t in (a, b, other):
        produce(bootstrap, t, [(0, t.encode(), b"x", [], BASE + i) for i in range(3)])
    spark = pipeline.session(prefix)
    pattern = prefix.replace(".", r"\.") + r"-pat-.*"
    df = batch(spark, bootstrap, subscribePattern=pattern, startingOffsets="earliest",
               endingOffsets="latest")
    got = Counter(r[0] for r in rows(df))
    expect(got == Counter({a: 3, b: 3}), f"subscribePattern read {dict(got)}")
    spark.stop()


# --- against a cluster of three brokers


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader of ``topic`` (Metadata, through kafka-python)."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (t,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def cluster_streaming_windows(bootstrap: str, prefix: str) -> None:
    """The click count of ``pipeline.py`` with the clicks spread over 12 partitions (always led
    by all three brokers) and the counts written to 12: exact aggregates."""
    src, out = f"{prefix}-clicks", f"{prefix}-counts"
    pipeline.create_topics(bootstrap, [src, out], partitions=12)
    for topic in (src, out):
        kit.wait_until(lambda t=topic: -1 not in leaders(bootstrap, t).values(),
                       f"a leader for each partition of {topic}")
        led = leaders(bootstrap, topic)
        expect(len(led) == 12 and set(led.values()) == {1, 2, 3},
               f"{topic}'s leaders {led}, want 12 partitions on brokers 1, 2 and 3")
        print(f"partition leaders of {topic}: {led}", flush=True)
    data = clicks(PHASE1 + PHASE2)
    flush = clicks([FLUSH])
    # click i to partition i % 12, so the source reads from every broker
    produce(bootstrap, src, [(i % 12, user.encode(), b"click", [], ts)
                             for i, (user, ts) in enumerate(data + flush)])
    want = expected_counts(data, BASE + FLUSH[1] * 1000)
    spark = pipeline.session(prefix)
    with tempfile.TemporaryDirectory(prefix="headrace-spark-ckpt-") as ckpt:
        query, results = count_clicks(spark, bootstrap, src, out, ckpt, len(want))
    expect(query.exception() is None, f"query failed: {query.exception()}")
    got = result_counts(pipeline.read_results(bootstrap, out))
    expect(got == want, f"aggregates {sorted(got.items())}, want {sorted(want.items())}"
           f" ({len(results)} results)")
    written = _partitions_written(bootstrap, out)
    expect(len({leaders(bootstrap, out)[p] for p in written}) >= 2,
           f"the sink wrote only to partitions {written} of one broker")
    spark.stop()


def _partitions_written(bootstrap: str, topic: str) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(12)])
    finally:
        consumer.close()
    return sorted(tp.partition for tp, end in ends.items() if end > 0)


def cluster_pipeline_example(bootstrap: str, prefix: str) -> None:
    """``python compat/spark/pipeline.py --bootstrap <the three brokers>``, as a user runs it:
    exit code 0 and the five closed windows it prints."""
    import subprocess
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("pipeline.py")),
                          "--bootstrap", bootstrap], capture_output=True, text=True, timeout=300)
    print(res.stdout, res.stderr[-3000:], sep="\n", flush=True)
    printed = [ln.split() for ln in res.stdout.splitlines() if ln[:2].isdigit()]
    want = [["2023-11-14T22:13:00", "alice", "2"], ["2023-11-14T22:13:00", "bob", "1"],
            ["2023-11-14T22:14:00", "alice", "1"], ["2023-11-14T22:14:00", "bob", "1"],
            ["2023-11-14T22:14:00", "carol", "1"]]
    expect(res.returncode == 0 and printed == want,
           f"pipeline.py exited with {res.returncode} and printed {printed}, want {want}")


def sasl_ssl_options() -> dict[str, str]:
    """Spark's ``kafka.``-prefixed client settings for the secure broker's SASL_SSL listener
    (kit.security): SCRAM-SHA-512, and a PEM truststore (Kafka clients 2.7+)."""
    sec = kit.security()
    return {
        "kafka.bootstrap.servers": sec["sasl_ssl"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": sec["scram.mechanism"],
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  f'required username="{sec["scram.username"]}" '
                                  f'password="{sec["scram.password"]}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": sec["ca.pem"],
    }


def security_sasl_ssl(bootstrap: str, prefix: str) -> None:
    """Spark's Kafka sink writes 200 records over SASL_SSL (SCRAM-SHA-512) and its source reads
    them back over it: a batch query, then a streaming one (from the earliest offsets, to
    memory); every key and value checked."""
    topic = f"{prefix}-t"
    pipeline.create_topics(bootstrap, [topic], partitions=2)  # through the PLAINTEXT listener
    options = sasl_ssl_options()
    spark = pipeline.session(prefix)
    want = sorted((f"k{i}", f"v{i}") for i in range(200))
    df = spark.createDataFrame(want, ["key", "value"])
    df.write.format("kafka").options(**options).option("topic", topic).save()
    read = (spark.read.format("kafka").options(**options).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    got = sorted((r[0], r[1]) for r in read.selectExpr("CAST(key AS STRING)",
                                                        "CAST(value AS STRING)").collect())
    expect(got == want, f"batch read {len(got)} records over SASL_SSL, want the 200 written "
                        f"(first difference: {next((g for g in got if g not in want), None)})")
    query = (spark.readStream.format("kafka").options(**options).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName("sasl_ssl_stream").start())
    try:
        query.processAllAvailable()
        streamed = sorted((r[0], r[1]) for r in spark.sql("SELECT * FROM sasl_ssl_stream").collect())
    finally:
        query.stop()
    expect(query.exception() is None, f"streaming query failed: {query.exception()}")
    expect(streamed == want, f"streaming read {len(streamed)} records over SASL_SSL, want 200")
    spark.stop()


SCENARIOS = {
    "security-sasl-ssl-scram-sha-512": security_sasl_ssl,
    "batch-read": batch_read,
    "streaming-windows": streaming_windows,
    "streaming-restart": streaming_restart,
    "starting-offsets": starting_offsets,
    "starting-offsets-by-timestamp": starting_offsets_by_timestamp,
    "subscribe-pattern": subscribe_pattern,
    "cluster-streaming-windows": cluster_streaming_windows,
    "cluster-pipeline-example": cluster_pipeline_example,
}

if __name__ == "__main__":
    sys.exit(kit.main(SCENARIOS))
