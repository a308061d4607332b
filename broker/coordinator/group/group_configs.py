"""Group configs: the GROUP config resource (``kafka-configs --entity-type groups``), settings
of one group that override the broker's for it.

How this works
--------------
``GROUP_SETTINGS`` are the group configs the coordinators and the share-partitions honour.
An int one has the broker setting that is its default and the two broker settings that bound
it (Kafka's names: ``consumer.session.timeout.ms`` defaults to
``group.consumer.session.timeout.ms`` and lies within
``group.consumer.min/max.session.timeout.ms``; ``share.record.lock.duration.ms`` within
``group.share.min/max.record.lock.duration.ms``); a few have one bound only, as in Kafka
(``streams.num.standby.replicas`` at most ``group.streams.max.standby.replicas``,
``streams.initial.rebalance.delay.ms`` at least 0). A string one has a fixed default and a
check of its own (``share.auto.offset.reset``: earliest, latest or by_duration:<ISO 8601
duration>; ``share.isolation.level``). A name Kafka knows for something Headrace does not
run (share groups' dead-letter queues; streams groups' assignment interval, rack-aware
tags, warm-up replicas, assignor choice) is refused as unknown, not stored and ignored.

The configs are cluster-wide, not a group's state: they may be set before the group exists
and stay when it is deleted, as in Kafka. They live in one document (cluster/documents.py)
named ``group_configs``, ``{group id: {name: value}}``, with at most ``group.config.max.groups``
groups. ``GroupConfigs`` holds the applied copy; its readers ask ``value(group id, name)``
whenever they need one (a session's deadline at every heartbeat, the heartbeat interval in
every answer, a share-partition's lock duration), so a change applies from the next use on
every broker; ``value`` gives an int for an int config and a str for a string one.
``changed`` computes a new document from the current one and a group's alterations, or raises
``GroupConfigError`` with Kafka's error code and message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headrace.protocol import ErrorCode


@dataclass(frozen=True, slots=True)
class GroupSetting:
    name: str
    default: str | None  # the broker setting it defaults to (int configs)
    low: str | None  # broker settings bounding it (int configs)
    high: str | None
    doc: str
    type: str = "int"  # or "string"
    fixed_default: str | None = None  # a string config's default
    check: Callable[[str], str | None] | None = None  # a string config's: why refused, or None
    floor: int = 1  # an int config's least value, whatever the broker's bounds


SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_INITIAL_REBALANCE_DELAY = "streams.initial.rebalance.delay.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
STRING_CONFIGS = (SHARE_AUTO_OFFSET_RESET, SHARE_ISOLATION_LEVEL, DLQ_TOPIC, DLQ_COPY_RECORD)

# Java's Duration.parse: PnDTnHnMn.nS, each part optional (at least one), signs allowed
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def duration_ms(text: str) -> int | None:
    """An ISO 8601 duration (``PT1H``, ``P1DT2.5S``, Java's ``Duration.parse``) in
    milliseconds, or None when it is not one."""
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    sign, days, time, hours, minutes, seconds, fraction = m.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        return None
    if time is not None and hours is None and minutes is None and seconds is None:
        return None  # "PT" alone
    nanos = int((fraction or "").ljust(9, "0")) if fraction else 0
    if seconds is not None and seconds.startswith("-"):
        nanos = -nanos
    total = (
        int(days or 0) * 86_400_000_000_000
        + int(hours or 0) * 3_600_000_000_000
        + int(minutes or 0) * 60_000_000_000
        + int(seconds or 0) * 1_000_000_000
        + nanos
    )
    return (-total if sign == "-" else total) // 1_000_000


def auto_offset_reset(text: str) -> tuple[str, int | None]:
    """``share.auto.offset.reset`` read: ("earliest", None), ("latest", None) or
    ("by_duration", milliseconds back from now); ValueError when it is none of them (Kafka
    compares case-sensitively and refuses a negative duration)."""
    if text in ("earliest", "latest"):
        return text, None
    if text.startswith("by_duration:"):
        ms = duration_ms(text[len("by_duration:") :])
        if ms is not None and ms >= 0:
            return "by_duration", ms
    raise ValueError(text)


def _check_auto_offset_reset(text: str) -> str | None:
    try:
        auto_offset_reset(text)
    except ValueError:
        return (
            f"Invalid value `{text}` for configuration {SHARE_AUTO_OFFSET_RESET}. The value must"
            " be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )
    return None


def _check_dlq_topic(text: str) -> str | None:
    if text.startswith("__"):
        return f"{DLQ_TOPIC}: DLQ topic name must not start with '__'"
    return None


def _check_boolean(text: str) -> str | None:
    if text.lower() in ("true", "false"):
        return None
    return "Expected value to be either true or false"


ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def _check_isolation_level(text: str) -> str | None:
    if text in ISOLATION_LEVELS:
        return None
    return "String must be one of: " + ", ".join(ISOLATION_LEVELS)


def _bounded(name: str, doc: str, floor: int = 1) -> GroupSetting:
    """An int group config ``<kind>.<rest>`` defaulting to broker setting
    ``group.<kind>.<rest>`` and bounded by ``group.<kind>.min.<rest>`` and
    ``group.<kind>.max.<rest>``; never below ``floor`` (Kafka's own check of the value)."""
    kind, _, rest = name.partition(".")
    return GroupSetting(
        name,
        f"group.{name}",
        f"group.{kind}.min.{rest}",
        f"group.{kind}.max.{rest}",
        doc,
        floor=floor,
    )


GROUP_SETTINGS = {
    s.name: s
    for s in (
        _bounded(
            SESSION_TIMEOUT,
            "The timeout to detect client failures when using the consumer group protocol.",
        ),
        _bounded(
            HEARTBEAT_INTERVAL,
            "The heartbeat interval given to the members of a consumer group.",
        ),
        _bounded(
            SHARE_SESSION_TIMEOUT,
            "How long a share group member may go without a heartbeat before it is removed.",
        ),
        _bounded(
            SHARE_HEARTBEAT_INTERVAL,
            "How often the members of a share group are told to heartbeat.",
        ),
        _bounded(
            SHARE_RECORD_LOCK_DURATION,
            "How long a member holds records delivered to it (the acquisition lock) before"
            " they may be delivered again.",
            floor=1000,
        ),
        _bounded(
            SHARE_DELIVERY_COUNT_LIMIT,
            "How many times one record may be delivered to the share group before it is archived.",
            floor=2,
        ),
        _bounded(
            SHARE_PARTITION_MAX_RECORD_LOCKS,
            "How many records of one share-partition may be delivered and not yet"
            " acknowledged at once.",
            floor=100,
        ),
        _bounded(
            STREAMS_SESSION_TIMEOUT,
            "The timeout to detect client failures when using the streams group protocol.",
        ),
        _bounded(
            STREAMS_HEARTBEAT_INTERVAL,
            "The heartbeat interval given to the members of a streams group.",
        ),
        GroupSetting(
            STREAMS_NUM_STANDBY_REPLICAS,
            "group.streams.num.standby.replicas",
            None,
            "group.streams.max.standby.replicas",
            "The number of standby replicas for each stateful task of a streams group.",
            floor=0,
        ),
        GroupSetting(
            STREAMS_INITIAL_REBALANCE_DELAY,
            "group.streams.initial.rebalance.delay.ms",
            None,
            None,
            "How long the coordinator waits for more members of a new streams group to join"
            " before its first assignment.",
            floor=0,
        ),
        GroupSetting(
            SHARE_AUTO_OFFSET_RESET,
            None,
            None,
            None,
            "Where a share-partition starts when the group has no state for it: earliest,"
            " latest, or by_duration:<ISO 8601 duration> (the first record at most that long"
            " ago).",
            type="string",
            fixed_default="latest",
            check=_check_auto_offset_reset,
        ),
        GroupSetting(
            SHARE_ISOLATION_LEVEL,
            None,
            None,
            None,
            "read_committed: a share group is delivered only committed transactional records;"
            " read_uncommitted: every record.",
            type="string",
            fixed_default="read_uncommitted",
            check=_check_isolation_level,
        ),
        GroupSetting(
            DLQ_TOPIC,
            None,
            None,
            None,
            "The share group's dead-letter queue: records it rejects or that reach"
            " share.delivery.count.limit are copied there (share.version 2); empty: none.",
            type="string",
            fixed_default="",
            check=_check_dlq_topic,
        ),
        GroupSetting(
            DLQ_COPY_RECORD,
            None,
            None,
            None,
            "Whether a dead letter carries the record's key and value, or only headers naming it.",
            type="string",
            fixed_default="false",
            check=_check_boolean,
        ),
    )
}
# (session, heartbeat): the first must exceed the second
_ORDERED = (
    (SESSION_TIMEOUT, HEARTBEAT_INTERVAL),
    (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL),
    (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL),
)


class GroupConfigError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GroupConfigs:
    """The group configs as this broker last applied them."""

    def __init__(self, config) -> None:
        self.config = config  # the broker's settings: defaults and bounds
        self.max_groups = int(config["group.config.max.groups"])
        self.by_group: dict[str, dict[str, Any]] = {}

    def value(self, group_id: str, name: str) -> Any:
        """The group's value of ``name``, else the broker's (or the config's own default): an
        int for an int config, a str for a string one (``STRING_CONFIGS``)."""
        own = self.by_group.get(group_id)
        if own is not None and name in own:
            return own[name]
        return self.default(name)

    def default(self, name: str) -> Any:
        """What ``name`` is for a group that does not set it."""
        setting = GROUP_SETTINGS[name]
        if setting.default is None:
            return setting.fixed_default
        return int(self.config[setting.default])

    def replace(self, document: Any) -> None:
        """Apply a stored document (None: no group has configs)."""
        self.by_group = {
            str(g): {
                n: (str(v) if GROUP_SETTINGS[n].type == "string" else int(v))
                for n, v in values.items()
                if n in GROUP_SETTINGS
            }
            for g, values in (document or {}).items()
        }

    def changed(self, document: Any, group_id: str, changes: dict[str, str | None]) -> dict:
        """The document with ``changes`` (name -> new value, None: back to the broker's)
        made to ``group_id``'s configs; GroupConfigError when one is refused."""
        out = {g: dict(v) for g, v in (document or {}).items()}
        values = out.get(group_id, {})
        for name, text in changes.items():
            setting = GROUP_SETTINGS.get(name)
            if setting is None:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}"
                )
            if text is None:
                values.pop(name, None)
                continue
            if setting.check is not None:
                why = setting.check(text)
                if why is not None:
                    raise GroupConfigError(
                        ErrorCode.INVALID_CONFIG,
                        f"Invalid value {text} for configuration {name}: {why}",
                    )
                values[name] = text
                continue
            try:
                value = int(text.strip())
            except ValueError:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {text} for configuration {name}: Not a number of type INT",
                ) from None
            if value < setting.floor:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {text} for configuration {name}: Value must be at least"
                    f" {setting.floor}",
                )
            low = None if setting.low is None else int(self.config[setting.low])
            high = None if setting.high is None else int(self.config[setting.high])
            if low is not None and high is not None and not low <= value <= high:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"{name} must be in the range {low} to {high} inclusive.",
                )
            if low is None and high is not None and value > high:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to {high}"
                )
            values[name] = value
        for longer, shorter in _ORDERED:
            if longer in values or shorter in values:
                own = {n: values.get(n, self.default(n)) for n in (longer, shorter)}
                if own[longer] <= own[shorter]:
                    raise GroupConfigError(
                        ErrorCode.INVALID_CONFIG, f"{longer} must be greater than {shorter}"
                    )
        if values:
            out[group_id] = values
        else:
            out.pop(group_id, None)
        if len(out) > self.max_groups:
            raise GroupConfigError(
                ErrorCode.INVALID_REQUEST,
                f"Too many groups with configs: at most {self.max_groups}"
                " (group.config.max.groups)",
            )
        return out
