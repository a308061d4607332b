"""IncrementalAlterConfigs (key 44), versions 0-1: change some of a topic's settings.

Each listed setting is changed by its operation and the others stay as they are: SET (0)
sets the value, DELETE (1) removes the per-topic value so the broker default applies again,
APPEND (2) and SUBTRACT (3) add or remove items of a list setting (``cleanup.policy``;
INVALID_CONFIG for other settings). The result is checked and saved as AlterConfigs does
(see alter_configs.py); a failure leaves the topic's settings unchanged.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

from .alter_configs import Refused, alter, parse
from .config import TOPIC_SETTINGS

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
MIN_VERSION, MAX_VERSION = 0, 1

R = messages.IncrementalAlterConfigsResponse
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


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


async def handle(broker, header, request):
    return await alter(broker, request, R, _changed)
