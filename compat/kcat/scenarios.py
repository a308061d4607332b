"""kcat (Debian's package, librdkafka inside): the standard scenarios it can do.

kcat has no admin operations, so topics are created with kafka-python (a Headrace dependency)
and only what kcat itself does is under test: producing (-P, with keys, headers and each
compression codec), consuming (-C, JSON output), metadata (-L) and balanced group consumption
(-G). Convention: compat/kit.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compat import kit  # noqa: E402
from compat.kit import WAIT_S, expect  # noqa: E402


def kcat(args: list[str], stdin: str | None = None, timeout: float = WAIT_S) -> str:
    res = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                         timeout=timeout)
    print(f"$ kcat {' '.join(args)}\n{res.stderr[-2000:]}", flush=True)
    if res.returncode != 0:
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        raise kit.ScenarioFailed(f"kcat exited with {res.returncode}: {' | '.join(lines[-3:])}")
    return res.stdout


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int,
            extra: list[str]) -> list:
    """One kcat -P per partition (headers given with -H hold for a whole invocation)."""
    sent = []
    for p in range(partitions):
        lines = []
        for i in range(per_partition):
            key, value = f"k{p}-{i}", f"value-{p}-{i}-" * 4
            lines.append(f"{key}\t{value}")
            sent.append((p, key.encode(), value.encode(),
                         [("src", b"compat"), ("part", str(p).encode())]))
        kcat(["-P", "-b", bootstrap, "-t", topic, "-p", str(p), "-K", "\t", "-H", "src=compat",
              "-H", f"part={p}", "-X", "broker.address.family=v4", *extra],
             stdin="\n".join(lines) + "\n")
    return sent


def consume(bootstrap: str, topic: str, extra: list[str] = ()) -> list:
    out = kcat(["-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-q",
                "-X", "broker.address.family=v4", *extra])
    got = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = json.loads(line)
        headers = m.get("headers") or []
        pairs = [(headers[i], headers[i + 1].encode()) for i in range(0, len(headers), 2)]
        got.append((m["partition"], (m["key"] or "").encode(), (m["payload"] or "").encode(),
                    pairs))
    return got


def metadata_partitions(bootstrap: str, topic: str) -> int:
    meta = json.loads(kcat(["-L", "-b", bootstrap, "-t", topic, "-J"]))
    for t in meta.get("topics", []):
        if t["topic"] == topic:
            return len(t["partitions"])
    return 0


def produce_consume(compression: str):
    def scenario(bootstrap: str, prefix: str) -> None:
        topic = f"{prefix}-t"
        create_topic(bootstrap, topic, 3)
        expect(metadata_partitions(bootstrap, topic) == 3, "kcat -L does not show 3 partitions")
        sent = produce(bootstrap, topic, 3, 100, ["-z", compression])
        kit.check_records(sent, consume(bootstrap, topic))
    return scenario


def idempotent(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    create_topic(bootstrap, topic, 2)
    sent = produce(bootstrap, topic, 2, 1000, ["-X", "enable.idempotence=true",
                                                "-X", "acks=all", "-X", "batch.num.messages=50"])
    kit.check_records(sent, consume(bootstrap, topic))


class GroupMember:
    """``kcat -G`` in the background: records what it prints and its rebalance notices."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            ["kcat", "-b", bootstrap, "-G", group, topic, "-J", "-u", "-X", "auto.offset.reset=earliest",
             "-X", "auto.commit.interval.ms=100", "-X", "session.timeout.ms=10000",
             "-X", "heartbeat.interval.ms=500", "-X", "broker.address.family=v4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: list[tuple[int, str]] = []
        self.notices: list[str] = []
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                m = json.loads(line)
                self.records.append((m["partition"], m["key"]))

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            print(f"[kcat -G] {line.rstrip()}", flush=True)
            self.notices.append(line.strip())

    def assigned(self) -> str | None:
        """The partitions of the last "rebalanced (assign)" notice, e.g. "t [0], t [1]"."""
        for n in reversed(self.notices):
            if "assign" in n and "rebalanced" in n:
                return n.split(":", 1)[-1].strip() if ":" in n else n
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # kcat commits and leaves the group
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def group(bootstrap: str, prefix: str) -> None:
    topic, gid = f"{prefix}-t", f"{prefix}-g"
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 4, 100, [])
    a = GroupMember(bootstrap, gid, topic)
    b = None
    try:
        kit.wait_until(lambda: a.assigned() is not None and a.assigned().count("[") == 4,
                       "the first kcat -G to be assigned all 4 partitions")
        b = GroupMember(bootstrap, gid, topic)

        def shared() -> bool:
            sa, sb = a.assigned(), b.assigned()
            return bool(sa and sb) and sa.count("[") + sb.count("[") == 4 \
                and sa.count("[") > 0 and sb.count("[") > 0
        kit.wait_until(shared, "a rebalance sharing 4 partitions between 2 kcat -G members")
        kit.wait_until(lambda: len(set(a.records) | set(b.records)) == 400,
                       "all 400 records through the group")
        time.sleep(0.5)  # one more auto commit
    finally:
        a.stop()
        if b is not None:
            b.stop()
    from kafka import KafkaConsumer, TopicPartition
    checker = KafkaConsumer(bootstrap_servers=bootstrap, group_id=gid, enable_auto_commit=False)
    try:
        offsets = {p: checker.committed(TopicPartition(topic, p)) for p in range(4)}
    finally:
        checker.close()
    expect(offsets == {p: 100 for p in range(4)}, f"committed offsets {offsets}, want 100 each")


