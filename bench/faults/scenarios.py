"""Fault scenarios: one system (Headrace or Apache Kafka) on a simulated network, one kind of
fault made round after round while the checked load runs, and what the checker finds.

How a run goes (``run_mode``)
-----------------------------
1. A ``Network`` (net.py) with five hosts: ``zk``, ``b1``, ``b2``, ``b3`` and ``clients``;
   ZooKeeper and each broker run in their own host (systems.py), the clients in ``clients``:
   the load and the read-back as processes of their own (workload.py), this process's own
   admin calls from a thread that entered that namespace (``NetnsThread``).
2. The topic ``faults``: ``--partitions`` partitions, RF 3, ``min.insync.replicas=2``, placed
   by hand alike in both systems (partition p on brokers p, p+1, p+2 mod 3: with 6, every
   broker leads two); then the load: idempotent acks=all producers, one a partition,
   and a transactional producer whose every transaction writes to every partition (so to
   partitions led by every broker), committing, or aborting one time in four; and a probe
   asking every broker for Metadata ten times a second.
3. Rounds: wait until every partition has a leader and its full ISR (the cluster is healed),
   make the fault, hold it, heal it, let the cluster settle; each fault and each heal is an
   *event* with its time. The victim of round ``r`` is found anew from Metadata (partition
   ``r mod partitions``'s leader, or a follower of it), so it moves around the brokers.
4. Stop the load (its producers flush), read the topic back with ``read_committed``, and check
   (checker.py): safety counts, and per event and partition the longest time without an
   acknowledgement (after the fault: from the fault to the heal; after the heal: from the heal
   to the next fault), transactions per minute, the commits' own times, the probe's bad
   answers.

The modes (``MODES``), each a fault the independent check made or the issue asks for:

* ``leader-isolated``: the leader of a partition cut off from the other brokers and
  ZooKeeper (the clients still reach it), for ``hold`` seconds.
* ``leader-zk-cut``: the same leader cut off from ZooKeeper only.
* ``leader-paused``: the leader paused with SIGSTOP for ``hold`` seconds, then SIGCONT.
* ``leader-killed``: the leader killed with SIGKILL, started again at once.
* ``follower-isolated``: a follower (in the ISR, not the leader) cut off from the other
  brokers and ZooKeeper.
* ``cluster-killed``: every broker killed with SIGKILL at once, all started again at once.
* ``lossy``: every link (brokers, ZooKeeper, clients) loses ``--loss`` of its packets and
  delays each by ``--delay-ms`` +/- ``--jitter-ms``, per direction, for ``lossy_hold``.
* ``rolling-restart``: each broker in turn stopped cleanly (SIGTERM) and started again once
  every ISR is full; each restart is an event.

``hold`` is ``zookeeper.session.timeout.ms`` + 4 s unless given: long enough for the cluster to
act on the fault (a session to expire, a leader to be replaced).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import checker
from .net import Host, Network
from .systems import Cluster, HeadraceCluster, KafkaCluster, NetnsThread, Placement

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "faults"
MODES = (
    "leader-isolated",
    "leader-zk-cut",
    "leader-paused",
    "leader-killed",
    "follower-isolated",
    "cluster-killed",
    "lossy",
    "rolling-restart",
)
SYSTEMS = {"headrace": HeadraceCluster, "kafka": KafkaCluster}


@dataclass
class Options:
    session_ms: int = 6000
    rounds: int = 20
    partitions: int = 6
    producers: int = 6  # idempotent acks=all producers, one a partition
    interval_ms: float = 2.0  # between one producer's records
    txn_producers: int = 1
    abort_every: int = 4  # a transaction in this many is aborted (0: none)
    hold_s: float | None = None  # how long a fault is held (None: session + 4 s)
    lossy_hold_s: float = 60.0
    settle_s: float = 8.0  # after a heal, before the next round looks for a healed cluster
    warmup_s: float = 3.0
    loss: float = 0.03
    delay_ms: float = 20.0
    jitter_ms: float = 15.0
    healthy_timeout_s: float = 180.0
    # one-record idempotent batches written into partition 0 before the rounds (whose faults
    # then all concern partition 0): a long log, as hours of load leave one
    prefill: int = 0

    @property
    def hold(self) -> float:
        return self.hold_s if self.hold_s is not None else self.session_ms / 1000 + 4


@dataclass
class Event:
    """One fault (or one restart of a rolling restart) and its heal."""

    round: int
    mode: str
    victim: int | None
    fault_at: float
    healed_at: float = 0.0
    next_at: float = 0.0  # the next event's fault, or the end of the run
    note: str = ""


@dataclass
class Result:
    system: str
    mode: str
    options: dict
    events: list[dict] = field(default_factory=list)
    check: dict = field(default_factory=dict)
    gaps_after_fault: list[dict] = field(default_factory=list)  # per event, partition -> s
    gaps_after_heal: list[dict] = field(default_factory=list)
    txns_per_minute: float = 0.0
    txns: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    load_errors: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


class Testbed:
    """The network and its five hosts; a cluster of ``system`` placed on them."""

    def __init__(self, prefix: str = "hrf") -> None:
        self.net = Network(prefix=prefix)
        try:
            self.zk = self.net.add_host("zk")
            self.brokers = [self.net.add_host(f"b{i}") for i in (1, 2, 3)]
            self.clients = self.net.add_host("clients")
        except BaseException:
            self.net.close()
            raise
        self.via = NetnsThread(self.clients.ns)

    def placement(self) -> Placement:
        return Placement.of(
            (self.zk.ip, self.zk.command([])),
            [(b.ip, b.command([])) for b in self.brokers],
            probe_netns=self.clients.ns,
        )

    def host_of(self, broker_id: int) -> Host:
        return self.brokers[broker_id - 1]

    def close(self) -> None:
        self.via.close()
        self.net.close()


class Admin:
    """This process's admin client, in the clients' namespace."""

    def __init__(self, via: NetnsThread, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.via = via
        self.client = via.call(AdminClient, {"bootstrap.servers": bootstrap})

    def create_topic(self, name: str, partitions: int) -> None:
        """RF 3, ``min.insync.replicas=2``, placed by hand the same way in both systems:
        partition p on brokers p, p+1, p+2 (mod 3, from 1), the first its leader, so every
        broker leads partitions and both systems start from the same leaders."""
        from confluent_kafka.admin import NewTopic

        assignment = [[(p + k) % 3 + 1 for k in range(3)] for p in range(partitions)]
        topic = NewTopic(
            name,
            partitions,
            replica_assignment=assignment,
            config={"min.insync.replicas": "2"},
        )
        self.client.create_topics([topic], operation_timeout=30)[name].result(60)

    def partitions(self, name: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, ISR), as a broker tells it."""
        md = self.client.list_topics(name, timeout=10)
        topic = md.topics.get(name)
        if topic is None or topic.error is not None:
            return {}
        return {i: (p.leader, list(p.replicas), list(p.isrs)) for i, p in topic.partitions.items()}

    def healthy(self, name: str, count: int) -> bool:
        try:
            ps = self.partitions(name)
        except Exception:  # noqa: BLE001 (a broker down or slow: not healthy yet)
            return False
        return len(ps) == count and all(
            leader >= 0 and len(isr) == 3 for leader, _, isr in ps.values()
        )


