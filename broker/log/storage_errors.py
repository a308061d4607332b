"""Storage errors in the broker's log: the partition, what failed, and the cause.

A request that meets a ``StorageError`` answers KAFKA_STORAGE_ERROR for the partitions it
touched; ``storage_failed(partition, operation, error)`` also puts it in the broker's log at
ERROR, e.g. ``partition orders-0: append failed: append to /data/orders-0 failed: [Errno 28]
No space left on device``. A failing disk fails every request that touches it, so each
(partition, operation) is logged at most once per ``INTERVAL_S``; the next line says how
many were left out in between.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("headrace")

INTERVAL_S = 10.0
# (partition, operation) -> (monotonic time last logged, failures left out since)
_last: dict[tuple[str, str], tuple[float, int]] = {}


def storage_failed(partition: str, operation: str, error: BaseException) -> None:
    """Log that ``operation`` (append, read, flush...) on ``partition`` (``topic-index``)
    failed with ``error``."""
    key = (partition, operation)
    now = time.monotonic()
    logged_at, left_out = _last.get(key, (-INTERVAL_S, 0))
    if now - logged_at < INTERVAL_S:
        _last[key] = (logged_at, left_out + 1)
        return
    _last[key] = (now, 0)
    more = f" ({left_out} more since the last report)" if left_out else ""
    log.error("partition %s: %s failed: %s%s", partition, operation, error, more)
