"""A broker's settings (``BrokerConfig``), read and checked as Kafka reads them.

Broker settings come from a Kafka-style properties file (``--config``) and ``--override``
pairs; an unknown name or a value of the wrong type is an error. Every setting, its type,
default and meaning is in settings.py's tables (with the choices and least values some have);
this module reads them, checks what one setting alone cannot say (the authorizer's and the
listeners' settings), and reads properties files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .settings import (
    BROKER_CHOICES,
    BROKER_MINIMUMS,
    BROKER_SETTINGS,
    LISTENER_SETTINGS,
    SASL_MECHANISMS,
    ConfigError,
    Setting,
    parse,
)

# the names Kafka's brokers take for an ACL authorizer: each turns Headrace's on
AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)


def super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:admin;User:broker``)."""
    users = frozenset(u.strip() for u in text.split(";") if u.strip())
    for user in users:
        if ":" not in user:
            raise ConfigError(f"super.users: {user!r} is not a principal (User:name)")
    return users


def _check_security(config: BrokerConfig) -> None:
    """The authorizer's settings (security/ reads them, checked)."""
    name = str(config["authorizer.class.name"]).strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name: {name!r} is not an authorizer Headrace has (one of"
            f" {', '.join(AUTHORIZER_CLASSES)}, or empty for none)"
        )
    super_users(str(config["super.users"]))


# Kafka's ranges for the share group settings (name -> (least, most))
SHARE_RANGES = {
    "group.share.max.size": (1, 1000),
    "group.share.delivery.count.limit": (2, 10),
    "group.share.min.delivery.count.limit": (2, 5),
    "group.share.max.delivery.count.limit": (5, 25),
    "group.share.record.lock.duration.ms": (1000, 3_600_000),
    "group.share.min.record.lock.duration.ms": (1000, 30_000),
    "group.share.max.record.lock.duration.ms": (30_000, 3_600_000),
    "group.share.partition.max.record.locks": (100, 10_000),
    "group.share.min.partition.max.record.locks": (100, 2000),
    "group.share.max.partition.max.record.locks": (2000, 10_000),
}
# each default lies within its bounds: group.share.<rest> within group.share.min/max.<rest>
SHARE_BOUNDED = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "record.lock.duration.ms",
    "delivery.count.limit",
    "partition.max.record.locks",
)


def _check_share_groups(config: BrokerConfig) -> None:
    """The share group settings, checked as Kafka checks them (same messages)."""
    for name, (least, most) in SHARE_RANGES.items():
        value = int(config[name])
        if value < least:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {least}"
            )
        if value > most:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be no more than {most}"
            )
    for rest in SHARE_BOUNDED:
        own, low, high = f"group.share.{rest}", f"group.share.min.{rest}", f"group.share.max.{rest}"
        if int(config[high]) < int(config[low]):
            raise ConfigError(f"{high} must be greater than or equal to {low}")
        if int(config[own]) < int(config[low]):
            raise ConfigError(f"{own} must be greater than or equal to {low}")
        if int(config[own]) > int(config[high]):
            raise ConfigError(f"{own} must be less than or equal to {high}")
    session, heartbeat = "group.share.session.timeout.ms", "group.share.heartbeat.interval.ms"
    if int(config[heartbeat]) >= int(config[session]):
        raise ConfigError(f"{heartbeat} must be less than {session}")


# settings with ranges (Kafka's where Kafka has the setting): name -> (lowest, highest)
RANGES = {
    "log.flush.threads": (1, 64),
    "iceberg.round.timeout.ms": (1000, 2**31 - 1),
    "iceberg.worker.nice": (0, 19),
    "share.coordinator.state.topic.num.partitions": (1, 2**31 - 1),
    "share.coordinator.state.topic.replication.factor": (1, 2**15 - 1),
    "share.coordinator.state.topic.min.isr": (1, 2**15 - 1),
    "share.coordinator.state.topic.segment.bytes": (1, 2**31 - 1),
    "share.coordinator.state.topic.prune.interval.ms": (1, 2**31 - 1),
    "share.coordinator.snapshot.update.records.per.snapshot": (0, 500),
    "share.coordinator.write.timeout.ms": (1, 2**31 - 1),
    "share.coordinator.state.max.count": (1, 2**31 - 1),
    "share.coordinator.state.max.batches": (1, 2**31 - 1),
    "schema.registry.topic.replication.factor": (1, 2**15 - 1),
    "schema.registry.write.timeout.ms": (1, 2**31 - 1),
    "schema.registry.max.schemas": (1, 2**31 - 1),
    "schema.registry.max.subjects": (1, 2**31 - 1),
    "schema.registry.max.schema.bytes": (1, 2**31 - 1),
    "schema.registry.max.request.bytes": (1, 2**31 - 1),
    "schema.registry.max.connections": (1, 2**31 - 1),
    "schema.registry.max.total.schema.bytes": (1, 2**62),
}