class LoadProcess:
    """workload.py's ``load`` in the clients' host; its progress lines kept."""

    def __init__(self, clients: Host, bootstrap: str, out: Path, opts: Options) -> None:
        argv = [
            sys.executable, "-m", "bench.faults.workload", "load",
            "--bootstrap", bootstrap, "--topic", TOPIC, "--out", str(out),
            "--partitions", str(opts.partitions), "--producers", str(opts.producers),
            "--interval-ms", str(opts.interval_ms), "--txn-producers", str(opts.txn_producers),
            "--abort-every", str(opts.abort_every),
        ]  # fmt: skip
        self.out = out
        self.proc = subprocess.Popen(
            clients.command(argv),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(out / "load.err", "ab"),
            text=True,
        )
        self.last: dict = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.last = json.loads(line)
            except ValueError:
                pass

    def wait_going(self, transactions: bool, timeout: float = 180) -> None:
        """Until records are acknowledged and (with ``transactions``) a transaction has ended:
        the first faults meet a load in its stride (a coordinator's first transaction waits
        for its internal topic to be made)."""
        deadline = time.monotonic() + timeout
        while self.last.get("acked", 0) == 0 or (transactions and self.last.get("txns", 0) == 0):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the load did not get going in {timeout:.0f} s: {self.last}")
            time.sleep(0.2)

    def stop(self, timeout: float = 300) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the load did not stop within {timeout} s") from None
        self._reader.join(5)
        return json.loads((self.out / "load.json").read_text())


