"""Micro-benchmark of headrace.storage appends, reads and start-up (not a test).

For 1 KiB and 64 KiB batches, and for each I/O backend (os, io_uring), it measures
Log.append throughput

  * with no fsync (page cache only),
  * with an fsync per batch (append + flush),
  * with group commit (a flush thread that, like the broker's flush stage, starts a flush
    whenever appends are waiting and covers all of them with it, while the main thread
    keeps appending),

next to ``dd`` writing the same bytes in the same block size to the same filesystem in the same
run: plain (no fsync), ``oflag=dsync`` (per-batch fsync) and ``conv=fdatasync`` (one fsync at
the end: the raw write-plus-fsync bandwidth that group commit is compared with); and
sequential read throughput next to ``dd`` reading the segment file with 1 MiB blocks. Prints
MB/s (10^6 bytes) and the ratio to dd, with the machine's load average.

    python bench/storage_bench.py [--dir /tmp] [--mb 256] [--fsync-seconds 2] [--backend os]
    python bench/storage_bench.py --startup-gib 10 [--dir /var/tmp]

``--startup-gib N`` instead writes N GiB of valid batches (one partition of 1 GiB segments,
and 100 partitions sharing the same amount), closes the logs cleanly and times opening them
again: what a broker start with a clean-shutdown marker costs in storage.
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
from headrace.storage.io import available_backends


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


def run_appends(directory: str, batch: bytearray, count: int, mode: str,
                backend: str = "os") -> float:
    """Seconds to append ``count`` batches in ``mode`` ('none', 'each', 'group')."""
    path = os.path.join(directory, f"bench-{backend}-{mode}-{len(batch)}")
    log = Log.open(path, LogConfig(io_backend=backend), recover=False)
    stop = threading.Event()
    pending = threading.Event()
    flusher = None
    if mode == "group":
        # the broker's flush stage: a flush starts when appends are waiting for one, covers
        # every append made before it, and the next one starts when it is done
        def loop() -> None:
            while not stop.is_set():
                if pending.wait(0.05):
                    pending.clear()
                    log.flush()
        flusher = threading.Thread(target=loop)
        flusher.start()
    start = time.perf_counter()
    for i in range(count):
        batch[0:8] = i.to_bytes(8, "big")
        log.append(batch, i, i, 0)
        if mode == "each":
            log.flush()
        elif flusher is not None:
            pending.set()
    if mode != "none":
        stop.set()
        if flusher:
            flusher.join()
        log.flush()  # everything durable before the clock stops
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, path


def run_reads(path: str, total: int, backend: str = "os") -> float:
    log = Log.open(path, LogConfig(io_backend=backend), recover=False)
    # sequential, 1 MiB per read; every batch here is the same size and holds one record, so
    # the next offset follows from the bytes returned (no per-batch parsing in the loop)
    size = len(log.read(0, 1))
    got = 0
    offset = 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        got += len(data)
        offset += len(data) // size
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


def run_dd_read(path: str) -> float:
    """Seconds dd takes to read a log's segment files with 1 MiB blocks (page cache)."""
    total = 0.0
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            res = subprocess.run(["dd", f"if={os.path.join(path, name)}", "of=/dev/null",
                                  "bs=1M"], capture_output=True, text=True, check=True)
            m = re.search(r"copied, ([0-9.eE+-]+) s", res.stderr)
            total += float(m.group(1))
    return total


def startup(directory: str, gib: int) -> None:
    """Write ``gib`` GiB, close cleanly, time the clean open (see the module doc)."""
    batch = make_batch(1 << 20)
    size = len(batch)
    count = (gib << 30) // size
    work = tempfile.mkdtemp(prefix="storage-startup-", dir=directory)
    try:
        for partitions in (1, 100):
            started = time.perf_counter()
            per = count // partitions
            paths = [os.path.join(work, f"p{partitions}-{i}") for i in range(partitions)]
            for path in paths:
                log = Log.open(path, LogConfig(), recover=False)
                for j in range(per):
                    batch[0:8] = j.to_bytes(8, "big")
                    log.append(batch, j, j, 0)
                log.close()
            written = time.perf_counter() - started
            subprocess.run(["sync"], check=False)
            t0 = time.perf_counter()
            logs = [Log.open(path, LogConfig(), recover=False) for path in paths]
            opened = time.perf_counter() - t0
            segments = sum(log.segment_count for log in logs)
            for log in logs:
                log.close()
            print(f"{partitions:>4} partition(s), {per * partitions * size / 2**30:.1f} GiB in "
                  f"{segments} segments (written in {written:.0f} s): clean open "
                  f"{opened * 1000:.1f} ms")
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work, exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--mb", type=int, default=256, help="MB written per no-fsync run")
    ap.add_argument("--fsync-seconds", type=float, default=2.0,
                    help="rough length of each fsync-per-batch run")
    ap.add_argument("--backend", action="append", choices=["os", "io_uring"],
                    help="I/O backend(s) to measure (default: every available one)")
    ap.add_argument("--startup-gib", type=int, default=0,
                    help="measure a clean open of this many GiB instead")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} cores)")
    if args.startup_gib:
        startup(args.dir, args.startup_gib)
        return
    backends = args.backend or available_backends()
    work = tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir)
    print(f"directory {work}")
    print(f"{'backend':<9} {'batch':>7} {'mode':<24} {'MB/s':>9} {'dd MB/s':>9} {'ratio':>6} "
          f"{'us/append':>10}")
    labels = {"none": "append, no fsync", "each": "append + fsync each",
              "group": "append, group commit"}
    try:
        for size in (1024, 64 * 1024):
            batch = make_batch(size)
            size = len(batch)
            n = args.mb * 1_000_000 // size
            # fsync per batch costs ~0.2-0.5 ms: size the run by time, not bytes
            n_each = max(200, int(args.fsync_seconds / 0.0004))
            for backend in backends:
                results = []
                for mode, count in (("none", n), ("each", n_each), ("group", n)):
                    dd_time = run_dd(work, size, count, mode)
                    elapsed, path = run_appends(work, batch, count, mode, backend)
                    results.append((mode, count, elapsed, dd_time, path))
                for mode, count, elapsed, dd_time, path in results:
                    mbps = count * size / elapsed / 1e6
                    dd_mbps = count * size / dd_time / 1e6
                    print(f"{backend:<9} {size:>7} {labels[mode]:<24} {mbps:>9.0f} "
                          f"{dd_mbps:>9.0f} {mbps / dd_mbps:>6.2f} "
                          f"{elapsed / count * 1e6:>10.1f}")
                path = results[0][4]
                elapsed = run_reads(path, n * size, backend)
                dd_read = run_dd_read(path)
                mbps, dd_mbps = n * size / elapsed / 1e6, n * size / dd_read / 1e6
                print(f"{backend:<9} {size:>7} {'sequential read 1 MiB':<24} {mbps:>9.0f} "
                      f"{dd_mbps:>9.0f} {mbps / dd_mbps:>6.2f}")
                for _, _, _, _, p in results:
                    shutil.rmtree(p, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
