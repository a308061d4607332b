"""Many partitions on one broker: descriptors, memory, and start/stop times (not a test).

Starts a broker (``BrokerProcess``; RLIMIT_NOFILE raised to ``--nofile``, or to the hard
limit when that is lower and cannot be raised), creates ``--topics`` x ``--partitions``
partitions through CreateTopics, produces one small batch to ``--write`` partitions spread
over the topics and fetches them back, then measures, with the broker's descriptor count
(/proc/<pid>/fd) and RSS at each step:

  * clean stop (SIGTERM until the process exits),
  * clean start (spawn until the broker listens, with the clean-shutdown marker),
  * recovery: write again, kill -9, start (spawn until it listens; the logs written since
    the clean start are checked from their recovery points, the others are not read),
  * clean stop again (stop_again),

and checks that every written partition reads back what was written.

    python bench/partitions.py --topics 100 --partitions 1000 --write 5000
    python bench/partitions.py --topics 5 --partitions 1000 --write 5000 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kafkawire import WireClient  # noqa: E402


def say(text: str) -> None:
    print(text, flush=True)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def state(broker: BrokerProcess) -> str:
    return f"{fds(broker.pid)} fds, RSS {rss_mb(broker.pid):.0f} MB"


def create_topics(client: WireClient, topics: int, partitions: int) -> None:
    C = messages.CreateTopicsRequest
    started = time.monotonic()
    for t in range(topics):
        r = client.request(
            ApiKey.CREATE_TOPICS,
            7,
            C(
                timeout_ms=600_000,
                topics=[
                    C.CreatableTopic(
                        name=f"t{t}", num_partitions=partitions, replication_factor=1, configs=[]
                    )
                ],
            ),
        )
        assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message
        done = (t + 1) * partitions
        if (t + 1) % max(1, topics // 20) == 0 or t + 1 == topics:
            rate = done / (time.monotonic() - started)
            say(f"  created {done} partitions ({rate:.0f}/s)")


def targets(topics: int, partitions: int, write: int) -> dict[str, list[int]]:
    """``write`` partitions spread evenly over the topics."""
    chosen: dict[str, list[int]] = {}
    total = topics * partitions
    step = max(1, total // max(1, write))
    for n in range(0, total, step)[:write]:
        chosen.setdefault(f"t{n % topics}", []).append(n // topics)
    return chosen


def produce(client: WireClient, chosen: dict[str, list[int]], tag: bytes) -> None:
    P = messages.ProduceRequest
    for topic, parts in chosen.items():
        r = client.request(
            ApiKey.PRODUCE,
            9,
            P(
                transactional_id=None,
                acks=-1,
                timeout_ms=60_000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic,
                        partition_data=[
                            P.PartitionProduceData(
                                index=i,
                                records=build_batch(
                                    [Record(value=b"%s-%s-%d" % (tag, topic.encode(), i))]
                                ),
                            )
                            for i in parts
                        ],
                    )
                ],
            ),
        )
        for p in r.responses[0].partition_responses:
            assert p.error_code == ErrorCode.NONE, (topic, p.index, p.error_code)


def fetch(client: WireClient, chosen: dict[str, list[int]]) -> dict[tuple[str, int], list[bytes]]:
    F = messages.FetchRequest
    out = {}
    for topic, parts in chosen.items():
        r = client.request(
            ApiKey.FETCH,
            12,
            F(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=256 << 20,
                isolation_level=0,
                topics=[
                    F.FetchTopic(
                        topic=topic,
                        partitions=[
                            F.FetchPartition(
                                partition=i, fetch_offset=0, partition_max_bytes=1 << 16
                            )
                            for i in parts
                        ],
                    )
                ],
            ),
        )
        for p in r.responses[0].partitions:
            assert p.error_code == ErrorCode.NONE, (topic, p.partition_index, p.error_code)
            data = memoryview(p.records or b"")
            values = []
            for pos, size, _h in iter_batches(data):
                values += [v for _o, _ts, _k, v, _ in decode_records(data[pos : pos + size])]
            out[(topic, p.partition_index)] = values
    return out


def check(client: WireClient, chosen: dict[str, list[int]], tags: list[bytes]) -> None:
    got = fetch(client, chosen)
    for topic, parts in chosen.items():
        for i in parts:
            want = [b"%s-%s-%d" % (t, topic.encode(), i) for t in tags]
            assert got[(topic, i)] == want, (topic, i, got[(topic, i)], want)


def raise_nofile(wanted: int) -> int:
    """Set RLIMIT_NOFILE to ``wanted`` (soft and hard), or as near as allowed."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(wanted, hard)))
        return wanted
    except (ValueError, OSError):
        got = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (got, hard))
        say(f"RLIMIT_NOFILE: the hard limit here is {hard}; the broker gets {got}")
        return got