def read_back(clients: Host, bootstrap: str, out: Path, partitions: int) -> dict:
    argv = [
        sys.executable, "-m", "bench.faults.workload", "read", "--bootstrap", bootstrap,
        "--topic", TOPIC, "--out", str(out), "--partitions", str(partitions),
    ]  # fmt: skip
    with open(out / "read.err", "ab") as err:
        subprocess.run(clients.command(argv), cwd=ROOT, stderr=err, check=True, timeout=900)
    return json.loads((out / "read.json").read_text())


class Nemesis:
    """Makes one mode's faults on one cluster."""

    def __init__(self, mode: str, bed: Testbed, cluster: Cluster, admin: Admin, opts: Options):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        self.mode, self.bed, self.cluster, self.admin, self.opts = mode, bed, cluster, admin, opts

    def victim(self, round_: int) -> int:
        ps = self.admin.partitions(TOPIC)
        index = 0 if self.opts.prefill else round_ % self.opts.partitions
        leader, replicas, isr = ps[index]
        if self.mode == "follower-isolated":
            return next(b for b in isr if b != leader)
        return leader

    def others(self, broker: int) -> list[Host]:
        return [self.bed.zk] + [self.bed.host_of(b) for b in self.cluster.ids if b != broker]

    def round(self, round_: int, say: Callable[[str], None]) -> list[Event]:
        """One round: the fault(s), held, healed; the events (their ``next_at`` unset)."""
        mode, cluster, net, opts = self.mode, self.cluster, self.bed.net, self.opts
        if mode == "rolling-restart":
            events = []
            for b in cluster.ids:
                e = Event(round_, mode, b, time.monotonic())
                cluster.stop_broker(b)
                e.healed_at = time.monotonic()
                cluster.start_broker(b)
                e.note = f"stopped in {e.healed_at - e.fault_at:.1f} s"
                events.append(e)
                self.wait_healthy(say)
            return events
        if mode == "cluster-killed":
            e = Event(round_, mode, None, time.monotonic())
            cluster.kill_all()
            e.healed_at = time.monotonic()
            cluster.start_all()
            return [e]
        if mode == "lossy":
            e = Event(round_, mode, None, time.monotonic())
            net.lossy(loss=opts.loss, delay_ms=opts.delay_ms, jitter_ms=opts.jitter_ms)
            time.sleep(opts.lossy_hold_s)
            e.healed_at = time.monotonic()
            net.heal()
            return [e]
        victim = self.victim(round_)
        e = Event(round_, mode, victim, time.monotonic())
        host = self.bed.host_of(victim)
        if mode in ("leader-isolated", "follower-isolated"):
            net.cut(host, self.others(victim))
        elif mode == "leader-zk-cut":
            net.cut(host, self.bed.zk)
        elif mode == "leader-paused":
            cluster.pause(victim)
        elif mode == "leader-killed":
            cluster.kill(victim)
        if mode != "leader-killed":
            time.sleep(opts.hold)
        e.healed_at = time.monotonic()
        if mode == "leader-paused":
            cluster.resume(victim)
        elif mode == "leader-killed":
            cluster.start_broker(victim)
        else:
            net.heal()
        return [e]

    def wait_healthy(self, say: Callable[[str], None]) -> float:
        t0 = time.monotonic()
        while not self.admin.healthy(TOPIC, self.opts.partitions):
            if time.monotonic() - t0 > self.opts.healthy_timeout_s:
                raise TimeoutError(
                    f"{self.cluster.name}: ISRs not full {self.opts.healthy_timeout_s:.0f} s"
                    f" after the heal: {self.admin.partitions(TOPIC)}"
                )
            time.sleep(0.2)
        return time.monotonic() - t0