def not_applicable(why: str):
    def scenario(bootstrap: str, prefix: str) -> None:
        raise kit.NotApplicable(why)
    return scenario


def secured(listener: str) -> tuple[str, list[str]]:
    """The address of one listener of the suite's secure broker (kit.security) and the -X
    options for it."""
    conf = kit.librdkafka_security(listener)
    return kit.security()[listener], [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]


def over(listener: str):
    """300 records produced (idempotent, acks=all) and read back through one secured listener;
    kcat -L through it lists the topic (created through the PLAINTEXT listener: kcat has no
    admin operations)."""
    def scenario(bootstrap: str, prefix: str) -> None:
        address, extra = secured(listener)
        topic = f"{prefix}-t"
        create_topic(bootstrap, topic, 3)
        meta = json.loads(kcat(["-L", "-b", address, "-t", topic, "-J", *extra]))
        parts = [len(t["partitions"]) for t in meta.get("topics", []) if t["topic"] == topic]
        expect(parts == [3], f"kcat -L over {listener} shows {parts} partitions, want [3]")
        sent = produce(address, topic, 3, 100, ["-X", "enable.idempotence=true",
                                                "-X", "acks=all", *extra])
        kit.check_records(sent, consume(address, topic, extra))
    return scenario


def wrong_password(bootstrap: str, prefix: str) -> None:
    """kcat -L with SCRAM-SHA-512 over SASL_SSL and a wrong password: an authentication error,
    and kcat exits (no hang)."""
    address, extra = secured("sasl_ssl")
    extra = [a if not a.startswith("sasl.password=") else "sasl.password=not-the-password"
             for a in extra]
    t0 = time.monotonic()
    res = subprocess.run(["kcat", "-L", "-b", address, "-m", "10", *extra], capture_output=True,
                         text=True, timeout=WAIT_S)
    took = time.monotonic() - t0
    print(f"$ kcat -L (wrong password): exit {res.returncode} after {took:.1f}s\n"
          f"{res.stderr[-2000:]}", flush=True)
    expect(res.returncode != 0, "kcat -L succeeded with a wrong password")
    expect("Authentication failed" in res.stderr,
           f"no authentication error from kcat: {res.stderr.strip().splitlines()[-2:]}")


SCENARIOS = kit.standard_scenarios(
    produce_consume, idempotent=idempotent, group=group,
    admin=not_applicable("kcat has no admin operations (only -L metadata)"),
    alter_configs=not_applicable("kcat has no admin operations (only -L metadata)"),
    transactions=not_applicable("kcat has no transactional producer"),
)

SCENARIOS.update({
    "security-ssl": over("ssl"),
    "security-mtls": over("mtls"),
    "security-sasl-ssl-scram-sha-512": over("sasl_ssl"),
    "security-sasl-plaintext-plain": over("sasl_plaintext"),
    "security-wrong-password": wrong_password,
})

if __name__ == "__main__":
    sys.exit(kit.main(SCENARIOS))
