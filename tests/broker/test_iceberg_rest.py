"""Topics as Iceberg tables through a real REST catalog: Apache Iceberg's own REST fixture
(``org.apache.iceberg.rest.RESTCatalogServer``, see ``iceberg_rest_catalog.py``) in a JVM, the
broker with ``iceberg.catalog.type=rest`` and ``iceberg.catalog.uri`` its URL, and nothing
else: the fixture names each table's location (``<its warehouse>/kafka/<topic>``) and the
broker's workers write the Parquet files and manifests there with pyiceberg, then commit
through the REST protocol. The table is read back through the same REST catalog with
pyiceberg: exactly what the producer had acknowledged (keys, values, partitions, offsets),
over a kill -9 of the broker, and with every offset in exactly one snapshot's
``headrace.offsets``. A stopped catalog holds back no produce; the table catches up once the
catalog is back (its JDBC catalog is a SQLite file, so it keeps its tables over a restart).

The first run resolves the fixture's jars with Maven (some 40 MB, cached); later runs need no
Maven, and the two tests take about 20 s (the fixture starts in 2 s). Skipped without java
and mvn.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyiceberg")

from confluent_kafka import Producer  # noqa: E402

from headrace.broker.tools.process import BrokerProcess  # noqa: E402
from tests.broker.iceberg_rest_catalog import RestCatalogServer, available  # noqa: E402

pytestmark = pytest.mark.skipif(not available(), reason="no java/mvn")

INTERVAL_MS = 200


def settings(server: RestCatalogServer, **more) -> dict:
    return {
        "iceberg.enabled": "true",
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": server.uri,
        "iceberg.commit.interval.ms": INTERVAL_MS,
        "iceberg.retry.backoff.max.ms": 500,
        "num.partitions": 2,
        **more,
    }


def rest_catalog(server: RestCatalogServer):
    from pyiceberg.catalog import load_catalog

    return load_catalog("check", type="rest", uri=server.uri)


def table_rows(server: RestCatalogServer, topic: str):
    """The table's rows through the REST catalog (None: no table yet, or no catalog)."""
    try:
        return rest_catalog(server).load_table(f"kafka.{topic}").scan().to_arrow()
    except Exception:
        return None


def wait_rows(server: RestCatalogServer, topic: str, count: int, timeout: float = 60):
    """The rows once there are ``count`` of them, and still ``count`` a few commit intervals
    later (a duplicate would come with the next commit)."""
    deadline = time.monotonic() + timeout
    rows = None
    while time.monotonic() < deadline:
        rows = table_rows(server, topic)
        if rows is not None and rows.num_rows >= count:
            time.sleep(4 * INTERVAL_MS / 1000)
            return table_rows(server, topic)
        time.sleep(0.2)
    raise AssertionError(f"{topic}: {rows.num_rows if rows is not None else 0} rows, not {count}")


def produce(bootstrap: str, topic: str, keys: range) -> list[tuple]:
    """Records ``k<i>``/``v<i>`` (acks=all), partition i % 2: (partition, offset, key, value)
    of each acknowledged one."""
    acked: list[tuple] = []

    def done(err, msg) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in keys:
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2, on_delivery=done)
    assert p.flush(30) == 0
    assert len(acked) == len(keys)
    return acked


def as_tuples(rows) -> list[tuple]:
    return sorted(
        zip(
            rows.column("partition").to_pylist(),
            rows.column("offset").to_pylist(),
            rows.column("key").to_pylist(),
            rows.column("value").to_pylist(),
        )
    )


def snapshot_ranges(table) -> dict[int, list[tuple[int, int]]]:
    """partition -> the (start, end) of every snapshot's ``headrace.offsets``, sorted."""
    found: dict[int, list[tuple[int, int]]] = {}
    for snapshot in table.snapshots():
        text = snapshot.summary.additional_properties.get("headrace.offsets", "")
        for item in filter(None, text.split(",")):
            partition, span = item.split(":")
            start, end = span.split("-")
            found.setdefault(int(partition), []).append((int(start), int(end)))
    return {p: sorted(spans) for p, spans in found.items()}


def test_rows_through_a_rest_catalog_over_a_kill_of_the_broker(tmp_path):
    """Produce, read the rows back through the REST catalog; produce more and kill -9 the
    broker before its next commit; after the restart, produce again: the table holds every
    acknowledged record once, the snapshots' offset ranges tile each partition from 0 and the
    table's ``headrace.next-offset.<p>`` is where each partition's log ends."""
    topic = "rest-kv"
    with RestCatalogServer(tmp_path / "rest") as server:
        broker = BrokerProcess(tmp_path / "broker", settings(server)).start()
        try:
            broker.create_topic(topic, partitions=2, iceberg_mode="key_value")
            acked = produce(broker.bootstrap, topic, range(0, 100))
            rows = wait_rows(server, topic, 100)
            assert as_tuples(rows) == sorted(acked)

            acked += produce(broker.bootstrap, topic, range(100, 200))
            broker.kill()  # (most likely before these are committed: they come after)
            broker.start()
            acked += produce(broker.bootstrap, topic, range(200, 300))
            rows = wait_rows(server, topic, 300)
        finally:
            broker.kill()
        expected = sorted(acked)
        assert len({(p, o) for p, o, _, _ in expected}) == 300
        assert as_tuples(rows) == expected  # none lost, none twice

        table = rest_catalog(server).load_table(f"kafka.{topic}")
        ends = {p: max(o for q, o, _, _ in expected if q == p) + 1 for p in (0, 1)}
        for p in (0, 1):
            assert table.properties[f"headrace.next-offset.{p}"] == str(ends[p])
        ranges = snapshot_ranges(table)
        for p in (0, 1):
            reached = 0
            for start, end in ranges[p]:
                assert start == reached, (p, ranges[p])  # no gap, no overlap
                reached = end
            assert reached == ends[p]
        # the fixture wrote the metadata where pyiceberg wrote the data: one warehouse
        assert table.location() == str(server.warehouse / "kafka" / topic)
        assert list((server.warehouse / "kafka" / topic / "data").rglob("*.parquet"))


def test_a_stopped_rest_catalog_holds_back_no_produce_and_is_caught_up_later(tmp_path):
    """The REST catalog is killed: records produced with acks=all are acknowledged as fast as
    before, the topic is counted failing on /metrics; once the catalog is back (same port,
    same SQLite file) the table catches up with every record, once."""
    import headrace
    from tests.broker.test_iceberg import produce_while_failing
    from tests.broker.test_metrics import scrape, value

    topic = "rest-held"
    server = RestCatalogServer(tmp_path / "rest").start()
    try:
        with headrace.Broker(
            settings(server, **{"metrics.port": 0}), data_dir=tmp_path / "data"
        ) as broker:
            broker.create_topic(topic, partitions=1, iceberg_mode="key_value")
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
            for i in range(50):
                producer.produce(topic, value=b"before-%d" % i)
            assert producer.flush(30) == 0
            wait_rows(server, topic, 50)

            server.stop()
            produce_while_failing(broker, topic, 100)  # (acknowledged in under 5 s)
            server.start()
            rows = wait_rows(server, topic, 150)
            assert sorted(rows.column("offset").to_pylist()) == list(range(150))
            deadline = time.monotonic() + 5  # (the round's answer reaches the event loop)
            while value(scrape(broker.metrics_port), "headrace_iceberg_failing", topic=topic):
                assert time.monotonic() < deadline, "still failing"
                time.sleep(0.1)
    finally:
        server.stop()