def prefill(via: NetnsThread, cluster: Cluster, admin: Admin, count: int) -> float:
    """Write ``count`` one-record batches of one idempotent producer (values ``f:<n>``, which
    the checker does not judge) into partition 0, pipelined, acks=1, from the clients'
    namespace: a long log to cut (every batch carries a producer id, so a rebuild of the
    producer state replays each). The seconds it took."""
    from headrace.broker.client.blocking import BlockingConnection
    from headrace.protocol import ApiKey, messages
    from headrace.protocol.records import Record, build_batch

    P = messages.ProduceRequest
    host, port = cluster.address(admin.partitions(TOPIC)[0][0]).rsplit(":", 1)
    t0 = time.monotonic()
    with via.connect((host, int(port)), 30) as sock:
        sock.settimeout(120)
        conn = BlockingConnection(sock, client_id="faults-prefill")
        for n in range(count):
            batch = build_batch(
                [Record(value=b"f:%d" % n)],
                producer_id=7_000_000,
                producer_epoch=0,
                base_sequence=n,
            )
            data = P.PartitionProduceData(index=0, records=batch)
            message = P(
                transactional_id=None,
                acks=1,
                timeout_ms=30_000,
                topic_data=[P.TopicProduceData(name=TOPIC, partition_data=[data])],
            )
            conn.send(ApiKey.PRODUCE, 9, message)
            while conn.in_flight > 64 or (n == count - 1 and conn.in_flight):
                answer = conn.receive()
                if answer.error is not None:
                    raise answer.error
                code = answer.message.responses[0].partition_responses[0].error_code
                if code:
                    raise RuntimeError(f"prefill refused with error {code}")
    return time.monotonic() - t0


def run_mode(
    system: str,
    mode: str,
    root: Path,
    opts: Options,
    say: Callable[[str], None] = print,
    bed: Testbed | None = None,
) -> Result:
    """One system through ``opts.rounds`` rounds of ``mode``; everything it started is
    stopped and removed (the data stays in ``root`` for a look afterwards)."""
    result = Result(system, mode, asdict(opts))
    started = time.monotonic()
    own_bed = bed is None
    bed = bed or Testbed()
    root.mkdir(parents=True, exist_ok=True)
    cluster = SYSTEMS[system](root / "cluster", bed.placement(), session_timeout_ms=opts.session_ms)
    load: LoadProcess | None = None
    events: list[Event] = []
    try:
        cluster.start()
        admin = Admin(bed.via, cluster.bootstrap)
        admin.create_topic(TOPIC, opts.partitions)
        nemesis = Nemesis(mode, bed, cluster, admin, opts)
        nemesis.wait_healthy(say)
        if opts.prefill:
            say(f"[{system} {mode}] writing {opts.prefill:,} batches into partition 0")
            took = prefill(bed.via, cluster, admin, opts.prefill)
            say(f"[{system} {mode}] prefilled in {took:.0f} s")
        load = LoadProcess(bed.clients, cluster.bootstrap, root, opts)
        load.wait_going(opts.txn_producers > 0)
        time.sleep(opts.warmup_s)
        for r in range(opts.rounds):
            nemesis.wait_healthy(say)
            say(f"[{system} {mode}] round {r + 1}/{opts.rounds}: {_progress(load)}")
            for e in nemesis.round(r, say):
                events.append(e)
                victim = "" if e.victim is None else f" broker {e.victim}"
                say(
                    f"[{system} {mode}] round {r + 1}:{victim} healed"
                    f" {e.healed_at - e.fault_at:.1f} s after the fault {e.note}"
                )
            bed.net.check()
            time.sleep(opts.settle_s)
        nemesis.wait_healthy(say)
        time.sleep(1.0)
    except Exception as e:  # noqa: BLE001 (kept in the result, with the logs' tails)
        result.error = f"{type(e).__name__}: {e}"
        say(f"[{system} {mode}] failed: {result.error}")
    finally:
        end = time.monotonic()
        try:
            if load is not None:
                loaded = load.stop()
                read = read_back(bed.clients, cluster.bootstrap, root, opts.partitions)
                _judge(result, loaded, read, events, end, opts)
        except Exception as e:  # noqa: BLE001
            result.error = (result.error or "") + f"; check: {type(e).__name__}: {e}"
        cluster.stop(clean=False)
        if own_bed:
            bed.close()
    result.seconds = time.monotonic() - started
    (root / "result.json").write_text(json.dumps(asdict(result), indent=1))
    return result


