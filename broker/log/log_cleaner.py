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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from headrace.broker.background import run_every, wall_clock_ms
from headrace.protocol.compression import compress, decompress
from headrace.storage import StorageError, clean

log = logging.getLogger("headrace")


class LogCleaner:
    """Retention and compaction passes over the partitions of ``topics``.

    Two schedules (``run_every``): retention every ``retention_check_ms``, compaction every
    ``backoff_ms`` when ``compaction`` is on. Passes never overlap: each takes ``_pass_lock``
    and the work runs in one thread."""

    def __init__(
        self,
        topics,
        *,
        retention_check_ms: int,
        backoff_ms: int,
        compaction: bool,
        dedupe_buffer_bytes: int,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topics = topics
        self.retention_check_ms = retention_check_ms
        self.backoff_ms = backoff_ms
        self.compaction = compaction
        self._map_bytes = dedupe_buffer_bytes
        self.now_ms = now_ms
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="headrace-cleaner")
        self._stopping = threading.Event()
        self._pass_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self.passes = 0
        # for metrics: passes by kind, segments retention deleted, bytes compaction freed
        self.retention_passes = 0
        self.compaction_passes = 0
        self.segments_deleted = 0
        self.bytes_freed = 0

    def start(self) -> None:
        self._tasks.append(
            asyncio.create_task(
                run_every(
                    self.retention_check_ms / 1000,
                    partial(self.run_once, True, False),
                    "log cleaner retention pass",
                )
            )
        )
        if self.compaction:
            self._tasks.append(
                asyncio.create_task(
                    run_every(
                        self.backoff_ms / 1000,
                        partial(self.run_once, False, True),
                        "log cleaner compaction pass",
                    )
                )
            )

    async def stop(self) -> None:
        """Stop between partitions; wait for the partition being worked on."""
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await asyncio.to_thread(self._executor.shutdown, True)

    async def run_once(self, retention: bool = True, compaction: bool = True) -> None:
        async with self._pass_lock:
            await self._run_pass(retention, compaction)

    async def _run_pass(self, retention: bool, compaction: bool) -> None:
        partitions = self.topics.all_partitions()
        if retention:
            now_ms = self.now_ms()
            for p in partitions:
                try:
                    if p.log.active_segment_expired(now_ms):
                        p.log.roll()
                except StorageError as e:
                    log.warning("retention roll of %s failed: %s", p.log.directory, e)
        bounds = None
        if compaction:
            bounds = [
                (p.last_stable_offset, p.producers.active_producers())
                if p.log.config.compacts
                else None
                for p in partitions
            ]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._pass, partitions, retention, bounds)
        self.passes += 1
        self.retention_passes += retention
        self.compaction_passes += compaction

    def _pass(self, partitions, retention: bool, bounds) -> None:
        for i, p in enumerate(partitions):
            if self._stopping.is_set():
                return
            if p.gone:
                continue  # moved away or deleted since the pass began
            plog = p.log
            try:
                if retention:
                    n = plog.apply_retention()
                    self.segments_deleted += n
                    if n:
                        log.info(
                            "retention deleted %d segment(s) of %s; log start offset %d",
                            n,
                            plog.directory,
                            plog.log_start_offset,
                        )
                if bounds is not None and bounds[i] is not None and plog.config.compacts:
                    below, producers = bounds[i]
                    result = clean(
                        plog,
                        decompress=decompress,
                        compress=compress,
                        below=below,
                        producers=producers,
                        map_bytes=self._map_bytes,
                    )
                    if result is not None:
                        self.bytes_freed += max(0, result.bytes_before - result.bytes_after)
                        log.info(
                            "compacted %s: %d -> %d bytes, %d records removed",
                            plog.directory,
                            result.bytes_before,
                            result.bytes_after,
                            result.records_removed,
                        )
            except StorageError as e:
                log.warning("log cleaner: %s", e)
