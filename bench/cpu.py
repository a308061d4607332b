"""CPU accounting from /proc, shared by the benchmarks (``bench.cluster``, ``bench.run``).

``Meter`` measures named groups of processes (a broker and its workers, ZooKeeper, clients)
over a window, and what else ran on the machine meanwhile: kernel threads, interrupts, other
processes and the harness itself, so that a run on a shared machine says how shared it was.
``processes``, ``thread_cpu_seconds``, ``children_of``, ``descendants``, ``machine_jiffies``
and ``disk_counters`` are the readings it is built from.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

from bench import brokers

MiB = 1 << 20




def processes() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, user+system CPU-seconds)} of every process (from /proc/*/stat)."""
    tck = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tck)
    return out


def thread_cpu_seconds(pid: int, tid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_switches(pid: int) -> int:
    """How many times the threads of ``pid`` alive now were switched out so far (voluntary:
    they waited, for a lock, a queue, the socket; or not), from /proc."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            lines = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(ln.split()[1]) for ln in lines if "ctxt_switches:" in ln)
    return total


def children_of(pid: int) -> list[int]:
    return sorted(p for p, (ppid, _) in processes().items() if ppid == pid)


def machine_jiffies() -> tuple[int, int, int, int]:
    """(busy, total, irq + softirq, iowait) jiffies of all CPUs together (busy excludes idle
    and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v), v[5] + v[6], v[4]


def disk_counters(path: Path) -> tuple[int, int] | None:
    """(sectors written, milliseconds spent doing I/O) of the block device holding ``path``
    (/proc/diskstats), or None when it is not found (e.g. a partition of a device mapper)."""
    try:
        dev = path.stat().st_dev
        major, minor = os.major(dev), os.minor(dev)
        for line in Path("/proc/diskstats").read_text().splitlines():
            f = line.split()
            if int(f[0]) == major and int(f[1]) == minor:
                return int(f[9]), int(f[12])
    except (OSError, ValueError, IndexError):
        pass
    return None


def descendants(root: int, procs: dict[int, tuple[int, float]]) -> set[int]:
    out, todo = set(), [root]
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(p)
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


class Meter:
    """CPU-seconds of named groups of processes between ``start`` and ``stop``, and of what
    else ran meanwhile: a thread looks at every process every ``POLL_S`` seconds, so that
    short-lived processes of other work are counted too (one that lives less than that may
    be missed: it is left in ``unattributed``)."""

    POLL_S = 0.25

    def __init__(self, groups: dict[str, list[int]], disk: Path | None = None) -> None:
        self.groups = groups
        self.disk = disk  # a path on the brokers' disk: its writes and busy time are counted

    def _read(self) -> dict[int, float]:
        return {p: brokers.cpu_seconds(p) or 0.0 for ps in self.groups.values() for p in ps}

    def _main_threads(self) -> dict[int, float]:
        """CPU-seconds of each broker process's main thread (Headrace's event loop)."""
        return {p: thread_cpu_seconds(p, p) for p in self.groups.get("broker", [])}

    def start(self) -> Meter:
        self.t0, self.c0, self.j0 = time.monotonic(), self._read(), machine_jiffies()
        self.d0 = disk_counters(self.disk) if self.disk else None
        self.m0 = self._main_threads()
        self.r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p0 = processes()
        self.first = {pid: cpu for pid, (_ppid, cpu) in p0.items()}  # a newcomer starts at 0
        self.last = dict(p0)
        self.ours = set(p for ps in self.groups.values() for p in ps)
        self._see(p0)
        self._done = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()
        return self

    def _poll(self) -> None:
        while not self._done.wait(self.POLL_S):
            self._see(processes())

    def _see(self, snap: dict[int, tuple[int, float]]) -> None:
        self.ours |= descendants(os.getpid(), snap)  # clients, brokers, ZooKeeper, tools
        self.last.update(snap)

    def _outside(self) -> dict[str, float]:
        """CPU-seconds of what is not the benchmark: kernel threads (writeback, the journal,
        ...), other processes (other work on a shared machine), and this harness."""
        out = {"kernel_threads": 0.0, "other_processes": 0.0, "harness": 0.0}
        for pid, (ppid, c) in self.last.items():
            if pid in self.ours:
                continue
            d = c - self.first.get(pid, 0.0)
            if pid == os.getpid():
                out["harness"] += d
            elif pid == 2 or ppid == 2:
                out["kernel_threads"] += d
            else:
                out["other_processes"] += d
        return out

    def stop(self) -> dict:
        c1, j1, m1 = self._read(), machine_jiffies(), self._main_threads()
        d1 = disk_counters(self.disk) if self.disk else None
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - self.t0
        self._done.set()
        self._poller.join()
        self._see(processes())
        outside = self._outside()
        out: dict = {"wall_s": wall}
        if m1:
            # the busiest broker's main thread: near 1.0 means its event loop is saturated
            out["broker_main_thread_cores"] = [(m1[p] - self.m0[p]) / wall for p in m1]
        for name, pids in self.groups.items():
            per = [c1[p] - self.c0[p] for p in pids]
            out[f"{name}_cpu_s"] = sum(per)
            out[f"{name}_per_process_cpu_s"] = per
        busy, total = j1[0] - self.j0[0], j1[1] - self.j0[1]
        ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        cores = (os.cpu_count() or 1) / total if total else 0.0
        out["machine_busy_cores"] = busy * cores if total else None
        out["interrupt_cores"] = (j1[2] - self.j0[2]) * cores if total else None
        out["iowait_cores"] = (j1[3] - self.j0[3]) * cores if total else None
        if d1 and self.d0:
            # everything written to that disk (other work's writes too), and the share of the
            # window it had I/O in progress
            out["disk_write_mib_per_sec"] = (d1[0] - self.d0[0]) * 512 / MiB / wall
            out["disk_busy"] = (d1[1] - self.d0[1]) / 1000 / wall
        for k, v in outside.items():
            out[f"{k}_cores"] = v / wall
        out["cpus"] = os.cpu_count()
        out["affinity_cpus"] = ncpu
        # processes reaped in the window (the ProducerPerformance JVMs)
        out["reaped_children_cpu_s"] = (r1.ru_utime - self.r0.ru_utime) + (
            r1.ru_stime - self.r0.ru_stime)
        return out