def _progress(load: LoadProcess) -> str:
    last = load.last
    return f"{last.get('acked', 0)} acked, {last.get('txns', 0)} transactions"


def _judge(result: Result, load: dict, read: dict, events: list[Event], end: float, opts) -> None:
    for e, nxt in zip(events, events[1:]):
        e.next_at = nxt.fault_at
    if events:
        events[-1].next_at = end
    result.events = [asdict(e) for e in events]
    result.check = checker.check(load, read)
    partitions = range(opts.partitions)
    result.gaps_after_fault = checker.gaps(
        load, partitions, [(e.mode, e.fault_at, e.healed_at) for e in events]
    )
    result.gaps_after_heal = checker.gaps(
        load, partitions, [(e.mode, e.healed_at, e.next_at) for e in events]
    )
    if events:
        result.txns_per_minute = checker.txn_rate(load, events[0].fault_at, end)
    commits = checker.commit_times(load)
    result.txns = {
        "done": sum(1 for t in load["txns"] if t["outcome"] != "unknown"),
        "unknown": sum(1 for t in load["txns"] if t["outcome"] == "unknown"),
        "commit_p50_s": checker.percentile(commits, 0.5),
        "commit_p99_s": checker.percentile(commits, 0.99),
        "commit_max_s": commits[-1] if commits else None,
    }
    result.probe = load["probe"]
    result.load_errors = load["errors"][:20]


def unavailable() -> str | None:
    """Why the suite cannot run here, or None."""
    from .net import unavailable_reason
    from .systems import tools_missing

    return (
        unavailable_reason(probe=True)
        or tools_missing()
        or (None if os.geteuid() == 0 else "needs root (network namespaces)")
    )


