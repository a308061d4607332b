"""Kafka 4.4's ``kafka-broker-api-versions`` against a broker: every API it reports this broker
lacks is one docs/apis.md lists as left out, with the reason, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from test_features import KAFKA_4_4, java
from test_moves import _kafka_tool

DOC = Path(__file__).resolve().parents[2] / "docs" / "apis.md"


def left_out_in_the_docs() -> set[int]:
    """The API keys of the table of APIs left out (``(38-41)``, ``(88, 89, 93)``)."""
    table = DOC.read_text().split("| APIs (keys) | why |", 1)[1].split("\n\n", 1)[0]
    keys: set[int] = set()
    for row in table.splitlines()[2:]:
        apis = row.split("|")[1]
        for group in re.findall(r"\(([\d, -]+)\)", apis):
            for part in group.split(","):
                low, _, high = part.strip().partition("-")
                keys.update(range(int(low), int(high or low) + 1))
    return keys


@java
def test_every_api_kafka_44_lists_is_here_or_left_out_in_the_docs(broker):
    shown = _kafka_tool("org.apache.kafka.tools.BrokerApiVersionsCommand", ["--bootstrap-server", broker.bootstrap],
                        version=KAFKA_4_4)
    assert shown.returncode == 0, shown.stderr
    unsupported = {int(k) for k in re.findall(r"\((\d+)\): UNSUPPORTED", shown.stdout)}
    assert unsupported == left_out_in_the_docs()
