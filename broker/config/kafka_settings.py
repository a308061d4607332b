"""Apache Kafka's broker settings that Headrace reads differently: an unmodified Kafka
``server.properties`` starts Headrace.

``fold(values)`` turns a Kafka-style set of settings into Headrace's, before they are
checked against ``BROKER_SETTINGS`` (config.py); it returns the settings and the names it
accepted without effect, which the broker lists in one warning at start-up. Three kinds:

* ``IGNORED``: Kafka settings that change nothing here (network and I/O thread counts, socket
  buffer sizes, replication factors of the internal topics of a one-replica broker...). A name
  that Headrace has itself (``BROKER_SETTINGS``) is never taken as ignored.
* Kafka's coarser units: ``log.retention.hours`` and ``log.retention.minutes`` give
  ``log.retention.ms``, ``log.roll.hours`` gives ``log.roll.ms``, each only when the finer
  setting is not given (Kafka's precedence).
* KRaft, for the one combined node Kafka's own single-node file describes:
  ``process.roles`` with ``broker`` in it, ``controller.quorum.voters`` naming only this node
  (or one ``controller.quorum.bootstrap.servers``), and ``controller.listener.names``, whose
  listeners are dropped from ``listeners`` and ``advertised.listeners`` (Headrace has no
  controller listener). Anything that describes more nodes is an error: a Headrace cluster is
  formed through ``zookeeper.connect``, and starting as a lone broker would hide that.

A name in none of these and not Headrace's own stays an error (config.py).
"""

from __future__ import annotations

from .settings import BROKER_SETTINGS, ConfigError

# Kafka broker settings that change nothing in Headrace, with why
IGNORED: dict[str, str] = {
    "num.network.threads": "one event loop reads and writes every connection",
    "num.replica.fetchers": "one fetcher task per source broker",
    "num.replica.alter.log.dirs.threads": "one data directory",
    "background.threads": "background jobs are tasks of the event loop",
    "log.cleaner.threads": "the cleaner runs one pass at a time",
    "log.cleaner.io.buffer.size": "the cleaner reads whole batches",
    "log.cleaner.io.buffer.load.factor": "the cleaner's key map sizes itself",
    "log.cleaner.io.max.bytes.per.second": "the cleaner is not throttled",
    "socket.receive.buffer.bytes": "the kernel's socket buffer sizes are kept",
    "socket.listen.backlog.size": "the listen backlog is fixed",
    "replica.socket.receive.buffer.bytes": "the kernel's socket buffer sizes are kept",
    "log.preallocate": "segment files grow as they are written",
    "log.flush.scheduler.interval.ms": "due flushes are found by the periodic flush",
    "log.flush.start.offset.checkpoint.interval.ms": "log start offsets are written at once",
    "log.roll.jitter.ms": "segments roll at log.roll.ms exactly",
    "log.roll.jitter.hours": "segments roll at log.roll.ms exactly",
    "log.segment.delete.delay.ms": "deleted segments are removed at once",
    "offsets.load.buffer.size": "__consumer_offsets is replayed batch by batch",
    "offsets.topic.compression.codec": "offset commits are written uncompressed",
    "transaction.state.log.load.buffer.size": "__transaction_state is replayed batch by batch",
    "metric.reporters": "no JMX metrics",
    "metrics.num.samples": "no JMX metrics",
    "metrics.sample.window.ms": "no JMX metrics",
    "metrics.recording.level": "no JMX metrics",
    "kafka.metrics.reporters": "no JMX metrics",
    "kafka.metrics.polling.interval.secs": "no JMX metrics",
    "auto.include.jmx.reporter": "no JMX metrics",
}

# coarser unit -> (the setting it gives, milliseconds per unit), finest first
_UNITS = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}
_KRAFT = ("process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers")


def fold(values: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Kafka's settings as Headrace's (see the module docstring): the settings, and the
    names accepted without effect, sorted. Raises ``ConfigError``."""
    values = dict(values)
    ignored = [n for n in values if n in IGNORED and n not in BROKER_SETTINGS]
    for name in ignored:
        del values[name]
    for name, (target, ms) in _UNITS.items():
        if name in values and name not in BROKER_SETTINGS:
            text = values.pop(name)
            try:
                amount = int(text.strip())
            except ValueError:
                raise ConfigError(f"{name}: {text!r} is not a valid int") from None
            values.setdefault(target, str(amount * ms if amount >= 0 else -1))
    if any(n in values for n in (*_KRAFT, "controller.listener.names")):
        ignored += _fold_kraft(values)
    return values, sorted(ignored)


def _fold_kraft(values: dict[str, str]) -> list[str]:
    node_id = values.get("node.id", str(BROKER_SETTINGS["node.id"].default)).strip()
    roles = {r.strip() for r in values.get("process.roles", "broker").split(",") if r.strip()}
    if not roles <= {"broker", "controller"} or "broker" not in roles:
        raise ConfigError(
            f"process.roles: {values['process.roles']!r}: Headrace runs brokers only (a"
            " combined broker,controller node is taken as a broker; there is no KRaft quorum)"
        )
    voters = [v.strip() for v in values.get("controller.quorum.voters", "").split(",")]
    voters = [v for v in voters if v]
    if voters and (len(voters) > 1 or voters[0].split("@", 1)[0].strip() != node_id):
        raise ConfigError(
            f"controller.quorum.voters: {values['controller.quorum.voters']!r} describes a"
            " KRaft cluster of several nodes; a Headrace cluster is formed through"
            " zookeeper.connect"
        )
    servers = values.get("controller.quorum.bootstrap.servers", "").split(",")
    if len([s for s in servers if s.strip()]) > 1:
        raise ConfigError(
            "controller.quorum.bootstrap.servers: a KRaft cluster of several nodes; a Headrace"
            " cluster is formed through zookeeper.connect"
        )
    if (voters or any(s.strip() for s in servers)) and "controller" not in roles:
        raise ConfigError(
            "process.roles: this broker's controller is another node; a Headrace cluster is"
            " formed through zookeeper.connect"
        )
    folded = [n for n in _KRAFT if n in values]
    for name in folded:
        del values[name]
    controllers = values.pop("controller.listener.names", "")
    if controllers:
        folded.append("controller.listener.names")
        names = {n.strip().upper() for n in controllers.split(",") if n.strip()}
        for setting in ("listeners", "advertised.listeners"):
            if setting in values:
                kept = [
                    item
                    for item in values[setting].split(",")
                    if item.strip() and item.split("://", 1)[0].strip().upper() not in names
                ]
                values[setting] = ",".join(kept)
    return folded
