"""How fast this machine fills the page cache: the ceiling of any broker's buffered appends.

    python -m bench.pagecache [--mib 2048] [--rounds 2] [--settle 15] [--dir DIR]

Each run writes ``--mib`` MiB in 1 MiB ``pwrite`` calls to new files in ``--dir`` and reports
MiB/s over the writes (the fsync after them is timed apart), in four ways, interleaved:

- one file, one thread: a partition's log, as either broker appends to it;
- one file, two threads writing its two halves: whether a second writer helps one log
  (the filesystem serialises buffered writes to one file);
- two files, two threads: two partitions;
- one file made with ``posix_fallocate`` first, one thread writing while a second asks the
  kernel to read ahead (``POSIX_FADV_WILLNEED``) up to 256 MiB beyond the writer, so that
  the page-cache pages exist before the copy into them.

Before each run the tool waits ``--settle`` seconds after deleting the last run's files: on a
VM whose free memory goes back to its host (free page reporting), a page the guest freed a
moment ago is cheap to use again, and a page it has not used lately is not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

MiB = 1 << 20
AHEAD = 256 * MiB


def write(fd: int, start: int, end: int, progress: list[int] | None = None) -> None:
    data = os.urandom(MiB)
    for position in range(start, end, MiB):
        os.pwrite(fd, data, position)
        if progress is not None:
            progress[0] = position


def run(mode: str, directory: Path, total: int) -> tuple[float, float]:
    """(MiB/s of the writes, seconds of the fsyncs after them)."""
    files = 2 if mode == "two files" else 1
    fds = [os.open(directory / f"f{i}", os.O_RDWR | os.O_CREAT | os.O_TRUNC) for i in range(files)]
    try:
        jobs: list[tuple] = []
        if mode == "one file":
            jobs = [(fds[0], 0, total)]
        elif mode == "one file, two threads":
            jobs = [(fds[0], 0, total // 2), (fds[0], total // 2, total)]
        elif mode == "two files":
            jobs = [(fds[0], 0, total // 2), (fds[1], 0, total // 2)]
        progress = [0]
        if mode == "preallocated, read ahead":
            os.posix_fallocate(fds[0], 0, total)
            jobs = [(fds[0], 0, total, progress)]
        started = time.monotonic()
        threads = [threading.Thread(target=write, args=job) for job in jobs]
        if mode == "preallocated, read ahead":
            threads.append(threading.Thread(target=read_ahead, args=(fds[0], total, progress),
                                            daemon=True))
        for t in threads:
            t.start()
        for t in threads[: len(jobs)]:
            t.join()
        elapsed = time.monotonic() - started
        started = time.monotonic()
        for fd in fds:
            os.fsync(fd)
        return total / MiB / elapsed, time.monotonic() - started
    finally:
        for i, fd in enumerate(fds):
            os.close(fd)
            os.unlink(directory / f"f{i}")


def read_ahead(fd: int, total: int, progress: list[int]) -> None:
    position = 0
    while position < total:
        if position > progress[0] + AHEAD:
            time.sleep(0.001)
            continue
        os.posix_fadvise(fd, position, 8 * MiB, os.POSIX_FADV_WILLNEED)
        position += 8 * MiB


MODES = ("one file", "one file, two threads", "two files", "preallocated, read ahead")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--settle", type=float, default=15.0)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "headrace-pagecache")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            os.sync()
            time.sleep(args.settle)
            rate, fsync_s = run(mode, args.dir, args.mib * MiB)
            results[mode].append((rate, fsync_s))
            print(f"round {r + 1} {mode:<26} {rate:7.0f} MiB/s  fsync {fsync_s:.2f} s", flush=True)
    print(f"\n{args.mib} MiB in 1 MiB pwrites per run, {args.settle:.0f} s settle before each, "
          f"median (min-max) of {args.rounds}:")
    for mode, runs in results.items():
        rates = [x for x, _ in runs]
        print(f"  {mode:<26} {statistics.median(rates):7.0f} MiB/s ({min(rates):.0f}-"
              f"{max(rates):.0f})")


if __name__ == "__main__":
    main()
