"""Group configs: the GROUP config resource (``kafka-configs --entity-type groups``), settings
of one group that override the broker's for it.

How this works
--------------
``GROUP_SETTINGS`` are the group configs the coordinators honour, each with the broker
setting that is its default and the two broker settings that bound it (Kafka's names:
``consumer.session.timeout.ms`` defaults to ``group.consumer.session.timeout.ms`` and lies
within ``group.consumer.min/max.session.timeout.ms``). A name Kafka knows for a kind of group
Headrace does not run yet is refused as unknown, not stored and ignored.

The configs are cluster-wide, not a group's state: they may be set before the group exists
and stay when it is deleted, as in Kafka. They live in one document (cluster/documents.py)
named ``group_configs``, ``{group id: {name: value}}``, with at most ``group.config.max.groups``
groups. ``GroupConfigs`` holds the applied copy; the coordinators ask ``value(group id,
name)`` whenever they need one (a session's deadline at every heartbeat, the heartbeat
interval in every answer), so a change applies from the next heartbeat on every broker.
``changed`` computes a new document from the current one and a group's alterations, or raises
``GroupConfigError`` with Kafka's error code and message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headrace.protocol import ErrorCode


@dataclass(frozen=True, slots=True)
class GroupSetting:
    name: str
    default: str  # the broker setting it defaults to
    low: str  # broker settings bounding it
    high: str
    doc: str


SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"

GROUP_SETTINGS = {
    s.name: s
    for s in (
        GroupSetting(
            SESSION_TIMEOUT,
            "group.consumer.session.timeout.ms",
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
            "The timeout to detect client failures when using the consumer group protocol.",
        ),
        GroupSetting(
            HEARTBEAT_INTERVAL,
            "group.consumer.heartbeat.interval.ms",
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
            "The heartbeat interval given to the members of a consumer group.",
        ),
    )
}
# (session, heartbeat): the first must exceed the second
_ORDERED = ((SESSION_TIMEOUT, HEARTBEAT_INTERVAL),)


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
        self.by_group: dict[str, dict[str, int]] = {}

    def value(self, group_id: str, name: str) -> int:
        """The group's value of ``name``, else the broker's."""
        own = self.by_group.get(group_id)
        if own is not None and name in own:
            return own[name]
        return self._default(name)

    def _default(self, name: str) -> int:
        return int(self.config[GROUP_SETTINGS[name].default])

    def replace(self, document: Any) -> None:
        """Apply a stored document (None: no group has configs)."""
        self.by_group = {
            str(g): {n: int(v) for n, v in values.items() if n in GROUP_SETTINGS}
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
            try:
                value = int(text)
            except ValueError:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {text} for configuration {name}: Not a number of type INT",
                ) from None
            low, high = int(self.config[setting.low]), int(self.config[setting.high])
            if not low <= value <= high:
                raise GroupConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"{name} must be in the range {low} to {high} inclusive.",
                )
            values[name] = value
        for longer, shorter in _ORDERED:
            if longer in values or shorter in values:
                own = {n: values.get(n, self._default(n)) for n in (longer, shorter)}
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
