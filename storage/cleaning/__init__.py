"""Log compaction: keep the latest record per key (``cleanup.policy=compact``).

How this works
--------------
One pass, ``clean(log, ...)``, runs in a background thread and does its heavy work without
the log's lock; appends, flushes and reads go on meanwhile. The cleaner is a client of the
log: it reads a snapshot of the leading inactive segments (``Log.inactive_segments``) and
hands its result to ``Log.replace_segments``.

Files, in the order to read them:

    cleaner.py       ``clean`` and ``CleanResult``: one pass after another
    plan.py          1. which segments, the dirty ratio, the compaction lags, the groups
    key_map.py       2. the bounded offset map: key digest -> greatest offset
    rewrite.py       3. writing each group's surviving batches as one new segment
    transactions.py     ... Kafka's rules for aborted records, markers and delete horizons
    batches.py       the header fields and record walk the others read

4. Swap (``Log.replace_segments``, storage/swap.py). If the log still starts with exactly the
   planned segments (no retention, DeleteRecords or truncation meanwhile), the staging
   directory is committed by renaming it to ``cleaner.swap``, the old segments' files are
   unlinked, the new ones moved in and the segment list updated; otherwise the work is
   thrown away. ``cleaner_offset`` becomes the end of the cleaned range and is checkpointed.
   A crash after the commit point is finished when the log is next opened.

Layering: storage imports nothing from the rest of the project, and batches are opaque bytes
to it. Compaction has to read keys, which may sit in compressed batches (gzip, snappy, lz4,
zstd); rather than carry codecs here, the caller passes ``decompress(codec, data)`` and
``compress(codec, data)`` (the broker hands in the protocol package's). The record walk itself
(boundaries, offset delta, key, null value) is small and lives in storage/_records.py.
Without the codecs, compressed batches are copied unchanged and their keys ignored: data is
kept, never lost.
"""

from .cleaner import CleanResult, clean

__all__ = ["CleanResult", "clean"]
