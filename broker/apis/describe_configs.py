"""DescribeConfigs (key 32), versions 1-4: topic, broker and group settings, with their
sources.

Topic settings show the per-topic value (source TOPIC_CONFIG), else the broker's setting it
defaults to (STATIC_BROKER_CONFIG when set in the broker's properties, DEFAULT_CONFIG when
not). A group's configs (group_configs.py) show its own value (GROUP_CONFIG), else the broker
setting it defaults to; any group id may be described, as in Kafka (configs may precede the
group). Synonyms list that chain when asked for. Passwords (``ssl.key.password``,
``sasl.jaas.config``) are flagged sensitive and their values never given, as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from dataclasses import dataclass

from headrace.broker.config.settings import BROKER_SETTINGS, TOPIC_SETTINGS
from headrace.broker.coordinator.group.group_configs import GROUP_SETTINGS
from headrace.broker.security.authorizer import GROUP as ACL_GROUP
from headrace.broker.security.authorizer import TOPIC as ACL_TOPIC
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.DescribeConfigsResponse
TOPIC, BROKER, GROUP = 2, 4, 32
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8
CONFIG_TYPES = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "password": 9,
}


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    value: str
    source: int
    type: str
    doc: str
    synonyms: tuple[tuple[str, str, int], ...]


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_entries(broker: Broker, topic) -> list[Entry]:
    entries = []
    for name, setting in sorted(TOPIC_SETTINGS.items()):
        synonyms = []
        if name in topic.configs:
            synonyms.append((name, _text(topic.configs[name]), TOPIC_CONFIG))
        if setting.name in broker.config.explicit:
            synonyms.append(
                (setting.name, _text(broker.config[setting.name]), STATIC_BROKER_CONFIG)
            )
        synonyms.append((setting.name, _text(setting.default), DEFAULT_CONFIG))
        _, value, source = synonyms[0]
        entries.append(Entry(name, value, source, setting.type, setting.doc, tuple(synonyms)))
    return entries


def broker_entries(broker: Broker) -> list[Entry]:
    entries = []
    for name, setting in sorted(BROKER_SETTINGS.items()):
        synonyms = []
        if name in broker.config.explicit:
            synonyms.append((name, _text(broker.config[name]), STATIC_BROKER_CONFIG))
        synonyms.append((name, _text(setting.default), DEFAULT_CONFIG))
        _, value, source = synonyms[0]
        entries.append(Entry(name, value, source, setting.type, setting.doc, tuple(synonyms)))
    return entries


def group_entries(broker: Broker, group_id: str) -> list[Entry]:
    own = broker.groups.configs.by_group.get(group_id, {})
    entries = []
    for name, setting in sorted(GROUP_SETTINGS.items()):
        synonyms = []
        if name in own:
            synonyms.append((name, str(own[name]), GROUP_CONFIG))
        if setting.default is None:  # a string config with a default of its own
            synonyms.append((name, str(setting.fixed_default), DEFAULT_CONFIG))
        else:
            default = BROKER_SETTINGS[setting.default]
            if default.name in broker.config.explicit:
                synonyms.append(
                    (default.name, _text(broker.config[default.name]), STATIC_BROKER_CONFIG)
                )
            synonyms.append((default.name, _text(default.default), DEFAULT_CONFIG))
        _, value, source = synonyms[0]
        entries.append(Entry(name, value, source, setting.type, setting.doc, tuple(synonyms)))
    return entries


def config_denied(broker: Broker, session, operation: int, res) -> int:
    """TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED when the principal may not
    do ``operation`` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on the resource, else 0: a topic's
    own, a group's own (GROUP_AUTHORIZATION_FAILED), the cluster's for a broker."""
    authorizer = broker.authorizer
    if res.resource_type == TOPIC:
        if not authorizer.allows(session, operation, ACL_TOPIC, res.resource_name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif res.resource_type == GROUP:
        if not authorizer.allows(session, operation, ACL_GROUP, res.resource_name):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not authorizer.allows_cluster(session, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def handle(broker: Broker, header, request: messages.DescribeConfigsRequest):
    results = []
    for res in request.resources:
        result = R.DescribeConfigsResult(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=[],
        )
        results.append(result)
        denied = config_denied(broker, header.session, Operation.DESCRIBE_CONFIGS, res)
        if denied:
            result.error_code = denied
            continue
        if res.resource_type == TOPIC:
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"Topic '{res.resource_name}' does not exist."
                continue
            entries = config_entries(broker, topic)
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Unknown broker '{res.resource_name}'."
                continue
            entries = broker_entries(broker)
        elif res.resource_type == GROUP:
            if not res.resource_name:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = "Group name must not be empty"
                continue
            entries = group_entries(broker, res.resource_name)
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Resource type {res.resource_type} is not supported."
            continue
        keys = res.configuration_keys
        for e in entries:
            if keys is not None and e.name not in keys:
                continue
            sensitive = e.type == "password"  # as Kafka: never shown, only flagged
            result.configs.append(
                R.DescribeConfigsResourceResult(
                    name=e.name,
                    value=None if sensitive else e.value,
                    read_only=res.resource_type == BROKER,
                    config_source=e.source,
                    is_default=e.source == DEFAULT_CONFIG,
                    is_sensitive=sensitive,
                    synonyms=[
                        R.DescribeConfigsSynonym(name=n, value=None if sensitive else v, source=s)
                        for n, v, s in e.synonyms
                    ]
                    if request.include_synonyms
                    else [],
                    config_type=CONFIG_TYPES.get(e.type, 0),
                    documentation=e.doc if request.include_documentation else None,
                )
            )
    return R(throttle_time_ms=0, results=results)
