"""A first measure of topics as Iceberg tables: one broker, one 2-partition topic, N records
of 100 bytes produced as fast as one confluent-kafka producer goes (acks=all), with
``iceberg.mode`` key_value or disabled; prints the produce rate, when every row is visible
after the last acknowledgement, the largest ``headrace_iceberg_lag_seconds`` seen (scraped
every 0.25 s) and the commits::

    python -m bench.iceberg_lag 500000 key_value
    python -m bench.iceberg_lag 500000 disabled      # the same produce, no table

Not the issue's benchmark yet (half of the maximum rate, produce p99, saturation): a start.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

METRICS_PORT = 19999


def scrape() -> dict[str, float]:
    try:
        url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        if line.startswith("headrace_iceberg_"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def main(count: int, mode: str, interval_ms: int = 1000) -> None:
    from confluent_kafka import Producer

    from headrace.broker.tools.process import BrokerProcess

    data = Path(tempfile.mkdtemp(prefix="iceberg-lag-"))
    settings = {
        "iceberg.enabled": "true",
        "iceberg.commit.interval.ms": interval_ms,
        "metrics.port": METRICS_PORT,
    }
    broker = BrokerProcess(data, settings).start()
    rows_key = 'headrace_iceberg_rows_total{topic="t"}'
    lag_key = 'headrace_iceberg_lag_seconds{topic="t"}'
    commits_key = 'headrace_iceberg_commits_total{topic="t"}'
    try:
        broker.create_topic("t", partitions=2, iceberg_mode=mode)
        lags: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                lags.append(scrape().get(lag_key, 0.0))
                time.sleep(0.25)

        watcher = threading.Thread(target=watch)
        watcher.start()
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 262144,
            }
        )
        started = time.monotonic()
        for i in range(count):
            while True:
                try:
                    producer.produce("t", key=b"%d" % i, value=b"x" * 100)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(60)
        acked = time.monotonic()
        metrics = scrape()
        while mode != "disabled" and metrics.get(rows_key, 0) < count:
            if time.monotonic() - acked > 300:
                break
            time.sleep(0.1)
            metrics = scrape()
        visible = time.monotonic()
        stop.set()
        watcher.join()
        produce_s = acked - started
        print(
            f"mode {mode}: {count} records produced in {produce_s:.2f} s"
            f" ({count / produce_s:,.0f}/s); every row visible {visible - acked:.2f} s after"
            f" the last ack; largest lag seen {max(lags or [0]):.2f} s;"
            f" commits {metrics.get(commits_key, 0):.0f}"
        )
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
