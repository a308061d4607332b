"""aiokafka (PyPI): the standard scenarios (see compat/kit.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402

from compat import kit  # noqa: E402
from compat.kit import WAIT_S, expect  # noqa: E402


@contextlib.asynccontextmanager
async def admin_client(bootstrap: str):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def create_topic(bootstrap: str, topic: str, partitions: int,
                       configs: dict | None = None) -> None:
    async with admin_client(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])


async def produce(bootstrap: str, topic: str, recs, **conf) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **conf)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k, partition=p, headers=h)
                   for p, k, v, h in recs]
        await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
    finally:
        await producer.stop()


async def read_assigned(bootstrap: str, topic: str, partitions: int, count: int,
                        **conf) -> list:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", **conf)
    await consumer.start()
    got = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                got += [(m.partition, m.key, m.value, list(m.headers or [])) for m in msgs]
    finally:
        await consumer.stop()
    return got


def sync(fn):
    def run(bootstrap: str, prefix: str) -> None:
        asyncio.run(fn(bootstrap, prefix))
    return run


def produce_consume(compression: str):
    async def scenario(bootstrap: str, prefix: str) -> None:
        topic = f"{prefix}-t"
        await create_topic(bootstrap, topic, 3)
        recs = kit.records(300, 3)
        await produce(bootstrap, topic, recs,
                      compression_type=None if compression == "none" else compression)
        kit.check_records(recs, await read_assigned(bootstrap, topic, 3, len(recs)))
    return sync(scenario)


@sync
async def idempotent(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    await create_topic(bootstrap, topic, 2)
    recs = kit.records(2000, 2)
    await produce(bootstrap, topic, recs, enable_idempotence=True, acks="all",
                  max_batch_size=4096)
    kit.check_records(recs, await read_assigned(bootstrap, topic, 2, len(recs)))


@sync
async def group(bootstrap: str, prefix: str) -> None:
    topic, gid = f"{prefix}-t", f"{prefix}-g"
    await create_topic(bootstrap, topic, 4)
    recs = kit.records(400, 4)
    await produce(bootstrap, topic, recs)
    conf = dict(bootstrap_servers=bootstrap, group_id=gid, auto_offset_reset="earliest",
                enable_auto_commit=False, session_timeout_ms=10000,
                heartbeat_interval_ms=500)
    seen: set = set()

    async def poll(c) -> None:
        for msgs in (await c.getmany(timeout_ms=200)).values():
            seen.update((m.partition, m.key) for m in msgs)
        try:
            await c.commit()
        except Exception as exc:  # a commit racing a rebalance may be refused
            if "CommitFailed" not in type(exc).__name__ and "Rebalance" not in type(exc).__name__:
                raise

    async def until(cond, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not await cond():
            if time.monotonic() > deadline:
                raise kit.ScenarioFailed(f"timed out after {WAIT_S:.0f}s waiting for {what}")

    a = AIOKafkaConsumer(topic, **conf)
    b = AIOKafkaConsumer(topic, **conf)
    await a.start()
    try:
        async def a_all() -> bool:
            await poll(a)
            return len(a.assignment()) == 4
        await until(a_all, "the first consumer to be assigned all 4 partitions")
        await b.start()

        async def both() -> bool:
            await poll(a)
            await poll(b)
            pa = {tp.partition for tp in a.assignment()}
            pb = {tp.partition for tp in b.assignment()}
            return bool(pa) and bool(pb) and not (pa & pb) and (pa | pb) == {0, 1, 2, 3}
        await until(both, "a rebalance sharing 4 partitions between 2 consumers")

        async def everything() -> bool:
            await poll(a)
            await poll(b)
            return len(seen) == len(recs)
        await until(everything, f"all {len(recs)} records through the group")
        await a.commit()
        await b.commit()
    finally:
        await a.stop()
        await b.stop()
    checker = AIOKafkaConsumer(**conf)
    await checker.start()
    try:
        offsets = {p: await checker.committed(TopicPartition(topic, p)) for p in range(4)}
    finally:
        await checker.stop()
    expect(offsets == {p: 100 for p in range(4)}, f"committed offsets {offsets}, want 100 each")


@sync
async def admin_topics(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    async with admin_client(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 3, 1,
                                            topic_configs={"retention.ms": "3600000"})])
        expect(topic in await admin.list_topics(), "created topic not listed")
        desc = (await admin.describe_topics([topic]))[0]
        expect(len(desc["partitions"]) == 3, f"described {len(desc['partitions'])} partitions")
        res = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        expect("3600000" in repr(res), f"retention.ms=3600000 not described: {res!r:.300}")
        await admin.create_partitions({topic: NewPartitions(5)})
        deadline = time.monotonic() + WAIT_S
        while len((await admin.describe_topics([topic]))[0]["partitions"]) != 5:
            expect(time.monotonic() < deadline, "5 partitions after CreatePartitions")
            await asyncio.sleep(0.2)
        await admin.delete_topics([topic])
        while topic in await admin.list_topics():
            expect(time.monotonic() < deadline, "the deleted topic to disappear")
            await asyncio.sleep(0.2)


@sync
async def alter_configs(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    async with admin_client(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"retention.ms": "12345"})])
        res = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        expect("12345" in repr(res), f"retention.ms=12345 not described: {res!r:.300}")


@sync
async def transactions(bootstrap: str, prefix: str) -> None:
    topic = f"{prefix}-t"
    await create_topic(bootstrap, topic, 1)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{prefix}-tx")
    try:
        await asyncio.wait_for(p.start(), WAIT_S)
    except asyncio.TimeoutError:
        await p.stop()
        raise kit.ScenarioFailed(f"producer start (FindCoordinator/InitProducerId with a "
                                 f"transactional id) did not finish in {WAIT_S:.0f}s")
    try:
        async with p.transaction():
            for v in kit.COMMITTED:
                await p.send(topic, value=v, partition=0)
        await p.begin_transaction()
        for v in kit.ABORTED:
            await p.send_and_wait(topic, value=v, partition=0)
        await p.abort_transaction()
        async with p.transaction():
            await p.send(topic, value=kit.LAST, partition=0)
    finally:
        await p.stop()
    got = await read_assigned(bootstrap, topic, 1, 11, isolation_level="read_committed")
    kit.check_read_committed(got)


SCENARIOS = kit.standard_scenarios(produce_consume, idempotent=idempotent, group=group,
                                   admin=admin_topics, alter_configs=alter_configs,
                                   transactions=transactions)

if __name__ == "__main__":
    sys.exit(kit.main(SCENARIOS))
