"""AlterConfigs (key 33), versions 0-2: replace a topic's settings.

The listed settings become the topic's whole set of explicit settings: a setting that is not
listed goes back to its broker default (Kafka's non-incremental semantics; clients now prefer
IncrementalAlterConfigs). Names and values are checked as CreateTopics checks them
(INVALID_CONFIG); an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION. The new settings are
saved in ``topics.json`` and the partitions' logs use them at once: retention and
compaction settings are read by the log cleaner's next pass, segment settings from the next
append. Broker settings are static here (set in the properties file), so a broker resource
is refused with INVALID_REQUEST. ``validate_only`` checks without changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from collections.abc import Callable
from typing import Any

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.config.settings import ConfigError, validate_topic_setting
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .describe_configs import BROKER, TOPIC, config_denied

R = messages.AlterConfigsResponse


class Refused(Exception):
    """An alteration that cannot be applied: (error code, message)."""


def find_topic(broker: Broker, resource_type: int, name: str):
    """The topic a resource names, or Refused."""
    if resource_type == BROKER:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            "broker settings are static: set them in the broker's properties file",
        )
    if resource_type != TOPIC:
        raise Refused(ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported")
    topic = broker.topics.get(name)
    if topic is None:
        raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return topic


def parse(name: str, value: str | None) -> object:
    if value is None:
        raise Refused(ErrorCode.INVALID_CONFIG, f"{name}: a value is required")
    try:
        return validate_topic_setting(name, value)
    except ConfigError as e:
        raise Refused(ErrorCode.INVALID_CONFIG, str(e)) from None


VALIDATIONS = ("confluent.key.schema.validation", "confluent.value.schema.validation")


def registry_needed(
    broker: Broker, configs: dict[str, object], old: dict[str, object] | None = None
) -> str | None:
    """Why ``configs`` cannot be a topic's here: they turn on schema id validation (on in
    ``configs``, not in the topic's ``old`` settings) and the schema registry is off on this
    broker (as Confluent Server refuses it without a registry URL), else None."""
    if broker.schema_registry is not None:
        return None
    old = old or {}
    asked = [name for name in VALIDATIONS if configs.get(name) and not old.get(name)]
    if not asked:
        return None
    return (
        f"{asked[0]}=true needs the schema registry, which is off on this broker: set"
        " schema.registry.listeners on every broker"
    )


async def apply(broker: Broker, topic, configs: dict[str, object], validate_only: bool) -> None:
    problem = registry_needed(broker, configs, topic.configs)
    if problem:
        raise Refused(ErrorCode.INVALID_CONFIG, problem)
    if not validate_only:
        try:
            await broker.topics.set_configs(topic, configs)
        except OSError as e:
            raise Refused(ErrorCode.KAFKA_STORAGE_ERROR, str(e)) from None
        except TopicChangeError as e:
            raise Refused(e.error_code, e.message) from None


async def alter(broker: Broker, header, request, response_class, new_configs: Callable) -> Any:
    """What AlterConfigs and IncrementalAlterConfigs share: for each resource, find its topic,
    work out the topic's new settings with ``new_configs(topic, resource)`` (which raises
    Refused) and apply them; a refusal is that resource's answer. Authorization (Kafka's):
    ALTER_CONFIGS on the topic, or on the cluster for a broker."""
    responses = []
    for res in request.resources:
        out = response_class.AlterConfigsResourceResponse(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
        )
        responses.append(out)
        denied = config_denied(broker, header.session, Operation.ALTER_CONFIGS, res)
        if denied:
            out.error_code = denied
            continue
        try:
            topic = find_topic(broker, res.resource_type, res.resource_name)
            await apply(broker, topic, new_configs(topic, res), request.validate_only)
        except Refused as e:
            out.error_code, out.error_message = e.args
    return response_class(throttle_time_ms=0, responses=responses)


def _replaced(topic, res) -> dict[str, object]:
    """The listed settings, and only them."""
    configs: dict[str, object] = {}
    for c in res.configs:
        if c.name in configs:
            raise Refused(ErrorCode.INVALID_REQUEST, f"{c.name} is listed twice")
        configs[c.name] = parse(c.name, c.value)
    return configs


async def handle(broker: Broker, header, request: messages.AlterConfigsRequest):
    return await alter(broker, header, request, R, _replaced)
