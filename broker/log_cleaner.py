"""The log cleaner: retention and compaction in the background, off the request path.

Every ``log.retention.check.interval.ms`` each log whose ``cleanup.policy`` includes
``delete`` loses its expired segments (``retention.ms``, ``retention.bytes``); every
``log.cleaner.backoff.ms`` each log whose policy includes ``compact`` gets a compaction pass
(when ``log.cleaner.enable``; the pass itself checks ``min.cleanable.dirty.ratio`` and
``min.compaction.lag.ms``). The work runs in one dedicated thread, partition by partition;
the storage engine swaps segments in under the log's lock only briefly, so produce and fetch
never wait for it. The only step on the event loop is rolling an active segment that is
itself wholly expired (so that retention can delete it, as Kafka does): creating three empty
files.

Compaction reads keys inside batches, which may be compressed: the codecs come from the
protocol package and are handed to the storage engine, which imports nothing from the rest
of the project. Compaction stops below a partition's last stable offset, so records of a
transaction still open are left alone; it removes the records of aborted transactions (the
storage engine reads them from the partition's ``.txnindex`` files) and, once nothing is left
for them to decide, the markers, after ``delete.retention.ms``. Each partition's active
producers (their last batch) are taken on the event loop and handed over, so compaction keeps
the header of a producer's last batch and sequence checks still hold afterwards. The key map
is bounded by ``log.cleaner.dedupe.buffer.size``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from headrace.protocol.compression import compress, decompress
from headrace.storage import StorageError, clean

log = logging.getLogger("headrace")


class LogCleaner:
    def __init__(self, broker) -> None:
        self.broker = broker
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="headrace-cleaner")
        self._stopping = threading.Event()
        self._task: asyncio.Task | None = None
        self._map_bytes = int(broker.config["log.cleaner.dedupe.buffer.size"])
        self.passes = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop between partitions; wait for the partition being worked on."""
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        await asyncio.to_thread(self._executor.shutdown, True)

    async def _run(self) -> None:
        config = self.broker.config
        retention_s = int(config["log.retention.check.interval.ms"]) / 1000
        backoff_s = int(config["log.cleaner.backoff.ms"]) / 1000
        compaction = bool(config["log.cleaner.enable"])
        loop = asyncio.get_running_loop()
        next_retention = loop.time() + retention_s
        next_compaction = loop.time() + backoff_s
        while True:
            wake = min(next_retention, next_compaction) if compaction else next_retention
            await asyncio.sleep(max(0.0, wake - loop.time()))
            now = loop.time()
            do_retention = now >= next_retention
            do_compaction = compaction and now >= next_compaction
            if do_retention:
                next_retention = now + retention_s
            if do_compaction:
                next_compaction = now + backoff_s
            try:
                await self.run_once(do_retention, do_compaction)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")

    async def run_once(self, retention: bool = True, compaction: bool = True) -> None:
        partitions = [p for t in list(self.broker.topics.topics.values()) for p in t.partitions]
        if retention:
            now_ms = int(time.time() * 1000)
            for p in partitions:
                try:
                    if p.log.active_segment_expired(now_ms):
                        p.log.roll()
                except StorageError as e:
                    log.warning("retention roll of %s failed: %s", p.log.directory, e)
        bounds = None
        if compaction:
            bounds = [(p.last_stable_offset, p.producers.active_producers())
                      if p.log.config.compacts else None for p in partitions]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._pass, partitions, retention, bounds)
        self.passes += 1

    def _pass(self, partitions, retention: bool, bounds) -> None:
        for i, p in enumerate(partitions):
            if self._stopping.is_set():
                return
            plog = p.log
            try:
                if retention:
                    n = plog.apply_retention()
                    if n:
                        log.info("retention deleted %d segment(s) of %s; log start offset %d",
                                 n, plog.directory, plog.log_start_offset)
                if bounds is not None and bounds[i] is not None and plog.config.compacts:
                    below, producers = bounds[i]
                    result = clean(plog, decompress=decompress, compress=compress,
                                   below=below, producers=producers, map_bytes=self._map_bytes)
                    if result is not None:
                        log.info("compacted %s: %d -> %d bytes, %d records removed",
                                 plog.directory, result.bytes_before, result.bytes_after,
                                 result.records_removed)
            except StorageError as e:
                log.warning("log cleaner: %s", e)
