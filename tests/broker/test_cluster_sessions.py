"""A broker whose ZooKeeper session ended answers nothing, and takes up its partitions again
only once it has registered again and the controller has confirmed that registration (real
processes, SIGSTOP to outlive a session)."""

from __future__ import annotations

import os
import re
import signal
import struct
import time
import urllib.error
import urllib.request

from kafkawire import WireClient
from test_cluster import SESSION_MS, cluster, create, leaders, metadata, wait_for  # noqa: F401

from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch


def produce_code(broker, topic: str, index: int) -> int:
    request = messages.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(
                        index=index, records=build_batch([Record(key=None, value=b"x")])
                    )
                ],
            )
        ],
    )
    with WireClient(broker.port) as c:
        return c.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0].error_code


def ready(broker) -> int:
    """The status of the broker's /ready (its metrics port is in its log)."""
    port = next(re.search(r"metrics on http://[\d.]+:(\d+)/", x).group(1) for x in broker.lines if "metrics on http" in x)
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code


def answer_or_none(broker, topic: str, index: int) -> int | None:
    """``produce_code``, or None when the broker closes the connection without an answer."""
    try:
        return produce_code(broker, topic, index)
    except (ConnectionError, struct.error):
        return None


def test_a_broker_back_from_a_lost_session_serves_once_the_controller_confirms(cluster):
    brokers = cluster(3, **{"metrics.port": 0})
    wait_for(lambda: len(metadata(brokers[0]).brokers) == 3, 10, "every broker seen")
    controller = metadata(brokers[0]).controller_id
    back, third = [n for n in (1, 2, 3) if n != controller]
    returning, watcher, deciding = brokers[back - 1], brokers[third - 1], brokers[controller - 1]
    create(brokers, "sessions", 3, replica_assignment=[[1], [2], [3]])
    index = back - 1  # the partition the returning broker leads
    assert produce_code(returning, "sessions", index) == ErrorCode.NONE
    assert ready(returning) == 200

    os.kill(returning.pid, signal.SIGSTOP)  # outlive its session
    wait_for(lambda: leaders(watcher, "sessions")[index] == -1, SESSION_MS / 1000 + 10, "gone")
    os.kill(deciding.pid, signal.SIGSTOP)  # the controller cannot confirm anything now
    stopped = time.monotonic()
    try:
        os.kill(returning.pid, signal.SIGCONT)
        # (the controller elects it leader again: until then Metadata names no leader)
        wait_for(lambda: back in {b.node_id for b in metadata(watcher).brokers}, 10, "registered again")
        # registered, topics re-read, but not confirmed while the controller is frozen
        assert time.monotonic() - stopped < SESSION_MS / 1000  # its session still holds
        # fenced, it answers nothing: a connection is closed at once, unanswered
        assert answer_or_none(returning, "sessions", index) is None
        assert ready(returning) == 503  # fenced: not ready
    finally:
        os.kill(deciding.pid, signal.SIGCONT)
    # the controller wakes (or its session ended and another broker took over): confirmed
    wait_for(
        lambda: answer_or_none(returning, "sessions", index) == ErrorCode.NONE,
        SESSION_MS / 1000 + 15,
        "the returning broker serving again",
    )
    assert ready(returning) == 200
