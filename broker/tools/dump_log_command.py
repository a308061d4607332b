"""``headrace dump-log FILE|DIR [--print-data]``: what a segment holds, as Kafka's
``kafka-dump-log`` shows it.

A ``.log`` file: one line per batch (offsets, count, sequences, producer id and epoch, leader
epoch, transactional and control flags, position, timestamp, size, compression, whether its
CRC matches); with ``--print-data`` a line per record under it (offset, timestamp, key and
value sizes, sequence, header keys, key and payload as UTF-8; a control record's marker). An
``.index`` file: ``offset: O position: P`` lines; a ``.timeindex`` file: ``timestamp: T
offset: O``. A directory: each of its segments (and those of the partition directories in
it), in offset order. Files are read through ``headrace.storage``; a file that
stops being a run of batches ends its dump with the position and exit code 1.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys

from headrace.protocol.compression import UnsupportedCompressionError
from headrace.protocol.records import CorruptRecordError, decode_records
from headrace.storage import CorruptSegment, index_entries, segment_batches, segment_paths

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def add_parser(commands) -> None:
    dump = commands.add_parser(
        "dump-log", help="print the batches (and records) of segment files, as kafka-dump-log"
    )
    dump.add_argument("paths", nargs="+", metavar="FILE|DIR")
    dump.add_argument("--print-data", action="store_true", help="each record too")


def run(args: argparse.Namespace) -> int:
    failed = False
    for path in args.paths:
        for file in _files(path):
            failed |= not _dump(file, args.print_data)
    return 1 if failed else 0


def _files(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    found = segment_paths(path)
    for name in sorted(os.listdir(path)):
        sub = os.path.join(path, name)
        if os.path.isdir(sub):
            found += segment_paths(sub)
    if not found:
        raise ValueError(f"{path} holds no segment (.log) files")
    return found


def _dump(path: str, print_data: bool) -> bool:
    print(f"Dumping {path}")
    if path.endswith((".index", ".timeindex")):
        index = path.endswith(".index")
        for a, b in index_entries(path):
            print(f"offset: {a} position: {b}" if index else f"timestamp: {a} offset: {b}")
        return True
    if not path.endswith(".log"):
        raise ValueError(f"{path}: not a .log, .index or .timeindex file")
    print(f"Log starting offset: {int(os.path.basename(path)[:-4])}")
    try:
        for batch in segment_batches(path):
            h = batch.header
            time_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
            print(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} "
                f"count: {h.records_count} baseSequence: {h.base_sequence} "
                f"lastSequence: {h.last_sequence} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} "
                f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {_bool(h.is_transactional)} "
                f"isControl: {_bool(h.is_control)} "
                f"deleteHorizonMs: {h.base_timestamp if h.has_delete_horizon else 'none'} "
                f"position: {batch.position} {time_type}: {h.max_timestamp} "
                f"size: {len(batch.data)} magic: {h.magic} "
                f"compresscodec: {CODECS.get(h.compression, h.compression)} "
                f"crcValid: {_bool(batch.crc_valid)}"
            )
            if print_data:
                _records(batch, time_type)
    except CorruptSegment as e:
        print(f"Found a corrupt batch at position {e.position}: {e.message}")
        print(f"headrace: {e}", file=sys.stderr)
        return False
    return True


def _records(batch, time_type: str) -> None:
    h = batch.header
    try:
        records = decode_records(memoryview(batch.data))
    except (CorruptRecordError, UnsupportedCompressionError) as e:
        print(f"| cannot decode the records: {e}")
        return
    for offset, timestamp, key, value, headers in records:
        sequence = -1
        if h.base_sequence >= 0:  # wraps at 2^31 - 1, as the producer's sequence numbers
            sequence = (h.base_sequence + offset - h.base_offset) & 0x7FFFFFFF
        line = (
            f"| offset: {offset} {time_type}: {timestamp} keySize: {_size(key)} "
            f"valueSize: {_size(value)} sequence: {sequence} "
            f"headerKeys: [{','.join(k for k, _ in headers)}]"
        )
        if h.is_control:
            line += " " + _control(key, value)
        else:
            if key is not None:
                line += f" key: {_text(key)}"
            line += f" payload: {_text(value)}"
        print(line)


def _control(key: bytes | None, value: bytes | None) -> str:
    if key is None or len(key) < _CONTROL_KEY.size:
        return "controlType: unknown"
    _, kind = _CONTROL_KEY.unpack_from(key)
    if kind in (0, 1) and value is not None and len(value) >= _CONTROL_VALUE.size:
        _, epoch = _CONTROL_VALUE.unpack_from(value)
        return f"endTxnMarker: {'COMMIT' if kind else 'ABORT'} coordinatorEpoch: {epoch}"
    return f"controlType: {kind}"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes | None) -> str:
    return "null" if data is None else bytes(data).decode("utf-8", "replace")


def _bool(flag: bool) -> str:
    return "true" if flag else "false"
