"""A log's settings (Kafka's topic-level configs that the storage engine applies)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .io import BACKENDS
from .segment import INT32_MAX


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # log.roll.ms / segment.ms
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes (max index file size)
    retention_ms: int = -1  # retention.ms; -1: keep forever
    retention_bytes: int = -1  # retention.bytes; -1: no size limit
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms (tombstones)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = (1 << 63) - 1  # max.compaction.lag.ms
    io_backend: str = "os"  # "os" or "io_uring" (see io.py); fixed when the log is opened

    @property
    def deletes(self) -> bool:
        """Whether old segments are removed by retention (policy contains ``delete``)."""
        return "delete" in _policy_words(self.cleanup_policy)

    @property
    def compacts(self) -> bool:
        """Whether the log is compacted (policy contains ``compact``)."""
        return "compact" in _policy_words(self.cleanup_policy)

    def __post_init__(self) -> None:
        if not 61 <= self.segment_bytes <= INT32_MAX:
            raise ValueError("segment_bytes must be in [61, 2**31 - 1]")
        if self.segment_ms <= 0:
            raise ValueError("segment_ms must be positive")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.segment_index_bytes < 24:
            raise ValueError("segment_index_bytes must be >= 24")
        if not _policy_words(self.cleanup_policy) <= {"delete", "compact"}:
            raise ValueError(f"unknown cleanup policy {self.cleanup_policy!r}")
        if self.max_compaction_lag_ms <= 0:
            raise ValueError("max_compaction_lag_ms must be positive")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")
        if self.io_backend not in BACKENDS:
            raise ValueError(f"io_backend must be one of {BACKENDS}")


@functools.lru_cache(maxsize=64)
def _policy_words(policy: str) -> frozenset[str]:
    return frozenset(w.strip() for w in policy.split(",") if w.strip())
