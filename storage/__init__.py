"""headrace.storage: a partition's segmented log on disk, in Kafka's file layout.

Public surface:

    Log, LogConfig          open/append/read/flush/truncate one partition's log
    OffsetCheckpoints       every log's offsets checkpoint in one file per data directory
    LogFilesView            a log's segment files as of Log.files_view(), read from another
                            process (the Iceberg translator's workers)
    FileRegion              stored bytes left in their pinned file (Log.read_region)
    OpenFiles               the descriptor budget logs open their files under (LRU, shared)
    AbortedTxn              an entry of a segment's aborted-transactions index (.txnindex)
    clean, CleanResult      one compaction pass over a log (see cleaning/)
    LeaderEpochCache        a partition's leader epochs and their leader-epoch-checkpoint file
    OffsetOutOfRange        read or delete below the log start or above the log end offset
    StorageError            an I/O failure or unusable files (Kafka's KAFKA_STORAGE_ERROR)
    WouldBlock, nowait_reads
                            a no-wait read (Log.read_region(nowait=True), for the event
                            loop) that would have waited; whether such reads can succeed here
    fsync_directory         make a directory's entries durable (used by the broker too)
    replace_file            replace a small file whole, atomically (and durably)
    segment_batches, index_entries, check_segment, check_partition, segment_paths,
    CorruptSegment, Problem
                            segment and index files read as they are, without a Log, and
                            checked (CRCs, offsets, indexes): the operator's tools

Record batches are opaque bytes here: the caller assigns offsets and passes them in.

The log's invariants (log.py states them in full): its segments are sorted by base offset
and never empty, the last one is the only one appended to; they tile the offsets, so
``segments[i + 1].base_offset`` is ``segments[i]``'s next offset (the offset after its last
batch, unless compaction removed batches at its end); ``log_start_offset`` lies in the first
segment (or equals ``log_end_offset``); ``recovery_point`` <= ``log_end_offset`` and all
below it is fsynced; every published position is a batch boundary. Only Log changes its
segment list: retention, DeleteRecords, truncation and the cleaner's swap
(``Log.replace_segments``) all go through it.

Files, in the order to open them:

    log.py          Log: its state and invariants, threads, truncation, retention and
                    DeleteRecords, replace_segments, close
    config.py       LogConfig (segment.bytes, retention.ms, cleanup.policy, ...)
    recovery.py     Log.open: loading segments and the checkpoint; recovery after a crash
    append.py       Log.append and roll
    reads.py        Log.read, read_region, batch_headers, offset_for_timestamp, aborted_txns,
                    files_view
    files_view.py   LogFilesView: a log's files read from another process (Log.files_view)
    flush.py        Log.flush and the offsets checkpoint
    retention.py    which leading segments retention and DeleteRecords remove
    swap.py         the on-disk steps of replace_segments, and finishing one after a crash
    segment.py      LogSegment: one .log file and its indexes
    index.py        the sparse offset and time indexes (.index, .timeindex)
    txn_index.py    the aborted-transactions index (.txnindex), AbortedTxn
    leader_epochs.py LeaderEpochCache: (epoch, start offset) entries, leader-epoch-checkpoint
    checkpoint.py   OffsetCheckpoints: the data directory's partition-offsets-checkpoint
    io.py           I/O backends (os, io_uring) for writes, fsyncs and reads
    open_files.py   OpenFiles: open files on demand within a budget, least recently used
                    closed first; pins, fsync before closing a dirty file
    cleaning/       log compaction (its __init__ maps its files)
    _files.py       every file name in a partition directory; fsync by name
    _batch.py       the v2 batch header fields storage reads; iter_batches
    _records.py     the record walk compaction needs (keys, tombstones)
    errors.py       StorageError, OffsetOutOfRange, WouldBlock
    _pages.c        whether a memory mapping's pages are in memory (no-wait index lookups)
    examine.py      read-only walks and checks of segment files (dump-log, verify)
"""

from ._files import fsync_directory, replace_file
from .checkpoint import OffsetCheckpoints
from .cleaning import CleanResult, clean
from .errors import OffsetOutOfRange, StorageError, WouldBlock
from .examine import (
    CorruptSegment,
    Problem,
    check_partition,
    check_segment,
    index_entries,
    segment_batches,
    segment_paths,
)
from .files_view import LogFilesView
from .io import nowait_reads
from .leader_epochs import LeaderEpochCache
from .log import Log, LogConfig
from .open_files import OpenFiles, OpenFilesExhausted
from .reads import FileRegion
from .txn_index import AbortedTxn

__all__ = [
    "LogFilesView",
    "CorruptSegment",
    "Problem",
    "check_partition",
    "check_segment",
    "index_entries",
    "segment_batches",
    "segment_paths",
    "AbortedTxn",
    "CleanResult",
    "FileRegion",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "OffsetCheckpoints",
    "OffsetOutOfRange",
    "OpenFiles",
    "OpenFilesExhausted",
    "StorageError",
    "WouldBlock",
    "clean",
    "fsync_directory",
    "replace_file",
    "nowait_reads",
]
