"""headrace.storage: a partition's segmented log on disk, in Kafka's file layout.

Public surface:

    Log, LogConfig          open/append/read/flush/truncate one partition's log
    AbortedTxn              an entry of a segment's aborted-transactions index (.txnindex)
    clean, CleanResult      one compaction pass over a log (see cleaner.py)
    OffsetOutOfRange        read or delete below the log start or above the log end offset
    StorageError            an I/O failure or unusable files (Kafka's KAFKA_STORAGE_ERROR)

Record batches are opaque bytes here: the caller assigns offsets and passes them in.
"""

from .cleaning import CleanResult, clean
from ._files import fsync_directory
from .errors import OffsetOutOfRange, StorageError
from .log import Log, LogConfig
from .txn_index import AbortedTxn

__all__ = ["AbortedTxn", "CleanResult", "Log", "LogConfig", "OffsetOutOfRange", "StorageError",
           "clean", "fsync_directory"]
