"""``headrace topics ...`` and ``headrace groups ...`` run as a user runs them (the installed
command in a child process) against real brokers, one alone and a cluster of three, with
real clients making the groups."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer

from headrace.broker.tools.process import BrokerProcess


def headrace(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "headrace", *args, "--bootstrap-server", bootstrap]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def as_json(bootstrap: str, *args: str):
    return json.loads(headrace(bootstrap, *args, "--json").stdout)


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """Read ``count`` records in group ``group``, commit them, leave the group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < count and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == count
    consumer.commit(asynchronous=False)
    consumer.close()


def test_topics_commands(broker):
    b = broker.bootstrap
    out = headrace(b, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000")
    assert out.stdout.strip() == "created orders, partitions 3"
    again = headrace(b, "topics", "create", "orders", check=False)
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in again.stderr
    assert "orders" in headrace(b, "topics", "list").stdout.split()
    assert "orders" in as_json(b, "topics", "list")

    produce(b, "orders", {0: 5, 1: 2})
    (orders,) = as_json(b, "topics", "describe", "orders")
    assert orders["configs"] == {"retention.ms": "3600000"}
    assert [(p["partition"], p["leader"], p["log_end_offset"]) for p in orders["partitions"]] == [
        (0, 1, 5),
        (1, 1, 2),
        (2, 1, 0),
    ]
    text = headrace(b, "topics", "describe", "orders").stdout
    assert "retention.ms=3600000" in text
    assert text.splitlines()[0].split() == ["NAME", "TOPIC", "ID", "PARTITIONS", "REPLICATION", "FACTOR", "CONFIGS"]

    headrace(b, "topics", "alter", "orders", "--partitions", "4", "--config", "cleanup.policy=compact", "--delete-config", "retention.ms")
    (orders,) = as_json(b, "topics", "describe", "orders")
    assert len(orders["partitions"]) == 4
    assert orders["configs"] == {"cleanup.policy": "compact"}
    fewer = headrace(b, "topics", "alter", "orders", "--partitions", "2", check=False)
    assert fewer.returncode == 1 and "INVALID_PARTITIONS" in fewer.stderr

    headrace(b, "topics", "delete", "orders")
    assert "orders" not in as_json(b, "topics", "list")
    missing = headrace(b, "topics", "describe", "orders", check=False)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_groups_commands(broker):
    b = broker.bootstrap
    headrace(b, "topics", "create", "events", "--partitions", "2")
    produce(b, "events", {0: 6, 1: 4})
    consume_and_commit(b, "events", "readers", 10)
    produce(b, "events", {0: 3})

    listed = as_json(b, "groups", "list")
    assert {"group": "readers", "protocol_type": "consumer", "state": "Empty"} in listed
    (readers,) = as_json(b, "groups", "describe", "readers")
    assert readers["state"] == "Empty" and readers["members"] == []
    assert [(o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in readers["offsets"]] == [
        (0, 6, 9, 3),
        (1, 4, 4, 0),
    ]
    assert "readers: Empty" in headrace(b, "groups", "describe", "readers").stdout

    # a dry run changes nothing
    plan = as_json(b, "groups", "reset-offsets", "readers", "--all-topics", "--to-earliest")
    assert plan["executed"] is False
    assert [o["new_offset"] for o in plan["offsets"]] == [0, 0]
    assert [o["committed_offset"] for o in as_json(b, "groups", "describe", "readers")[0]["offsets"]] == [6, 4]
    # executed: partition 0 back by 4, partition 1 untouched; shifts stay within the log
    headrace(b, "groups", "reset-offsets", "readers", "--topic", "events:0", "--shift-by", "-4", "--execute")
    headrace(b, "groups", "reset-offsets", "readers", "--topic", "events:1", "--shift-by", "100", "--execute")
    offsets = as_json(b, "groups", "describe", "readers")[0]["offsets"]
    assert [(o["committed_offset"], o["lag"]) for o in offsets] == [(2, 7), (4, 0)]
    # a consumer of the group starts where the reset put it
    consumer = Consumer({"bootstrap.servers": b, "group.id": "readers", "enable.auto.commit": False})
    consumer.subscribe(["events"])
    first = None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            first = (msg.partition(), msg.offset())
    assert first == (0, 2)
    # while it is a member, resets and deletion are refused
    busy = headrace(b, "groups", "reset-offsets", "readers", "--all-topics", "--to-latest", "--execute", check=False)
    assert busy.returncode == 1 and "stop its consumers first" in busy.stderr
    nonempty = headrace(b, "groups", "delete", "readers", check=False)
    assert nonempty.returncode == 1 and "NON_EMPTY_GROUP" in nonempty.stderr
    consumer.close()

    headrace(b, "groups", "delete", "readers")
    assert all(g["group"] != "readers" for g in as_json(b, "groups", "list"))
    gone = headrace(b, "groups", "delete", "readers", check=False)
    assert gone.returncode == 1 and "GROUP_ID_NOT_FOUND" in gone.stderr


def test_an_unreachable_broker_is_a_clear_error():
    done = headrace("127.0.0.1:1", "topics", "list", check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("headrace: cannot reach 127.0.0.1:1")


@pytest.fixture
def three_brokers(tmp_path, zk_connect):
    brokers = []
    try:
        for node in (1, 2, 3):
            b = BrokerProcess(
                tmp_path / f"node{node}",
                {"zookeeper.connect": zk_connect, "node.id": node, "zookeeper.session.timeout.ms": 4000},
                args=["--workers", "1"],
            )
            brokers.append(b)
            b.start()
        yield brokers
    finally:
        for b in brokers:
            b.kill()


def test_commands_against_a_cluster(three_brokers):
    b = three_brokers[0].bootstrap
    headrace(b, "topics", "create", "spread", "--partitions", "6")
    deadline = time.monotonic() + 30
    while True:  # every broker learns of the new topic through its watches
        (spread,) = as_json(b, "topics", "describe", "spread")
        if all(p["leader"] >= 0 for p in spread["partitions"]) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert spread["replication_factor"] == 1
    assert len({p["leader"] for p in spread["partitions"]}) > 1
    produce(b, "spread", {p: 1 for p in range(6)})
    # log end offsets come from each partition's leader (another broker answers NOT_LEADER)
    (spread,) = as_json(three_brokers[1].bootstrap, "topics", "describe", "spread")
    assert [p["log_end_offset"] for p in spread["partitions"]] == [1] * 6
    consume_and_commit(b, "spread", "cluster-readers", 6)
    # the group lives on its coordinator, wherever that is; list asks every broker
    assert any(g["group"] == "cluster-readers" for g in as_json(b, "groups", "list"))
    (group,) = as_json(three_brokers[2].bootstrap, "groups", "describe", "cluster-readers")
    assert sorted(o["committed_offset"] for o in group["offsets"]) == [1] * 6
    assert all(o["lag"] == 0 for o in group["offsets"])
    headrace(b, "groups", "delete", "cluster-readers")
    headrace(b, "topics", "delete", "spread")
    deadline = time.monotonic() + 30
    while "spread" in as_json(b, "topics", "list") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "spread" not in as_json(b, "topics", "list")


def test_a_kip848_group_is_described_and_protected(broker):
    """A group of KIP-848's consumer protocol (DescribeGroups calls it Dead): described
    through ConsumerGroupDescribe, and its offsets are not reset while it has a member."""
    b = broker.bootstrap
    headrace(b, "topics", "create", "feed", "--partitions", "2")
    produce(b, "feed", {0: 3, 1: 3})
    consumer = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": "kip848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["feed"])
    try:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 6 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == 6
        consumer.commit(asynchronous=False)
        (group,) = as_json(b, "groups", "describe", "kip848")
        assert group["state"] == "Stable" and group["protocol_type"] == "consumer"
        (member,) = group["members"]
        assert [(o["partition"], o["committed_offset"], o["lag"], o["member_id"]) for o in group["offsets"]] == [
            (0, 3, 0, member["member_id"]),
            (1, 3, 0, member["member_id"]),
        ]
        busy = headrace(b, "groups", "reset-offsets", "kip848", "--all-topics", "--to-earliest", "--execute", check=False)
        assert busy.returncode == 1 and "Stable with 1 member(s)" in busy.stderr
    finally:
        consumer.close()
    deadline = time.monotonic() + 30
    while as_json(b, "groups", "describe", "kip848")[0]["members"] and time.monotonic() < deadline:
        time.sleep(0.2)
    headrace(b, "groups", "reset-offsets", "kip848", "--all-topics", "--to-earliest", "--execute")
    assert [o["committed_offset"] for o in as_json(b, "groups", "describe", "kip848")[0]["offsets"]] == [0, 0]
