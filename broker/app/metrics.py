"""The broker's Prometheus metrics: what is counted on the request path, what is read at scrape.

How this works
--------------
Nothing here runs per record. The request path does a few plain-Python increments per request
(all on the event loop, so no locks): ``request_done`` adds the request's latency to its API
and version's histogram (a bisect into fixed buckets) and counts the error codes of its
response; Produce and Fetch add each partition's batch bytes to their topic's byte counts;
the flush stage reports each group commit (``flushed``). Everything else is read when
Prometheus scrapes, by ``BrokerCollector.collect`` (metrics_collector.py) on the event loop
(``metrics_http`` calls it there): partitions' offsets and sizes, handler queue depths,
connections, groups and their lag, log cleaner passes. Only a broker with ``metrics.port``
loads those two modules, and ``prometheus_client`` with them.

Label cardinality is bounded: APIs, versions and error codes are finite; topics by
``max.broker.partitions``; per-partition series (offsets, size, consumer lag) stop at
``metrics.partition.series.max`` per family, the rest counted in
``headrace_partition_series_dropped``.
"""

from __future__ import annotations

import time
from bisect import bisect_left

from headrace.protocol import response_error_codes

# seconds: a loopback request takes tens of microseconds, a long-polling fetch up to its
# max_wait_ms (500 ms by default), a produce waiting for an fsync a few milliseconds
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
GROUP_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Histogram:
    """Counts per bucket and a sum, for one label set. ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts):
            running += count
            out.append((_le(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


class BrokerMetrics:
    """What the request path counts. One per broker; the counts only ever grow (a deleted
    topic's byte counts are dropped with it)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], Histogram] = {}  # (api key, version) -> latency
        self.errors: dict[tuple[int, int], int] = {}  # (api key, error code) -> responses
        self.bytes_in: dict[str, int] = {}  # topic -> record batch bytes appended
        self.bytes_out: dict[str, int] = {}  # topic -> record bytes sent by Fetch
        self.flush_seconds = Histogram(FLUSH_BUCKETS)
        self.flush_group = Histogram(GROUP_SIZE_BUCKETS)  # waiters completed by one flush
        self.flush_logs = 0  # log fsyncs in all
        self.fetch_reads = [0, 0]  # Fetch reads done on the event loop, in a read thread

    def request_done(self, api_key: int, version: int, started: float, response) -> None:
        """A request's response is encoded: its latency and its error codes."""
        hist = self.requests.get((api_key, version))
        if hist is None:
            hist = self.requests[(api_key, version)] = Histogram(LATENCY_BUCKETS)
        hist.observe(time.monotonic() - started)
        if response is not None:
            for code in response_error_codes(api_key, version, response):
                key = (api_key, code)
                self.errors[key] = self.errors.get(key, 0) + 1

    def flushed(self, seconds: float, waiters: int, logs: int) -> None:
        self.flush_seconds.observe(seconds)
        self.flush_group.observe(waiters)
        self.flush_logs += logs

    def topics_deleted(self, names) -> None:
        for name in names:
            self.bytes_in.pop(name, None)
            self.bytes_out.pop(name, None)