def timed_start(broker: BrokerProcess) -> float:
    started = time.monotonic()
    broker.start(timeout=3600)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1000, help="per topic")
    ap.add_argument("--write", type=int, default=5000, help="partitions written and read")
    ap.add_argument("--nofile", type=int, default=65536, help="RLIMIT_NOFILE of the broker")
    ap.add_argument("--dir", default=None, help="where the data directory goes")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--override", action="append", default=[], help="broker setting k=v")
    args = ap.parse_args()

    nofile = raise_nofile(args.nofile)  # the broker inherits it
    overrides = dict(kv.split("=", 1) for kv in args.override)
    root = Path(tempfile.mkdtemp(prefix="headrace-partitions-", dir=args.dir))
    broker = BrokerProcess(root / "data", overrides, log_file=root / "broker.log")
    total = args.topics * args.partitions
    chosen = targets(args.topics, args.partitions, args.write)
    written = sum(len(p) for p in chosen.values())
    results = {}
    try:
        say(f"{total} partitions ({args.topics} topics x {args.partitions}), {written} written")
        t = timed_start(broker)
        say(f"empty start {t:.2f} s: {state(broker)}")
        with WireClient(broker.port, timeout=3600) as client:
            started = time.monotonic()
            create_topics(client, args.topics, args.partitions)
            results["create"] = time.monotonic() - started
            say(f"created in {results['create']:.1f} s: {state(broker)}")
            produce(client, chosen, b"a")
            check(client, chosen, [b"a"])
            results["fds_busy"] = fds(broker.pid)
            results["rss_busy"] = rss_mb(broker.pid)
            say(f"wrote and read {written} partitions: {state(broker)}")
        started = time.monotonic()
        assert broker.stop(timeout=3600) == 0
        results["stop"] = time.monotonic() - started
        say(f"clean stop {results['stop']:.2f} s")

        results["start"] = timed_start(broker)
        results["fds_idle"] = fds(broker.pid)
        results["rss_idle"] = rss_mb(broker.pid)
        say(f"clean start {results['start']:.2f} s: {state(broker)}")
        with WireClient(broker.port, timeout=3600) as client:
            check(client, chosen, [b"a"])
            produce(client, chosen, b"b")
        say(f"wrote {written} partitions again, kill -9: {state(broker)}")
        broker.kill()

        results["recovery"] = timed_start(broker)
        say(f"recovery after kill -9 {results['recovery']:.2f} s: {state(broker)}")
        with WireClient(broker.port, timeout=3600) as client:
            check(client, chosen, [b"a", b"b"])
            results["fds_after"] = fds(broker.pid)
        say(f"read back {written} partitions after recovery: {state(broker)}")
        started = time.monotonic()
        assert broker.stop(timeout=3600) == 0
        results["stop_again"] = time.monotonic() - started
        say(f"clean stop {results['stop_again']:.2f} s")
    finally:
        broker.kill()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    say(
        f"RESULT partitions={total} written={written} nofile={nofile} "
        f"create={results['create']:.1f}s fds_busy={results['fds_busy']} "
        f"rss_busy={results['rss_busy']:.0f}MB stop={results['stop']:.2f}s "
        f"start={results['start']:.2f}s fds_idle={results['fds_idle']} "
        f"rss_idle={results['rss_idle']:.0f}MB recovery={results['recovery']:.2f}s "
        f"stop_again={results['stop_again']:.2f}s"
    )


if __name__ == "__main__":
    main()
