"""Kafka's own command-line tools, run through their main classes from Maven Central jars.

``bench/apache_kafka.py`` resolves the jars (``org.apache.kafka:kafka_2.13``, ``kafka-tools``)
with Maven and caches the class path in ``~/.cache/headrace/``; this program runs one tool
scenario against a broker (convention: compat/kit.py)::

    python compat/kafka-tools/scenarios.py [--version 3.9.2] BOOTSTRAP SCENARIO PREFIX

Data the tools write is checked with kafka-python (a Headrace dependency), and data they read
is produced with it, so every scenario checks the tool's own result, not just its exit code.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compat import kit  # noqa: E402
from compat.kit import WAIT_S, expect  # noqa: E402

_spec = importlib.util.spec_from_file_location("apache_kafka", ROOT / "bench" / "apache_kafka.py")
apache_kafka = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apache_kafka)

VERSION = apache_kafka.KAFKA_VERSION
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"


def since(*version: int) -> bool:
    """Whether the tools run are Kafka ``version`` (e.g. 4, 2) or later."""
    return tuple(int(x) for x in VERSION.split(".")[:len(version)]) >= version


def broker_api_versions_class() -> str:
    return ("org.apache.kafka.tools.BrokerApiVersionsCommand" if since(4)
            else "kafka.admin.BrokerApiVersionsCommand")


def console_producer_class() -> str:
    return "org.apache.kafka.tools.ConsoleProducer" if since(4) else "kafka.tools.ConsoleProducer"


def configs_class() -> str:
    # rewritten in Java and moved to the tools module (KAFKA-14588): in 4.4.0, not in 4.0.2
    return "org.apache.kafka.tools.ConfigCommand" if since(4, 4) else "kafka.admin.ConfigCommand"


def option(new: str, old: str) -> str:
    """KIP-1147 (Kafka 4.2) renamed some options; the old names still work but print a
    deprecation warning (the console consumer's on stdout, among the records it prints)."""
    return new if since(4, 2) else old


class ToolFailed(Exception):
    pass


def tool(main_class: str, args: list[str], stdin: str | None = None,
         timeout: float = 40) -> str:
    """Run a tool; return stdout. A non-zero exit raises ToolFailed with the telling line."""
    import subprocess
    cmd = ["java", *apache_kafka.TOOL_JVM_FLAGS, *apache_kafka.log_flags(VERSION, tool=True),
           "-cp", apache_kafka.classpath(VERSION), main_class, *args]
    try:
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) \
            else (exc.stdout or "")
        err = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
        raise ToolFailed(f"{short(main_class)} timed out after {timeout:.0f}s: "
                         f"{telling_line(out + err)}") from exc
    print(f"$ {short(main_class)} {' '.join(args)}\n{res.stdout}{res.stderr}", flush=True)
    if res.returncode != 0:
        raise ToolFailed(f"{short(main_class)} exited with {res.returncode}: "
                         f"{telling_line(res.stdout + res.stderr)}")
    return res.stdout


def short(main_class: str) -> str:
    return main_class.rsplit(".", 1)[-1]


def telling_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"(Exception|Error)\b.*:", ln) and not ln.startswith("at "):
            return ln[:400]
    return " | ".join(lines[-3:])[-400:]


# --- independent checks with kafka-python


def kp_produce(bootstrap: str, topic: str, recs) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for f in [producer.send(topic, value=v, key=k, partition=p, headers=h)
                  for p, k, v, h in recs]:
            f.get(timeout=WAIT_S)
    finally:
        producer.close(WAIT_S)


