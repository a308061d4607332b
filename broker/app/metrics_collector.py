"""What Prometheus reads at scrape time: ``BrokerCollector`` (metrics.py says what is counted on
the request path; metrics_http.py serves it). Only a broker with ``metrics.port`` imports this
module, and with it ``prometheus_client``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from headrace.broker.share.share_partition import (
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
)
from headrace.protocol import ApiKey, ErrorCode

from .metrics import BrokerMetrics

SHARE_STATES = {
    AVAILABLE: "available",
    ACQUIRED: "acquired",
    ACKNOWLEDGED: "acknowledged",
    ARCHIVED: "archived",
}


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _counter(name: str, documentation: str, label: str, counts) -> CounterMetricFamily:
    """A counter with one series for each (label value, count) of ``counts``."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, n in counts:
        family.add_metric([value], n)
    return family


class BrokerCollector(Collector):
    """Every series of one broker, built at scrape time (on the event loop)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        metrics: BrokerMetrics = broker.metrics
        yield from self._requests(metrics)
        yield from self._traffic(metrics)
        yield from self._partitions()
        yield from self._flush(metrics)
        yield from self._connections()
        yield from self._groups()
        yield from self._cleaner()
        yield from self._iceberg()
        ready = GaugeMetricFamily(
            "headrace_ready", "1 once the logs are loaded and the broker serves (see /ready)"
        )
        ready.add_metric([], 1.0 if broker.ready else 0.0)
        yield ready
        down = GaugeMetricFamily(
            "headrace_coordinator_partitions_unavailable",
            "Partitions of an internal topic whose state could not be loaded at start-up:"
            " their groups or transactions answer COORDINATOR_LOAD_IN_PROGRESS",
            labels=["topic"],
        )
        for topic, parts in broker.unavailable_coordinator_partitions().items():
            down.add_metric([topic], len(parts))
        yield down

    def _iceberg(self) -> Iterator[Metric]:
        """Topics as Iceberg tables (``iceberg.enabled``): per topic, at this broker."""
        translator = self.broker.iceberg
        if translator is None:
            return
        labels = ["topic"]
        lag = GaugeMetricFamily(
            "headrace_iceberg_lag_seconds",
            "How long the oldest acknowledged, committed record of the topic that is not a"
            " row of its table yet has waited (0: every one is)",
            labels=labels,
        )
        rows = CounterMetricFamily(
            "headrace_iceberg_rows", "Rows committed to the topic's table", labels=labels
        )
        commits = CounterMetricFamily(
            "headrace_iceberg_commits", "Snapshots committed to the topic's table", labels=labels
        )
        conflicts = CounterMetricFamily(
            "headrace_iceberg_commit_conflicts",
            "Commits another writer beat (the round was read again from the table's offsets)",
            labels=labels,
        )
        errors = CounterMetricFamily(
            "headrace_iceberg_errors",
            "Rounds that failed (catalog, disk, records): retried after a backoff",
            labels=labels,
        )
        failing = GaugeMetricFamily(
            "headrace_iceberg_failing",
            "1 while the topic's last round failed (it is retried after a backoff)",
            labels=labels,
        )
        for name, state in sorted(translator.states.items()):
            lag.add_metric([name], translator.lag_seconds(name))
            rows.add_metric([name], state.rows)
            commits.add_metric([name], state.commits)
            conflicts.add_metric([name], state.conflicts)
            errors.add_metric([name], state.errors)
            failing.add_metric([name], 1.0 if state.failures else 0.0)
        yield from (lag, rows, commits, conflicts, errors, failing)
        budget = translator.budget
        for name, help_, now, peak in (
            (
                "headrace_iceberg_buffer_bytes",
                "Record bytes reserved for the rounds now, what their worker processes may read"
                " into memory (iceberg.buffer.max.bytes bounds it)",
                budget.held,
                budget.peak,
            ),
            (
                "headrace_iceberg_rounds_running",
                "Rounds writing tables now (iceberg.max.open.files bounds it)",
                translator.running,
                translator.peak_running,
            ),
        ):
            yield GaugeMetricFamily(name, help_, value=now)
            yield GaugeMetricFamily(name + "_peak", help_ + ": the most since start", value=peak)
        yield GaugeMetricFamily(
            "headrace_iceberg_partition_read_peak_bytes",
            "The most record bytes one round read of one partition since start"
            " (iceberg.partition.buffer.max.bytes bounds it)",
            value=translator.peak_partition_read,
        )

    def _requests(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        latency = HistogramMetricFamily(
            "headrace_request_duration_seconds",
            "Time from a request's handling to its encoded response, by API and version"
            " (the _count is the request count: rate() of it is the request rate)",
            labels=["api", "version"],
        )
        for (api_key, version), hist in sorted(metrics.requests.items()):
            latency.add_metric(
                [_api_name(api_key), str(version)], hist.buckets(), sum_value=hist.total
            )
        yield latency
        errors = CounterMetricFamily(
            "headrace_errors",
            "Error codes in responses (each topic, partition or group that carried one)",
            labels=["api", "error"],
        )
        for (api_key, code), n in sorted(metrics.errors.items()):
            errors.add_metric([_api_name(api_key), _error_name(code)], n)
        yield errors

    def _traffic(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        yield _counter(
            "headrace_topic_bytes_in",
            "Record batch bytes appended by Produce",
            "topic",
            sorted(metrics.bytes_in.items()),
        )
        yield _counter(
            "headrace_topic_bytes_out",
            "Record bytes sent by Fetch (consumers and replicas)",
            "topic",
            sorted(metrics.bytes_out.items()),
        )
        yield _counter(
            "headrace_fetch_reads",
            "Fetch reads: on the event loop (all in memory) or in a read thread",
            "thread",
            zip(("event_loop", "read_pool"), metrics.fetch_reads),
        )

    def _partitions(self) -> Iterator[Metric]:
        broker = self.broker
        limit = int(broker.config["metrics.partition.series.max"])
        labels = ["topic", "partition"]
        end = GaugeMetricFamily(
            "headrace_partition_log_end_offset", "Offset of the next record", labels=labels
        )
        start = GaugeMetricFamily(
            "headrace_partition_log_start_offset", "First offset kept", labels=labels
        )
        hw = GaugeMetricFamily("headrace_partition_high_watermark", "High watermark", labels=labels)
        size = GaugeMetricFamily(
            "headrace_partition_size_bytes", "Bytes of the partition's segments", labels=labels
        )
        parts = sorted(broker.topics.all_partitions(), key=lambda p: (p.topic.name, p.index))
        count = GaugeMetricFamily("headrace_partitions", "Partitions on this broker")
        count.add_metric([], len(parts))
        yield count
        for p in parts[:limit]:
            key = [p.topic.name, str(p.index)]
            plog = p.log
            end.add_metric(key, plog.log_end_offset)
            start.add_metric(key, plog.log_start_offset)
            hw.add_metric(key, p.high_watermark)
            size.add_metric(key, plog.size_in_bytes)
        yield from (end, start, hw, size)
        lag, lag_dropped = self._lag(limit)
        yield lag
        dropped = GaugeMetricFamily(
            "headrace_partition_series_dropped",
            "Per-partition series left out of this scrape (metrics.partition.series.max)",
            labels=["family"],
        )
        dropped.add_metric(["partition"], max(0, len(parts) - limit))
        dropped.add_metric(["consumer_group_lag"], lag_dropped)
        shares, shares_dropped = self._shares(limit)
        yield from shares
        dropped.add_metric(["share_partition"], shares_dropped)
        yield dropped

    def _shares(self, limit: int) -> tuple[list[Metric], int]:
        """Each share group's backlog on the partitions led here: what an autoscaler reads."""
        labels = ["group", "topic", "partition"]
        backlog = GaugeMetricFamily(
            "headrace_share_group_backlog",
            "Records below the high watermark the share group has not yet settled",
            labels=labels,
        )
        states = GaugeMetricFamily(
            "headrace_share_group_in_flight_records",
            "Records between the share-partition start and end offsets, by state",
            labels=[*labels, "state"],
        )
        topics = self.broker.topics
        shown = dropped = 0
        for (group_id, topic_id, index), sp in sorted(
            self.broker.shares.partitions.items(),
            key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2]),
        ):
            topic = topics.find(None, topic_id)
            part = topic.partition(index) if topic is not None else None
            if part is None:
                continue
            if shown >= limit:
                dropped += 1
                continue
            shown += 1
            key = [group_id, topic.name, str(index)]
            counts = sp.counts()
            for state, name in SHARE_STATES.items():
                states.add_metric([*key, name], counts[state])
            done = counts[ACKNOWLEDGED] + counts[ARCHIVED]
            backlog.add_metric(key, max(0, part.high_watermark - sp.start - done))
        return [backlog, states], dropped

    def _lag(self, limit: int) -> tuple[Metric, int]:
        groups = self.broker.groups
        lag = GaugeMetricFamily(
            "headrace_consumer_group_lag",
            "High watermark minus the committed offset, for partitions led here",
            labels=["group", "topic", "partition"],
        )
        shown = dropped = 0
        topics = self.broker.topics
        for group in [*groups.groups.values(), *groups.consumer.groups.values()]:
            for (topic_name, index), committed in sorted(group.offsets.items()):
                topic = topics.get(topic_name)
                part = topic.partition(index) if topic is not None else None
                if part is None:
                    continue  # led by another broker, or gone
                if shown >= limit:
                    dropped += 1
                    continue
                shown += 1
                value = max(0, part.high_watermark - committed.offset)
                lag.add_metric([group.group_id, topic_name, str(index)], value)
        return lag, dropped

    def _flush(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        seconds = HistogramMetricFamily(
            "headrace_flush_duration_seconds", "Duration of one group commit (fsyncs of its logs)"
        )
        seconds.add_metric([], metrics.flush_seconds.buckets(), metrics.flush_seconds.total)
        yield seconds
        group = HistogramMetricFamily(
            "headrace_flush_group_size",
            "Waiters (produce acks and other flushes) completed by one group commit",
        )
        group.add_metric([], metrics.flush_group.buckets(), metrics.flush_group.total)
        yield group
        logs = CounterMetricFamily("headrace_flush_log_fsyncs", "Logs fsynced by group commits")
        logs.add_metric([], metrics.flush_logs)
        yield logs

    def _connections(self) -> Iterator[Metric]:
        router = self.broker.router
        depth = GaugeMetricFamily(
            "headrace_handler_queue_depth",
            "Requests read and waiting for their handler queue",
            labels=["queue"],
        )
        conns = GaugeMetricFamily(
            "headrace_connections", "Open client connections", labels=["listener"]
        )
        by_listener = {x.name: 0 for x in self.broker.listeners}
        if router is not None:
            for i, n in enumerate(router.queue_depths()):
                depth.add_metric([str(i)], n)
            for conn in list(router.connections):
                name = getattr(conn.listener, "name", "")
                by_listener[name] = by_listener.get(name, 0) + 1
        for name, n in sorted(by_listener.items()):
            conns.add_metric([name], n)
        yield depth
        yield conns

    def _groups(self) -> Iterator[Metric]:
        groups = self.broker.groups
        states = GaugeMetricFamily(
            "headrace_consumer_groups",
            "Groups coordinated here, by type and state",
            labels=["type", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        for group in list(groups.groups.values()):
            key = ("classic", group.state.value)
            counts[key] = counts.get(key, 0) + 1
        for group in list(groups.consumer.groups.values()):
            key = ("consumer", group.state_name)
            counts[key] = counts.get(key, 0) + 1
        for share_group in list(groups.share.groups.values()):
            key = ("share", share_group.state_name)
            counts[key] = counts.get(key, 0) + 1
        for streams_group in list(groups.streams.groups.values()):
            key = ("streams", streams_group.state_name)
            counts[key] = counts.get(key, 0) + 1
        for (kind, state), n in sorted(counts.items()):
            states.add_metric([kind, state], n)
        yield states

    def _cleaner(self) -> Iterator[Metric]:
        cleaner = self.broker.cleaner
        yield _counter(
            "headrace_log_cleaner_passes",
            "Log cleaner passes completed",
            "kind",
            [("retention", cleaner.retention_passes), ("compaction", cleaner.compaction_passes)],
        )
        removed = CounterMetricFamily(
            "headrace_log_cleaner_segments_deleted", "Segments deleted by retention"
        )
        removed.add_metric([], cleaner.segments_deleted)
        yield removed
        compacted = CounterMetricFamily(
            "headrace_log_cleaner_bytes_freed", "Bytes freed by compaction"
        )
        compacted.add_metric([], cleaner.bytes_freed)
        yield compacted
