"""Idempotent-producer state of one partition: the broker side of exactly-once appends.

For each producer id the partition keeps the producer's epoch and its last five appended
batches (first sequence, last sequence, base offset). A batch is checked before it is
appended:

* no producer id (-1): appended as is;
* producer unknown here: any sequence is accepted (the state may have expired);
* older epoch: INVALID_PRODUCER_EPOCH;
* newer epoch: must start again at sequence 0;
* same epoch: a batch equal to one of the last five (same first and last sequence) is a
  retry: nothing is appended and the original base offset is returned; otherwise its first
  sequence must follow the last one (wrapping from 2^31-1 to 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER.

The state is snapshotted to ``producer-state.json`` in the partition directory when the log
closes, and rebuilt on open by replaying batch headers from the snapshot's offset (from the
log start when there is no snapshot). A snapshot stays valid after a crash: it was taken at a
clean close, when everything below its offset had been flushed, so recovery never cuts below
it.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

from headrace.protocol.errors import ErrorCode
from headrace.protocol.records import read_batch_header

SNAPSHOT = "producer-state.json"
CACHED_BATCHES = 5
_SEQ_MAX = (1 << 31) - 1


def next_sequence(last: int) -> int:
    return 0 if last == _SEQ_MAX else last + 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    return (base_sequence + last_offset_delta) % (_SEQ_MAX + 1)


class ProducerEntry:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int]] = deque(maxlen=CACHED_BATCHES)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> tuple[int, int]:
        """(error code, -1) to append or refuse, or (NONE, base offset) for a retry."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return ErrorCode.NONE, -1
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if epoch > entry.epoch:
            if first_seq == 0:
                return ErrorCode.NONE, -1
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        for cached_first, cached_last, base_offset in entry.batches:
            if cached_first == first_seq and cached_last == last_seq:
                return ErrorCode.NONE, base_offset
        if entry.batches and first_seq != next_sequence(entry.batches[-1][1]):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def record(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int, base_offset: int
    ) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append((first_seq, last_seq, base_offset))

    def replay(self, header: bytes | memoryview) -> None:
        """Apply one stored batch header (used when rebuilding after a restart)."""
        h = read_batch_header(header)
        if h.producer_id < 0 or h.is_control or h.base_sequence < 0:
            return
        self.record(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            last_sequence(h.base_sequence, h.last_offset_delta),
            h.base_offset,
        )

    def truncate(self, end_offset: int) -> None:
        """Forget batches at or above ``end_offset``."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b[2] < end_offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=CACHED_BATCHES)

    # snapshots ------------------------------------------------------------------------------

    def write_snapshot(self, directory: Path, offset: int) -> None:
        data = {
            "offset": offset,
            "producers": {
                str(pid): [e.epoch, list(e.batches)] for pid, e in self.producers.items()
            },
        }
        tmp = directory / (SNAPSHOT + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / SNAPSHOT)

    @classmethod
    def load(cls, directory: Path, log) -> ProducerStateManager:
        """The snapshot (if any, and not beyond the log end) plus the headers after it."""
        state = cls()
        start = log.log_start_offset
        path = directory / SNAPSHOT
        try:
            data = json.loads(path.read_text())
            if data["offset"] <= log.log_end_offset:
                for pid, (epoch, batches) in data["producers"].items():
                    entry = state.producers[int(pid)] = ProducerEntry(epoch)
                    entry.batches.extend(tuple(b) for b in batches)
                start = max(start, data["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if start < log.log_end_offset:
            for header in log.batch_headers(start):
                state.replay(header)
        return state
