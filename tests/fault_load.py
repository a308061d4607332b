"""A checked load for fault tests (tests/broker/test_replication.py, bench/faults.py): idempotent
acks=all producers whose acknowledged records are all read back afterwards.

Each producer (its own confluent-kafka ``Producer``, idempotent, acks=all, in a thread) writes
numbered records ``"<producer>:<n>"`` to one partition of the topic (producer i to partition
i mod the partition count), so the order of one producer's records is the order they must be
read in. Every acknowledgement is recorded with its partition, offset and time.

``check`` reads the whole topic back with a consumer (assign, from the start, up to each
partition's high watermark) and counts, over the acknowledged records: ``lost`` (acknowledged,
not read), ``duplicated`` (read more than once) and ``reordered`` (a producer's records read
out of the order it wrote them); ``copies`` names the first few duplicated records with the
offsets each copy was read at and the offset its acknowledgement gave (two offsets: the log
holds two copies; one offset twice: a read returned it twice).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


@dataclass
class Acks:
    """What one producer had acknowledged: n -> (partition, offset, monotonic time)."""

    acked: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    sent: int = 0


class AckedLoad:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        producers: int = 3,
        partitions: int = 3,
        interval_s: float = 0.002,
        extra: dict | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.extra = extra or {}
        self.acks = [Acks() for _ in range(producers)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def start(self) -> AckedLoad:
        for i in range(len(self.acks)):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, i: int) -> None:
        acks = self.acks[i]
        partition = i % self.partitions
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
                **self.extra,
            }
        )

        def delivered(err, msg, n) -> None:
            if err is not None:
                acks.failed[n] = str(err)
            else:
                acks.acked[n] = (msg.partition(), msg.offset(), time.monotonic())

        n = 0
        while not self._stop.is_set():
            try:
                producer.produce(
                    self.topic,
                    value=f"{i}:{n}".encode(),
                    partition=partition,
                    on_delivery=lambda err, msg, n=n: delivered(err, msg, n),
                )
            except BufferError:
                producer.poll(0.05)
                continue
            except KafkaError as e:  # a fatal idempotence error stops this producer
                self.errors.append(f"producer {i}: {e}")
                return
            acks.sent = n = n + 1
            producer.poll(0)
            if self.interval_s:
                time.sleep(self.interval_s)
        remaining = producer.flush(150)
        if remaining:
            self.errors.append(f"producer {i}: {remaining} records never answered")

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(200)

    def acked_count(self) -> int:
        return sum(len(a.acked) for a in self.acks)

    def first_ack_after(self, since: float, partition: int | None = None) -> float | None:
        """The monotonic time of the first acknowledgement after ``since`` (of ``partition``)."""
        best = None
        for a in self.acks:
            for p, _, t in list(a.acked.values()):
                if t > since and (partition is None or p == partition):
                    best = t if best is None else min(best, t)
        return best

    def longest_gaps(self, since: float = 0.0) -> dict[int, float]:
        """Per partition, the longest time between two acknowledgements after ``since``: how
        long the partition was unavailable to the producers at worst."""
        times: dict[int, list[float]] = {}
        for a in self.acks:
            for p, _, t in list(a.acked.values()):
                if t >= since:
                    times.setdefault(p, []).append(t)
        return {
            p: max((b - a for a, b in zip(sorted(ts), sorted(ts)[1:])), default=0.0)
            for p, ts in sorted(times.items())
        }

    def check(self, timeout: float = 120) -> dict:
        """Read the topic back; counts of acked, lost, duplicated and reordered records."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"check-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        ends = {}
        for p in range(self.partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)
            ends[p] = high
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        seen: dict[int, list[int]] = {i: [] for i in range(len(self.acks))}
        offsets: dict[tuple[int, int], list[int]] = {}  # (producer, n) -> offsets read at
        done = {p for p, end in ends.items() if end <= 0}
        deadline = time.monotonic() + timeout
        while len(done) < self.partitions and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    continue
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
                producer, n = (int(x) for x in m.value().decode().split(":"))
                seen.setdefault(producer, []).append(n)
                offsets.setdefault((producer, n), []).append(m.offset())
        consumer.close()
        lost = duplicated = reordered = 0
        acked = 0
        copies = []
        for i, a in enumerate(self.acks):
            got = seen.get(i, [])
            for n in a.acked:
                acked += 1
                read_at = offsets.get((i, n), [])
                if not read_at:
                    lost += 1
                elif len(read_at) > 1:
                    duplicated += len(read_at) - 1
                    if len(copies) < 5:
                        copies.append(f"{i}:{n} read at {read_at}, acked at {a.acked[n][1]}")
            reordered += sum(1 for x, y in zip(got, got[1:]) if y <= x and y in a.acked)
        return {
            "acked": acked,
            "lost": lost,
            "duplicated": duplicated,
            "reordered": reordered,
            "failed": sum(len(a.failed) for a in self.acks),
            "read_all": int(len(done) == self.partitions),
            "copies": copies,
        }