def kp_read(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got, deadline = [], time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                got += [(m.partition, m.key, m.value, list(m.headers or [])) for m in msgs]
    finally:
        consumer.close()
    return got


def topics_list(bootstrap: str) -> set[str]:
    return set(tool(TOPICS, ["--bootstrap-server", bootstrap, "--list"]).split())


# --- scenarios


def kafka_topics(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    b = ["--bootstrap-server", bootstrap]
    tool(TOPICS, [*b, "--create", "--topic", topic, "--partitions", "3",
                  "--replication-factor", "1", "--config", "retention.ms=3600000"])
    expect(topic in topics_list(bootstrap), "--list does not show the created topic")
    out = tool(TOPICS, [*b, "--describe", "--topic", topic])
    expect("PartitionCount: 3" in out, f"--describe: {out[:300]}")
    expect("retention.ms=3600000" in out, f"--describe does not show retention.ms: {out[:300]}")
    tool(TOPICS, [*b, "--alter", "--topic", topic, "--partitions", "5"])
    out = tool(TOPICS, [*b, "--describe", "--topic", topic])
    expect("PartitionCount: 5" in out, f"--describe after --alter --partitions 5: {out[:300]}")
    tool(TOPICS, [*b, "--delete", "--topic", topic])
    kit.wait_until(lambda: topic not in topics_list(bootstrap), "the deleted topic to disappear",
                   step=0.5)


def kafka_console_producer(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", "1", "--replication-factor", "1"])
    lines = [f"seq:{i},src:compat\tk{i}\tvalue-{i}" for i in range(50)]
    tool(console_producer_class(),
         ["--bootstrap-server", bootstrap, "--topic", topic, "--compression-codec", "zstd",
          option("--reader-property", "--property"), "parse.key=true",
          option("--reader-property", "--property"), "parse.headers=true",
          "--request-required-acks", "-1"], stdin="\n".join(lines) + "\n")
    want = [(0, f"k{i}".encode(), f"value-{i}".encode(),
             [("seq", str(i).encode()), ("src", b"compat")]) for i in range(50)]
    kit.check_records(want, kp_read(bootstrap, topic, 1, len(want)))


def kafka_console_consumer(bootstrap: str, prefix: str) -> None:
    topic, group = f"{prefix}-t", f"{prefix}-g"
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", "1", "--replication-factor", "1"])
    recs = [(0, f"k{i}".encode(), f"value-{i}".encode(), [("seq", str(i).encode())])
            for i in range(50)]
    kp_produce(bootstrap, topic, recs)
    out = tool(CONSOLE_CONSUMER,
               ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                "--from-beginning", "--max-messages", "50", "--timeout-ms", "30000",
                option("--formatter-property", "--property"), "print.key=true",
                option("--formatter-property", "--property"), "print.headers=true"])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    want = [f"seq:{i}\tk{i}\tvalue-{i}" for i in range(50)]
    expect(lines == want, f"printed {lines[:3]}... ({len(lines)} lines), want {want[:2]}...")


def tool_command(main_class: str, args: list[str]) -> list[str]:
    return ["java", *apache_kafka.TOOL_JVM_FLAGS, *apache_kafka.log_flags(VERSION, tool=True),
            "-cp", apache_kafka.classpath(VERSION), main_class, *args]


def consumer_groups(bootstrap: str, prefix: str, kip848: bool, partitions: int = 2,
                    check_state: Callable[[str, str], None] | None = None) -> None:
    """kafka-consumer-groups on a group with a live member (a console consumer): --list,
    --describe (offsets, lag, the member's partitions), --describe --state; then, once the member
    has left, --reset-offsets --to-earliest --execute and --delete. ``kip848``: the console
    consumer uses group.protocol=consumer, so the group is a KIP-848 group. ``check_state``
    (topic, --describe --state output) checks more while the member is there."""
    import subprocess
    topic, group = f"{prefix}-t", f"{prefix}-g"
    b = ["--bootstrap-server", bootstrap]
    tool(TOPICS, [*b, "--create", "--topic", topic, "--partitions", str(partitions),
                  "--replication-factor", "1"])
    kp_produce(bootstrap, topic, kit.records(20 * partitions, partitions))
    prop = option("--command-property", "--consumer-property")
    props = [prop, "auto.commit.interval.ms=200"]
    if kip848:
        props += [prop, "group.protocol=consumer"]
    member = subprocess.Popen(
        tool_command(CONSOLE_CONSUMER, [*b, "--topic", topic, "--group", group,
                                        "--from-beginning", "--timeout-ms", "90000", *props]),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def rows() -> list[list[str]]:
        text = tool(GROUPS, [*b, "--describe", "--group", group])
        return [ln.split() for ln in text.splitlines() if ln.split()[:2] == [group, topic]]

    try:
        def consumed_and_committed() -> bool:
            try:
                got = rows()
            except ToolFailed:  # the group does not exist until the consumer joins
                return False
            return len(got) == partitions and all(r[3] == "20" and r[5] == "0" and r[6] != "-"
                                                  for r in got)
        kit.wait_until(consumed_and_committed, "--describe to show the live member at offset 20 "
                       f"with lag 0 on all {partitions} partitions", timeout=60, step=1)
        got = rows()
        expect(len({r[6] for r in got}) == 1, f"two consumer ids for one member: {got}")
        out = tool(GROUPS, [*b, "--list"])
        expect(group in out.split(), f"--list does not show {group}: {out[:300]}")
        out = tool(GROUPS, [*b, "--describe", "--group", group, "--state"])
        expect("Stable" in out, f"--describe --state does not say Stable: {out[:400]}")
        if kip848:
            expect("uniform" in out, f"--describe --state does not name the uniform assignor: "
                   f"{out[:400]}")
        if check_state:
            check_state(topic, out)
        out = tool(GROUPS, [*b, "--describe", "--group", group, "--members"])
        expect(re.search(rf"\s{partitions}\s*$", out, re.M) is not None,
               f"--describe --members does not show one member with {partitions} partitions: "
               f"{out[:400]}")
    finally:
        member.terminate()  # SIGTERM: the console consumer closes and leaves the group
        try:
            member.wait(30)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait()
    kit.wait_until(lambda: all(r[6] == "-" for r in rows()), "the group to have no active members",
                   step=1)
    tool(GROUPS, [*b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                  "--execute"])
    got = rows()
    expect(len(got) == partitions and all(r[3] == "0" and r[5] == "20" for r in got),
           f"after --reset-offsets --to-earliest: {got}")
    tool(GROUPS, [*b, "--delete", "--group", group])
    expect(group not in tool(GROUPS, [*b, "--list"]).split(), "deleted group still listed")


def kafka_consumer_groups(bootstrap: str, prefix: str) -> None:
    consumer_groups(bootstrap, prefix, kip848=False)


def kafka_consumer_groups_kip848(bootstrap: str, prefix: str) -> None:
    consumer_groups(bootstrap, prefix, kip848=True)


def kafka_consumer_groups_deleted_topic(bootstrap: str, prefix: str) -> None:
    """A group has offsets for two topics, another only for one of them; that topic is
    deleted: its offsets go with it (and the second group, left without offsets), so
    --describe and --reset-offsets --all-topics work on what remains."""
    gone, kept, group, only = f"{prefix}-gone", f"{prefix}-kept", f"{prefix}-g", f"{prefix}-o"
    b = ["--bootstrap-server", bootstrap]
    for topic in (gone, kept):
        tool(TOPICS, [*b, "--create", "--topic", topic, "--partitions", "2",
                      "--replication-factor", "1"])
        kp_produce(bootstrap, topic, [(p, None, b"v%d" % i, []) for i in range(5)
                                      for p in range(2)])
    tool(GROUPS, [*b, "--reset-offsets", "--group", group, "--topic", gone, "--topic", kept,
                  "--to-latest", "--execute"])
    tool(GROUPS, [*b, "--reset-offsets", "--group", only, "--topic", gone, "--to-latest",
                  "--execute"])

    def rows() -> list[list[str]]:
        text = tool(GROUPS, [*b, "--describe", "--group", group])
        return sorted(ln.split()[1:6] for ln in text.splitlines() if ln.split()[:1] == [group])

    expect(rows() == [[t, str(p), "5", "5", "0"] for t in (gone, kept) for p in range(2)],
           f"--describe before the deletion: {rows()}")
    tool(TOPICS, [*b, "--delete", "--topic", gone])
    kit.wait_until(lambda: gone not in topics_list(bootstrap), "the deleted topic to disappear",
                   step=0.5)
    expect(rows() == [[kept, str(p), "5", "5", "0"] for p in range(2)],
           f"--describe after the deletion: {rows()}")
    tool(GROUPS, [*b, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                  "--execute"])
    expect(rows() == [[kept, str(p), "0", "5", "5"] for p in range(2)],
           f"after --reset-offsets --all-topics --to-earliest: {rows()}")
    listed = tool(GROUPS, [*b, "--list"]).split()
    expect(group in listed and only not in listed,
           f"--list after the deletion (want {group}, not {only}): {listed}")


def kafka_configs(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    b = ["--bootstrap-server", bootstrap]
    tool(TOPICS, [*b, "--create", "--topic", topic, "--partitions", "1",
                  "--replication-factor", "1", "--config", "retention.ms=3600000"])
    entity = ["--entity-type", "topics", "--entity-name", topic]
    configs = configs_class()
    out = tool(configs, [*b, *entity, "--describe"])
    expect("retention.ms=3600000" in out, f"--describe: {out[:300]}")
    out = tool(configs, [*b, "--entity-type", "brokers", "--entity-name", "1", "--describe",
                         "--all"])
    expect("log.segment.bytes=" in out, f"broker --describe --all: {out[:300]}")
    tool(configs, [*b, *entity, "--alter", "--add-config", "retention.ms=12345"])
    out = tool(configs, [*b, *entity, "--describe"])
    expect("retention.ms=12345" in out, f"--describe after --alter: {out[:300]}")


def perf_line(out: str) -> dict:
    parsed = apache_kafka.parse_producer_performance(out)
    expect(parsed is not None, f"no summary line in ProducerPerformance output: {out[-300:]}")
    return parsed


def kafka_producer_perf_test(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", "2", "--replication-factor", "1"])
    out = tool(PRODUCER_PERF, ["--topic", topic, "--num-records", "50000", "--record-size",
                               "100", "--throughput", "-1",
                               option("--command-property", "--producer-props"),
                               f"bootstrap.servers={bootstrap}", "acks=all",
                               "compression.type=lz4"])
    expect(perf_line(out)["records"] == 50000, f"summary: {out.splitlines()[-1]}")
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        total = sum(c.end_offsets(tps).values())
    finally:
        c.close()
    expect(total == 50000, f"log end offsets add up to {total}, want 50000")


def kafka_consumer_perf_test(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", "2", "--replication-factor", "1"])
    tool(PRODUCER_PERF, ["--topic", topic, "--num-records", "50000", "--record-size", "100",
                         "--throughput", "-1", option("--command-property", "--producer-props"),
                         f"bootstrap.servers={bootstrap}"])
    out = tool(CONSUMER_PERF, ["--bootstrap-server", bootstrap, "--topic", topic,
                               option("--num-records", "--messages"), "50000",
                               "--timeout", "30000",
                               "--group", f"{prefix}-g"])
    rows = [ln.split(",") for ln in out.splitlines() if re.match(r"^\d{4}-\d\d-\d\d", ln)]
    expect(bool(rows), f"no result row in ConsumerPerformance output: {out[-300:]}")
    consumed = int(rows[-1][4].strip())
    expect(consumed == 50000, f"ConsumerPerformance consumed {consumed} of 50000 records")


def kafka_transactions(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    b = ["--bootstrap-server", bootstrap]
    tool(TOPICS, [*b, "--create", "--topic", topic, "--partitions", "1",
                  "--replication-factor", "1"])
    kp_produce(bootstrap, topic, kit.records(5, 1))
    out = tool(TRANSACTIONS, [*b, "describe-producers", "--topic", topic, "--partition", "0"])
    expect("ProducerId" in out, f"describe-producers: {out[:300]}")
    out = tool(TRANSACTIONS, [*b, "list"])
    expect("TransactionalId" in out, f"list: {out[:300]}")


def log_dirs(bootstrap: str, topic: str | None = None) -> dict[int, dict[tuple[str, int], int]]:
    """``kafka-log-dirs --describe``: broker -> {(topic, partition): size}, one log directory
    each (its error must be null)."""
    args = ["--bootstrap-server", bootstrap, "--describe"]
    if topic:
        args += ["--topic-list", topic]
    out = tool(LOG_DIRS, args)
    doc = next((json.loads(ln) for ln in out.splitlines() if ln.startswith("{")), None)
    expect(doc is not None, f"no JSON in kafka-log-dirs' output: {out[:300]}")
    got = {}
    for b in doc["brokers"]:
        expect(len(b["logDirs"]) == 1, f"broker {b['broker']}: {len(b['logDirs'])} log dirs")
        d = b["logDirs"][0]
        expect(d["error"] is None, f"broker {b['broker']}: error {d['error']}")
        expect(all(p["offsetLag"] == 0 and p["isFuture"] is False for p in d["partitions"]),
               f"broker {b['broker']}: {d['partitions']}")
        sizes = {}
        for p in d["partitions"]:
            topic, _, index = p["partition"].rpartition("-")
            sizes[(topic, int(index))] = p["size"]
        got[b["broker"]] = sizes
    return got


def kafka_log_dirs(bootstrap: str, prefix: str) -> None:
    """One broker: the partitions of a topic with their sizes (the ones written to are larger
    than the empty one, and grow with what is written)."""
    topic = f"{prefix}-t"
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", "3", "--replication-factor", "1"])
    kp_produce(bootstrap, topic, [(p, None, b"x" * 100, []) for p in (0, 1, 1) for _ in range(10)])
    got = log_dirs(bootstrap, topic)
    expect(list(got) == [1], f"brokers {list(got)}, want [1]")
    sizes = got[1]
    expect(set(sizes) == {(topic, p) for p in range(3)}, f"partitions {sorted(sizes)}")
    expect(sizes[(topic, 2)] == 0 < sizes[(topic, 0)] < sizes[(topic, 1)],
           f"sizes {sizes}: want partition 2 empty, 1 larger than 0")
    everything = log_dirs(bootstrap)[1]  # no --topic-list: every partition
    expect(everything[(topic, 1)] == sizes[(topic, 1)] and len(everything) >= 3,
           f"without --topic-list: {everything}")


# --- share groups (KIP-932)


def share_tools() -> None:
    """The share-group tools exist and speak what Headrace serves (Kafka 4.1+), or n/a."""
    if not since(4):
        raise kit.NotApplicable(f"Kafka {VERSION} has no share-group tools (KIP-932)")
    if not since(4, 1):
        raise kit.NotApplicable(
            f"Kafka {VERSION}'s share-group tools are KIP-932's early access: ShareGroupHeartbeat, "
            "ShareGroupDescribe and ShareFetch v0, unstable versions (Kafka 4.4 and Headrace "
            "serve v1+), and no DescribeShareGroupOffsets")


def share_setup(bootstrap: str, topic: str, group: str) -> None:
    """A topic of one partition and a share group that starts at its beginning
    (``share.auto.offset.reset=earliest``, a group config), made with kafka-python: a tool run
    costs a JVM's start."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout_ms=int(WAIT_S * 1000))
        admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group,
                                            {"share.auto.offset.reset": "earliest"})],
                            incremental=True)
    finally:
        admin.close()


def console_share_consumer(bootstrap: str, topic: str, group: str, *args: str) -> list[str]:
    """kafka-console-share-consumer's printed values."""
    out = tool(CONSOLE_SHARE_CONSUMER, ["--bootstrap-server", bootstrap, "--topic", topic,
                                        "--group", group, *args])
    return [ln for ln in out.splitlines() if ln.strip()]


def kafka_share_groups(bootstrap: str, prefix: str) -> None:
    """kafka-share-groups on a share group one of whose records kafka-console-share-consumer
    accepted: --describe (START-OFFSET, LAG), --reset-offsets --to-earliest, --to-latest and
    --to-datetime --execute, --delete-offsets, --delete. That DeleteGroups deletes the share
    state is tests/broker/test_share_admin.py's (each tool run costs a JVM's start)."""
    share_tools()
    topic, group = f"{prefix}-t", f"{prefix}-g"
    b = ["--bootstrap-server", bootstrap]
    share_setup(bootstrap, topic, group)
    kp_produce(bootstrap, topic, [(0, None, b"x", [])])  # offset 0, before the datetime
    time.sleep(0.05)
    before = int(time.time() * 1000)
    time.sleep(0.05)
    got = console_share_consumer(bootstrap, topic, group, "--max-messages", "1",
                                 "--timeout-ms", "20000")
    expect(got == ["x"], f"the console share consumer printed {got}, want ['x']")
    kp_produce(bootstrap, topic, [(0, None, v, []) for v in (b"a", b"b", b"c", b"d")])  # 1-4

    def rows(*args: str) -> list[list[str]]:
        out = tool(SHARE_GROUPS, [*b, *args, "--group", group])
        return [ln.split() for ln in out.splitlines() if ln.strip()]

    def described() -> list[list[str]]:
        found = rows("--describe")
        expect(found[:1] == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]],
               f"--describe: {found}")
        return found[1:]

    def reset(*how: str) -> list[str]:
        return rows("--reset-offsets", "--topic", topic, *how, "--execute")[-1]

    got = described()
    expect(got == [[group, topic, "0", "1", "4"]], f"--describe after x was accepted: {got}")
    got = reset("--to-earliest")
    expect(got == [group, topic, "0", "0"], f"--reset-offsets --to-earliest: {got}")
    got = described()
    expect(got == [[group, topic, "0", "0", "5"]], f"--describe after --to-earliest: {got}")
    got = reset("--to-latest")
    expect(got == [group, topic, "0", "5"], f"--reset-offsets --to-latest: {got}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(before / 1000)) + \
        f".{before % 1000:03d}Z"
    got = reset("--to-datetime", stamp)
    expect(got == [group, topic, "0", "1"], f"--reset-offsets --to-datetime {stamp}: {got}")
    got = described()
    expect(got == [[group, topic, "0", "1", "4"]], f"--describe after --to-datetime: {got}")
    got = rows("--delete-offsets", "--topic", topic)
    expect(got[-1][-2:] == [topic, "Successful"], f"--delete-offsets: {got}")
    got = rows("--describe")
    expect(got == [["Share", "group", f"'{group}'", "has", "no", "offset", "information."]],
           f"--describe after --delete-offsets: {got}")
    got = rows("--delete")
    expect(got == [["Deletion", "of", "requested", "share", "groups", f"('{group}')", "was",
                    "successful."]], f"--delete: {got}")


def kafka_console_share_consumer(bootstrap: str, prefix: str) -> None:
    """kafka-console-share-consumer reads a share group's 20 records and, with --reject,
    rejects them: a second reader of the group then finds none."""
    share_tools()
    topic, group = f"{prefix}-t", f"{prefix}-g"
    share_setup(bootstrap, topic, group)
    want = [f"line-{n}" for n in range(20)]
    kp_produce(bootstrap, topic, [(0, None, v.encode(), []) for v in want])
    got = console_share_consumer(bootstrap, topic, group, "--max-messages", "20",
                                 "--timeout-ms", "20000", "--reject")
    expect(sorted(got) == sorted(want), f"printed {got}, want line-0..line-19")
    again = console_share_consumer(bootstrap, topic, group, "--timeout-ms", "3000")
    expect(again == [], f"rejected records delivered again: {again}")


# --- against a cluster of three brokers (12 partitions are always led by all three)

SPREAD = 12


def metadata_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader of ``topic``, from kafka-python's Metadata request."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (t,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def create_spread(bootstrap: str, topic: str) -> dict[int, int]:
    tool(TOPICS, ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                  "--partitions", str(SPREAD), "--replication-factor", "1"])
    leaders: dict[int, int] = {}

    def led() -> bool:
        leaders.update(metadata_leaders(bootstrap, topic))
        return len(leaders) == SPREAD and -1 not in leaders.values()
    kit.wait_until(led, f"a leader for each of {SPREAD} partitions")
    expect(set(leaders.values()) == {1, 2, 3}, f"leaders {leaders}, want brokers 1, 2 and 3")
    return leaders


def cluster_kafka_topics(bootstrap: str, prefix: str) -> None:
    """--describe of a topic of 12 partitions: the Leader column (and Replicas, Isr: the one
    replica) is what Metadata says, and names all three brokers."""
    topic = f"{prefix}-t"
    leaders = create_spread(bootstrap, topic)
    out = tool(TOPICS, ["--bootstrap-server", bootstrap, "--describe", "--topic", topic])
    expect(f"PartitionCount: {SPREAD}" in out, f"--describe: {out[:300]}")
    rows = re.findall(r"Partition: (\d+)\s+Leader: (-?\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]*)",
                      out)
    described = {int(p): int(leader) for p, leader, _, _ in rows}
    expect(described == leaders, f"--describe's leaders {described}, Metadata's {leaders}")
    expect(all(r == leader == i for _, leader, r, i in rows),
           f"Replicas and Isr are not the leader alone: {rows}")
    out = tool(TOPICS, ["--bootstrap-server", bootstrap, "--describe", "--topic", topic,
                        "--unavailable-partitions"])
    expect("Partition:" not in out, f"--unavailable-partitions lists some: {out[:300]}")


def java_hash(s: str) -> int:
    """Java's String.hashCode, as a signed 32-bit int."""
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def cluster_kafka_consumer_groups(bootstrap: str, prefix: str) -> None:
    """kafka-consumer-groups on a live group over 12 partitions led by three brokers: --describe
    shows every partition's offset and lag; --describe --state names the coordinator, which is
    the leader of the group's partition of __consumer_offsets (and not of most of the topic)."""
    group = f"{prefix}-g"

    def check_state(topic: str, out: str) -> None:
        line = next((ln for ln in out.splitlines() if ln.split()[:1] == [group]), "")
        m = re.search(r"\((\d+)\)", line)
        expect(m is not None, f"--describe --state names no coordinator: {out[:400]}")
        coordinator = int(m.group(1))
        offsets = metadata_leaders(bootstrap, "__consumer_offsets")
        h = java_hash(group)
        want = offsets[(0 if h == -(1 << 31) else abs(h)) % len(offsets)]
        expect(coordinator == want, f"coordinator {coordinator}, but the group's partition of "
               f"__consumer_offsets is led by {want}")
        leaders = metadata_leaders(bootstrap, topic)
        expect(set(leaders.values()) == {1, 2, 3}, f"leaders {leaders}, want brokers 1, 2, 3")
        print(f"coordinator {coordinator}; partition leaders {leaders}", flush=True)

    consumer_groups(bootstrap, prefix, kip848=False, partitions=SPREAD, check_state=check_state)


def cluster_kafka_broker_api_versions(bootstrap: str, prefix: str) -> None:
    """kafka-broker-api-versions, given one broker, lists all three with their APIs."""
    first = bootstrap.split(",")[0]
    out = tool(broker_api_versions_class(), ["--bootstrap-server", first])
    blocks = re.split(r"^(?=\S+:\d+ \(id: )", out, flags=re.M)
    by_id = {}
    for block in blocks:
        m = re.match(r"(\S+):(\d+) \(id: (\d+)", block)
        if m:
            by_id[int(m.group(3))] = (f"{m.group(1)}:{m.group(2)}", block)
    expect(sorted(by_id) == [1, 2, 3], f"brokers listed: {sorted(by_id)}: {out[:400]}")
    addresses = sorted(a for a, _ in by_id.values())
    expect(addresses == sorted(bootstrap.split(",")), f"addresses {addresses}, want {bootstrap}")
    for node, (_, block) in by_id.items():
        for api in ("Metadata(3)", "FindCoordinator(10)", "DescribeLogDirs(35)"):
            line = next((ln for ln in block.splitlines() if api in ln), "")
            expect(bool(line) and "UNSUPPORTED" not in line, f"broker {node}: {api}: {line!r}")


def cluster_kafka_log_dirs(bootstrap: str, prefix: str) -> None:
    """kafka-log-dirs --describe on a topic of 12 partitions: each broker lists exactly the
    partitions it leads; those written to have a size, the others 0."""
    topic = f"{prefix}-t"
    leaders = create_spread(bootstrap, topic)
    kp_produce(bootstrap, topic, [(p, None, b"x" * 100, []) for p in range(0, SPREAD, 2)
                                  for _ in range(5)])
    got = log_dirs(bootstrap, topic)
    expect(sorted(got) == [1, 2, 3], f"brokers {sorted(got)}, want 1, 2 and 3")
    for node, sizes in got.items():
        mine = {(topic, p) for p, leader in leaders.items() if leader == node}
        expect(set(sizes) == mine, f"broker {node} lists {sorted(sizes)}, leads {sorted(mine)}")
        for (_, p), size in sizes.items():
            expect((size > 0) == (p % 2 == 0), f"broker {node}: partition {p} has size {size}")


SCENARIOS = {
    "kafka-topics": kafka_topics,
    "kafka-console-producer": kafka_console_producer,
    "kafka-console-consumer": kafka_console_consumer,
    "kafka-consumer-groups": kafka_consumer_groups,
    "kafka-consumer-groups-kip848": kafka_consumer_groups_kip848,
    "kafka-consumer-groups-deleted-topic": kafka_consumer_groups_deleted_topic,
    "kafka-configs": kafka_configs,
    "kafka-producer-perf-test": kafka_producer_perf_test,
    "kafka-consumer-perf-test": kafka_consumer_perf_test,
    "kafka-transactions": kafka_transactions,
    "kafka-log-dirs": kafka_log_dirs,
    "kafka-share-groups": kafka_share_groups,
    "kafka-console-share-consumer": kafka_console_share_consumer,
    "cluster-kafka-topics": cluster_kafka_topics,
    "cluster-kafka-consumer-groups": cluster_kafka_consumer_groups,
    "cluster-kafka-broker-api-versions": cluster_kafka_broker_api_versions,
    "cluster-kafka-log-dirs": cluster_kafka_log_dirs,
}

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--version"]:
        VERSION = argv[1]
        argv = argv[2:]
    sys.exit(kit.main(SCENARIOS, argv))
