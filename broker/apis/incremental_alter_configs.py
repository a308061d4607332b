"""IncrementalAlterConfigs (key 44), versions 0-1: change some of a topic's settings, or of
a group's configs.

Each listed setting is changed by its operation and the others stay as they are: SET (0)
sets the value, DELETE (1) removes the per-topic value so the broker default applies again,
APPEND (2) and SUBTRACT (3) add or remove items of a list setting (``cleanup.policy``;
INVALID_CONFIG for other settings). The result is checked and saved as AlterConfigs does
(see alter_configs.py); a failure leaves the topic's settings unchanged.

Replication throttles are not kept (moves copy at full speed): removing one (DELETE of
``leader.replication.throttled.rate``... on a broker, of ``leader.replication.throttled.replicas``
... on a topic, what ``kafka-reassign-partitions --verify`` sends) succeeds and changes nothing,
as removing an unset setting does in Kafka; setting one is refused.

A group's configs (GROUP, ``kafka-configs --entity-type groups``; group_configs.py) take SET
and DELETE; each group's changes are checked against the broker's bounds and stored together
in the cluster's ``group_configs`` document, or refused with Kafka's INVALID_CONFIG message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import KazooException

from headrace.broker.cluster.documents import DocumentTooLarge
from headrace.broker.config.settings import TOPIC_SETTINGS
from headrace.broker.coordinator.group.group_configs import GroupConfigError
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

from .alter_configs import Refused, alter, parse
from .describe_configs import BROKER, GROUP, config_denied

R = messages.IncrementalAlterConfigsResponse
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER_THROTTLES = frozenset(
    (
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    )
)
TOPIC_THROTTLES = frozenset(
    ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
)


def _items(value: object) -> list[str]:
    return [w.strip() for w in str(value).split(",") if w.strip()]


def _changed(topic, res) -> dict[str, object]:
    """The topic's settings with each listed operation applied."""
    configs = dict(topic.configs)
    seen = set()
    for c in res.configs:
        if c.name in seen:
            raise Refused(ErrorCode.INVALID_REQUEST, f"{c.name} is listed twice")
        seen.add(c.name)
        if c.name in TOPIC_THROTTLES and c.config_operation == DELETE:
            continue  # none is ever set
        setting = TOPIC_SETTINGS.get(c.name)
        if setting is None:
            raise Refused(ErrorCode.INVALID_CONFIG, f"unknown topic config {c.name!r}")
        op = c.config_operation
        if op == SET:
            configs[c.name] = parse(c.name, c.value)
        elif op == DELETE:
            configs.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if setting.type != "list":
                raise Refused(
                    ErrorCode.INVALID_CONFIG,
                    f"{c.name} is not a list: APPEND and SUBTRACT do not apply",
                )
            current = _items(topic.setting(c.name) if c.name not in configs else configs[c.name])
            given = _items(c.value or "")
            if op == APPEND:
                new = current + [w for w in given if w not in current]
            else:
                new = [w for w in current if w not in given]
            configs[c.name] = parse(c.name, ",".join(new))
        else:
            raise Refused(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}")
    return configs


async def handle(broker: Broker, header, request: messages.IncrementalAlterConfigsRequest):
    cleared = [
        res
        for res in request.resources
        if res.resource_type == BROKER
        and res.configs
        and not config_denied(broker, header.session, Operation.ALTER_CONFIGS, res)
        and all(c.name in BROKER_THROTTLES and c.config_operation == DELETE for c in res.configs)
    ]
    groups = [res for res in request.resources if res.resource_type == GROUP]
    request.resources = [
        res
        for res in request.resources
        if res.resource_type != GROUP and all(res is not c for c in cleared)
    ]
    response = await alter(broker, header, request, R, _changed)
    for res in groups:
        code, message = await _alter_group(broker, header.session, res, request.validate_only)
        response.responses.append(
            R.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    for res in cleared:  # no throttle is ever set: nothing to remove
        response.responses.append(
            R.AlterConfigsResourceResponse(
                error_code=ErrorCode.NONE,
                error_message=None,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return response


async def _alter_group(broker: Broker, session, res, validate_only: bool) -> tuple[int, str | None]:
    denied = config_denied(broker, session, Operation.ALTER_CONFIGS, res)
    if denied:
        return denied, None
    if not res.resource_name:
        return ErrorCode.INVALID_REQUEST, "Group name must not be empty"
    changes: dict[str, str | None] = {}
    for c in res.configs:
        if c.name in changes:
            return ErrorCode.INVALID_REQUEST, f"{c.name} is listed twice"
        if c.config_operation not in (SET, DELETE):
            return (
                ErrorCode.INVALID_CONFIG,
                f"{c.name} is not a list: APPEND and SUBTRACT do not apply",
            )
        changes[c.name] = c.value if c.config_operation == SET else None
    configs = broker.groups.configs
    try:
        if validate_only:
            configs.changed(configs.by_group, res.resource_name, changes)
        else:
            await broker.group_config_document.change(
                lambda value: configs.changed(value, res.resource_name, changes)
            )
    except GroupConfigError as e:
        return e.code, e.message
    except DocumentTooLarge as e:
        return ErrorCode.INVALID_REQUEST, f"The group configs would not fit: {e}"
    except (OSError, KazooException) as e:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"The group configs could not be stored: {e}"
    return ErrorCode.NONE, None
