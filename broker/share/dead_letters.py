"""Share groups' dead-letter queues (KIP-1191, ``share.version`` 2): a record a share group
rejects, or that reaches ``share.delivery.count.limit``, is copied to the group's
dead-letter topic before it is archived.

How this works
--------------
A share group has a dead-letter queue when its ``errors.deadletterqueue.topic.name`` group
config names one and the cluster's ``share.version`` is 2. The topic must start with the
broker's ``errors.deadletterqueue.topic.name.prefix`` ("dlq."), not with "__", and have
``errors.deadletterqueue.group.enable=true``; if it does not exist it is made (with that
setting) when ``errors.deadletterqueue.auto.create.topics.enable`` is on. A dead letter goes
to partition ``source partition % partitions`` of it, one record per offset, stamped now,
with Kafka's headers naming where it came from (``__dlq.errors.topic``, ``.partition``,
``.offset``, ``.group``, ``.delivery.count``, ``.message``: why). With the group's
``errors.deadletterqueue.copy.record.enable`` the record's key and value come along, read
back from the log.

The share partition manager sends a share partition's dead letters just before it writes the
state that archives them (share_partition_manager.py), so a broker that dies in between sends
them again: a dead letter arrives at least once. One that cannot be sent (no such topic, not
enabled, a write refused) is logged and the records are archived all the same, as in Kafka.
The write is acks=all: appended here when this broker leads the partition, else a Produce to
its leader on a connection of its own (``share-dlq``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.group.group_configs import DLQ_COPY_RECORD, DLQ_TOPIC
from headrace.protocol import ApiKey, ErrorCode, messages
from headrace.protocol.records import Record, build_batch, decode_records, iter_batches

log = logging.getLogger("headrace.share")

ENABLE = "errors.deadletterqueue.group.enable"  # the topic setting
BATCH_BYTES = 1 << 20  # dead letters per batch written, at most about this many bytes
HEADER = "__dlq.errors."


class DeadLetterError(Exception):
    pass


class DeadLetters:
    def __init__(self, *, topics, cluster, config, configs, features, read_pool, client) -> None:
        self.topics = topics
        self.cluster = cluster
        self.config = config
        self.configs = configs  # group configs
        self.features = features
        self.read_pool = read_pool
        self.client = client  # a broker client of its own, to the dead-letter topic's leaders
        self.timeout_s = int(config["request.timeout.ms"]) / 1000

    def enabled(self, group_id: str) -> bool:
        return self.features.level(SHARE_VERSION) >= 2 and bool(
            self.configs.value(group_id, DLQ_TOPIC)
        )

    async def send(self, group_id: str, source, spans: list[tuple[int, int, int, str]]) -> None:
        """Copy the dead letters ``spans`` ((first, last, delivery count, why) of partition
        ``source``) to the group's dead-letter topic; a failure is logged."""
        try:
            await self._send(group_id, source, spans)
        except DeadLetterError as e:
            log.warning("share group %s: dead letters not written: %s", group_id, e)
        except Exception:
            log.exception("share group %s: dead letters not written", group_id)

    async def _send(self, group_id: str, source, spans) -> None:
        name = str(self.configs.value(group_id, DLQ_TOPIC))
        prefix = str(self.config["errors.deadletterqueue.topic.name.prefix"])
        if name.startswith("__"):
            raise DeadLetterError(f"{name}: a dead-letter topic cannot start with __")
        if prefix and not name.startswith(prefix):
            raise DeadLetterError(f"{name} does not start with the prefix {prefix!r}")
        topic = self.topics.get(name)
        if topic is None:
            if not self.config["errors.deadletterqueue.auto.create.topics.enable"]:
                raise DeadLetterError(f"{name} does not exist and auto creation is off")
            partitions = int(self.config["num.partitions"])
            topic = await self.topics.create(name, partitions, {ENABLE: True})
        if not topic.setting(ENABLE):
            raise DeadLetterError(f"{name} does not have {ENABLE}=true")
        copy = str(self.configs.value(group_id, DLQ_COPY_RECORD)).lower() == "true"
        originals = await self._originals(source, spans) if copy else {}
        now = int(time.time() * 1000)
        origin = source.topic.name
        records = []
        for first, last, count, why in spans:
            for offset in range(first, last + 1):
                key, value = originals.get(offset, (None, None))
                headers = [
                    (HEADER + "topic", origin.encode()),
                    (HEADER + "partition", str(source.index).encode()),
                    (HEADER + "offset", str(offset).encode()),
                    (HEADER + "group", group_id.encode()),
                    (HEADER + "delivery.count", str(count).encode()),
                    (HEADER + "message", why.encode()),
                ]
                records.append(Record(key, value, headers, now))
        index = source.index % topic.count
        for chunk in _chunks(records):
            await self._write(topic, index, build_batch(chunk))

    async def _originals(self, source, spans) -> dict[int, tuple]:
        """offset -> (key, value) of the records of ``spans``, read back from the log."""
        wanted = {o for first, last, _, _ in spans for o in range(first, last + 1)}
        log_ = source.log

        def read() -> dict[int, tuple]:
            out: dict[int, tuple] = {}
            offset, end = min(wanted), max(wanted) + 1
            while offset < end:
                data = log_.read(offset, BATCH_BYTES, max_offset=end)
                if not data:
                    break
                for pos, size, h in iter_batches(data):
                    if not h.is_control:
                        view = memoryview(data)[pos : pos + size]
                        for o, _, key, value, _ in decode_records(view):
                            if o in wanted:
                                out[o] = (key, value)
                    offset = h.base_offset + h.last_offset_delta + 1
            return out

        return await asyncio.wrap_future(self.read_pool.submit(read))

    async def _write(self, topic, index: int, batch: bytes) -> None:
        partition = topic.partition(index)
        if partition is not None:  # led here
            records = bytearray(batch)
            error, _, _ = partition.append(memoryview(records), len(records))
            if error:
                raise DeadLetterError(f"{topic.name}-{index}: {ErrorCode(error).name}")
            end = partition.log.log_end_offset
            await self.topics.flush([partition])
            error = await partition.replicated(end, self.timeout_s)
        else:
            leader = self.cluster.leader(topic.name, index)
            if leader < 0:
                raise DeadLetterError(f"{topic.name}-{index} has no leader")
            P = messages.ProduceRequest
            request = P(
                transactional_id=None,
                acks=-1,
                timeout_ms=int(self.timeout_s * 1000),
                topic_data=[
                    P.TopicProduceData(
                        name=topic.name,
                        partition_data=[P.PartitionProduceData(index=index, records=batch)],
                    )
                ],
            )
            answer = await self.client.send(leader, ApiKey.PRODUCE, 9, request, self.timeout_s)
            error = answer.responses[0].partition_responses[0].error_code
        if error:
            raise DeadLetterError(f"{topic.name}-{index}: {ErrorCode(error).name}")


def _chunks(records: list[Record]):
    chunk: list[Record] = []
    size = 0
    for r in records:
        chunk.append(r)
        size += 200 + len(r.key or b"") + len(r.value or b"")
        if size >= BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk
