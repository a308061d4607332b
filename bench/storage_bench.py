"""Micro-benchmark of headrace.storage appends and reads (not a test).

For 1 KiB and 64 KiB batches it measures Log.append throughput

  * with no fsync (page cache only),
  * with an fsync per batch (append + flush),
  * with group commit (a thread calling flush in a loop while the main thread appends),

next to ``dd`` writing the same bytes in the same block size to the same filesystem (plain,
``oflag=dsync`` for the per-batch fsync case), and sequential read throughput. Prints MB/s
(10^6 bytes) and the ratio to dd.

    python bench/storage_bench.py [--dir /tmp] [--mb 256] [--fsync-seconds 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time

import crc32c

from headrace.storage import Log, LogConfig


def make_batch(size: int) -> bytearray:
    """One v2 batch of ``size`` bytes (a single record whose value fills it), valid CRC."""
    value_len = size - 61 - 8  # record framing below takes ~8 bytes for these sizes
    value = os.urandom(max(0, value_len))

    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        out = bytearray()
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
        return bytes(out)

    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    now = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + record
    head = struct.pack(">qiibI", 0, 9 + len(tail), 0, 2, crc32c.crc32c(tail))
    return bytearray(head + tail)


def run_appends(directory: str, batch: bytearray, count: int, mode: str) -> float:
    """Seconds to append ``count`` batches in ``mode`` ('none', 'each', 'group')."""
    path = os.path.join(directory, f"bench-{mode}-{len(batch)}")
    log = Log.open(path, LogConfig(), recover=False)
    stop = threading.Event()
    flusher = None
    if mode == "group":
        def loop() -> None:
            while not stop.is_set():
                log.flush()
        flusher = threading.Thread(target=loop)
        flusher.start()
    start = time.perf_counter()
    for i in range(count):
        batch[0:8] = i.to_bytes(8, "big")
        log.append(batch, i, i, 0)
        if mode == "each":
            log.flush()
    if mode != "none":
        stop.set()
        if flusher:
            flusher.join()
        log.flush()  # everything durable before the clock stops
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, path


def run_reads(path: str, total: int) -> float:
    log = Log.open(path, LogConfig(), recover=False)
    # sequential: follow batch boundaries using the base offset of the last batch read
    got = 0
    offset = 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        got += len(data)
        pos = 0
        last = offset
        while pos < len(data):
            base = struct.unpack_from(">q", data, pos)[0]
            last = base + struct.unpack_from(">i", data, pos + 23)[0]
            pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
        offset = last + 1
    elapsed = time.perf_counter() - start
    log.close()
    assert got == total, (got, total)
    return elapsed


def run_dd(directory: str, block: int, count: int, mode: str) -> float:
    """Seconds dd takes; mode 'none' (page cache), 'each' (oflag=dsync), 'group' (fdatasync
    once at the end)."""
    out = os.path.join(directory, "dd.out")
    cmd = ["dd", "if=/dev/zero", f"of={out}", f"bs={block}", f"count={count}"]
    cmd += {"none": [], "each": ["oflag=dsync"], "group": ["conv=fdatasync"]}[mode]
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - start
    os.unlink(out)
    m = re.search(r"copied, ([0-9.eE+-]+) s", res.stderr)
    return float(m.group(1)) if m else elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--mb", type=int, default=256, help="MB written per no-fsync run")
    ap.add_argument("--fsync-seconds", type=float, default=2.0,
                    help="rough length of each fsync-per-batch run")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir)
    print(f"directory {work}")
    print(f"{'batch':>7} {'mode':<24} {'MB/s':>9} {'dd MB/s':>9} {'ratio':>6} {'us/append':>10}")
    try:
        for size in (1024, 64 * 1024):
            batch = make_batch(size)
            size = len(batch)
            n = args.mb * 1_000_000 // size
            # fsync per batch costs ~0.2-0.5 ms: size the run by time, not bytes
            n_each = max(200, int(args.fsync_seconds / 0.0004))
            results = []
            for mode, count in (("none", n), ("each", n_each), ("group", n)):
                dd_time = run_dd(work, size, count, mode)
                elapsed, path = run_appends(work, batch, count, mode)
                results.append((mode, count, elapsed, dd_time, path))
            labels = {"none": "append, no fsync", "each": "append + fsync each",
                      "group": "append, group commit"}
            for mode, count, elapsed, dd_time, path in results:
                mbps = count * size / elapsed / 1e6
                dd_mbps = count * size / dd_time / 1e6
                print(f"{size:>7} {labels[mode]:<24} {mbps:>9.0f} {dd_mbps:>9.0f} "
                      f"{mbps / dd_mbps:>6.2f} {elapsed / count * 1e6:>10.1f}")
            path = results[0][4]
            elapsed = run_reads(path, n * size)
            print(f"{size:>7} {'sequential read 1 MiB':<24} {n * size / elapsed / 1e6:>9.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