def _check_ranges(config: BrokerConfig) -> None:
    for name, (lowest, highest) in RANGES.items():
        if not lowest <= int(config[name]) <= highest:
            raise ConfigError(f"{name}: {config[name]} is not in [{lowest}, {highest}]")


class BrokerConfig:
    """Broker settings: defaults, then a properties file, then overrides."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        from .kafka_settings import fold

        self.explicit: dict[str, object] = {}
        # Kafka's settings that change nothing here (listed in a warning at start), its
        # coarser units and a single KRaft node's settings (kafka_settings.py)
        values, self.ignored = fold(values or {})
        for name, text in values.items():
            setting = BROKER_SETTINGS.get(name) or _listener_setting(name)
            if setting is None:
                raise ConfigError(f"unknown setting {name!r}")
            if name.startswith("listener.name."):  # listener names are case-insensitive
                listener, _, rest = name[len("listener.name.") :].partition(".")
                name = f"listener.name.{listener.lower()}.{rest.lower()}"
            self.explicit[name] = parse(setting, text)
            choices = BROKER_CHOICES.get(setting.name)
            if choices is not None and self.explicit[name] not in choices:
                raise ConfigError(f"{name}: {text!r} is not one of {sorted(choices)}")
            value, least = self.explicit[name], BROKER_MINIMUMS.get(setting.name)
            if least is not None and isinstance(value, int) and value < least:
                raise ConfigError(f"{name}: {value} is below {least}")
        connection_overrides(str(self["max.connections.per.ip.overrides"]))  # valid?
        _check_security(self)
        _check_share_groups(self)
        _check_ranges(self)
        from .listeners import listeners

        listeners(self)  # valid?

    def __getitem__(self, name: str) -> Any:
        """The setting's value, of the setting's own type (bool, int, float, str or list)."""
        if name in self.explicit:
            return self.explicit[name]
        return BROKER_SETTINGS[name].default

    def source(self, name: str) -> str:
        return "static" if name in self.explicit else "default"

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str]) -> BrokerConfig:
        values: dict[str, str] = {}
        if path is not None:
            values.update(read_properties(Path(path).read_text()))
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--override wants key=value, got {item!r}")
            key, value = item.split("=", 1)
            values[key.strip()] = value
        return cls(values)

    def for_listener(self, listener: str, name: str) -> Any:
        """A security setting as listener ``listener`` sees it: ``listener.name.<listener>.
        <name>`` when set (the listener name in lower case, as Kafka writes it), else ``name``."""
        prefixed = f"listener.name.{listener.lower()}.{name}"
        if prefixed in self.explicit:
            return self.explicit[prefixed]
        return self[name] if name in BROKER_SETTINGS else ""


def _listener_setting(name: str) -> Setting | None:
    """The setting a ``listener.name.<listener>.<setting>`` name sets, if it is one a listener
    may set for itself (the security settings, and ``<mechanism>.sasl.jaas.config``)."""
    if not name.startswith("listener.name."):
        return None
    _, _, rest = name[len("listener.name.") :].partition(".")
    setting = LISTENER_SETTINGS.get(rest)
    if setting is None:
        mechanism, _, tail = rest.partition(".")
        if tail == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS:
            setting = LISTENER_SETTINGS["sasl.jaas.config"]
    return setting


def connection_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` as a dict."""
    overrides = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, count = item.rpartition(":")
        if not host or not count.strip().isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


def read_properties(text: str) -> dict[str, str]:
    """A Java properties file as Java reads it (``javaproperties``): ``=``, ``:`` or
    whitespace separators, ``#`` and ``!`` comments, line continuations, escapes; a later
    line wins over an earlier one."""
    import javaproperties  # (with xml and more: loaded only when a file is read)

    try:
        return javaproperties.loads(text)
    except ValueError as e:  # an invalid \u escape
        raise ConfigError(f"properties file: {e}") from None