def run_starts(
    system: str, count: int, root: Path, opts: Options, say: Callable[[str], None] = print
) -> dict:
    """``count`` times: a fresh cluster started (three brokers at once) and, as soon as each
    broker has answered Metadata, a topic with replication factor 3 made through broker
    ``i mod 3 + 1`` (confluent-kafka's AdminClient, bootstrapped at that broker alone).
    Meanwhile every broker is asked for Metadata over and over: an answer without brokers
    or without a controller is counted (``bad``). Returns the counts and each failure."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from .systems import metadata

    bed = Testbed()
    out: dict = {"system": system, "starts": 0, "created": 0, "failures": [], "bad": 0,
                 "answers": 0, "seconds": []}  # fmt: skip
    try:
        for i in range(count):
            cluster = SYSTEMS[system](
                root / f"start-{i}", bed.placement(), session_timeout_ms=opts.session_ms
            )
            t0 = time.monotonic()
            try:
                cluster.start(wait=False)
                answered: set[int] = set()
                while len(answered) < 3:
                    if time.monotonic() - t0 > 180:
                        raise TimeoutError(f"brokers {set(cluster.ids) - answered} never answered")
                    for b in cluster.ids:
                        try:
                            listed, controller = metadata(cluster.address(b), 1.0, bed.via)
                        except (OSError, ConnectionError, ValueError):
                            continue
                        out["answers"] += 1
                        if not listed or controller < 0:
                            out["bad"] += 1
                        answered.add(b)
                    time.sleep(0.005)
                through = cluster.address(i % 3 + 1)
                admin = bed.via.call(AdminClient, {"bootstrap.servers": through})
                name = f"rf3-{i}"
                topic = NewTopic(name, 3, 3)
                admin.create_topics([topic], operation_timeout=30)[name].result(60)
                out["created"] += 1
                out["seconds"].append(round(time.monotonic() - t0, 2))
            except Exception as e:  # noqa: BLE001 (counted and named)
                out["failures"].append(f"start {i}: {type(e).__name__}: {e}")
                say(f"[{system} starts] start {i + 1}: {type(e).__name__}: {e}")
            finally:
                cluster.stop(clean=False)
            out["starts"] += 1
            if (i + 1) % 5 == 0 or i + 1 == count:
                say(
                    f"[{system} starts] {i + 1}/{count}: {out['created']} topics made,"
                    f" {len(out['failures'])} failed, {out['bad']} bad Metadata answers"
                )
    finally:
        bed.close()
    return out


def run_txn_latency(
    system: str,
    root: Path,
    opts: Options,
    commits: int = 60,
    warmup_s: float = 30.0,
    say: Callable[[str], None] = print,
) -> dict:
    """Transactions across brokers on a busy cluster: the load's acks=all producers on every
    partition of ``faults`` (whose leaders are all three brokers) and one transactional
    producer committing transactions that write to all of them. Once the load has run
    ``warmup_s``, the next ``commits`` commits are measured: their own times
    (``commit_transaction`` called to returned), and the acks=all records acknowledged
    meanwhile. (A cluster's first seconds are not a busy cluster's steady state: in both
    systems commits then take several times as long as they do later.)"""
    opts = Options(**{**asdict(opts), "abort_every": 0, "txn_producers": 1})
    bed = Testbed()
    cluster = SYSTEMS[system](root / "cluster", bed.placement(), session_timeout_ms=opts.session_ms)
    load: LoadProcess | None = None
    out: dict = {"system": system}
    start = time.monotonic()
    try:
        cluster.start()
        admin = Admin(bed.via, cluster.bootstrap)
        admin.create_topic(TOPIC, opts.partitions)
        Nemesis("lossy", bed, cluster, admin, opts).wait_healthy(say)
        out["leaders"] = sorted({leader for leader, _, _ in admin.partitions(TOPIC).values()})
        load = LoadProcess(bed.clients, cluster.bootstrap, root, opts)
        load.wait_going(transactions=True)
        time.sleep(warmup_s)
        start = time.monotonic()
        before = load.last.get("txns", 0)
        deadline = start + 600
        while load.last.get("txns", 0) < before + commits + 1 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        if load is not None:
            loaded = load.stop()
            measured = [t for t in loaded["txns"] if "commit_s" in t and t["start"] >= start]
            measured = measured[:commits]
            times = [t["commit_s"] for t in measured]
            end = measured[-1]["end"] if measured else start
            acked = checker.ack_times(loaded)
            out.update(
                commits=len(times),
                p50_s=checker.percentile(times, 0.5),
                p99_s=checker.percentile(times, 0.99),
                max_s=max(times) if times else None,
                acked=sum(1 for ts in acked.values() for t in ts if start <= t <= end),
                seconds=round(end - start, 1),
                errors=loaded["errors"][:10],
            )
        cluster.stop(clean=False)
        bed.close()
    return out
