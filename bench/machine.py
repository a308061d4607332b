"""Facts about the machine a run is on: platform, CPUs, and the loopback and page-cache
limits that bound any broker on it."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import brokers
from bench.apache_kafka import HOST, KAFKA_VERSION
from bench.context import HERE, Context
from headrace.broker.tools.process import pinned


def machine() -> dict:
    info = {"platform": platform.platform(), "kernel": platform.release(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "kafka_version": KAFKA_VERSION,
            "broker_cpus": sorted(brokers.BROKER_CPUS), "client_cpus": sorted(brokers.CLIENT_CPUS)}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split()
        info["mem_gib"] = round(int(mem[1]) / (1 << 20), 1)
    except OSError:
        pass
    try:
        v = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
        info["java"] = v.splitlines()[0] if v else None
        info["java_full"] = v.strip()
    except OSError:
        info["java"] = None
    info.update(memory())
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                            capture_output=True, text=True).stdout.strip()
        # uncommitted changes in the broker's own packages are part of what was measured
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "broker", "protocol",
                                "pipeline", "storage"], cwd=HERE.parent, capture_output=True,
                               text=True).stdout.strip()
        info["git_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


MiB = 1 << 20


def iperf_loopback(ctx: Context, seconds: float) -> dict:
    """Loopback TCP bandwidth with iperf3, server on the broker CPU, client on the client CPU:
    {"128KiB": bytes/s, "1MiB": bytes/s, "limit": the larger}."""
    if not shutil.which("iperf3"):
        ctx.progress("iperf3 not found: loopback limit not measured")
        return {}
    out: dict[str, float] = {}
    for label, length in (("128KiB", "128K"), ("1MiB", "1M")):
        port = brokers.free_port_block(1)
        srv = subprocess.Popen(["iperf3", "-s", "-1", "-B", HOST, "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=pinned(brokers.BROKER_CPUS))
        try:
            time.sleep(0.3)
            res = subprocess.run(["iperf3", "-c", HOST, "-p", str(port), "-t", str(seconds),
                                  "-l", length, "-J"], capture_output=True, text=True,
                                 timeout=seconds + 30)
            data = json.loads(res.stdout)
            out[label] = data["end"]["sum_received"]["bits_per_second"] / 8
        except (subprocess.TimeoutExpired, ValueError, KeyError) as e:
            ctx.progress(f"iperf3 {label}: {e}")
        finally:
            srv.kill()
            srv.wait()
    if out:
        out["limit"] = max(out.values())
        ctx.progress("loopback (iperf3): " + ", ".join(
            f"{k} {v / 1e9:.2f} GB/s" for k, v in out.items() if k != "limit"))
    return out


_APPEND_PROBE = """
import json, os, sys, time
path, total = sys.argv[1], int(sys.argv[2])
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
parts, t, c = [], time.perf_counter(), time.process_time()
for i in range(total >> 20):
    os.pwrite(fd, buf, i << 20)
    if (i + 1) % 512 == 0:  # every 512 MiB: wall and CPU seconds
        t1, c1 = time.perf_counter(), time.process_time()
        parts.append([t1 - t, c1 - c])
        t, c = t1, c1
print(json.dumps(parts))
os.close(fd)
os.unlink(path)
"""


def append_limit(ctx: Context, total: int) -> dict:
    """Appending to a new file through the page cache in 1 MiB pwrites, on the broker CPU, in
    the brokers' data directory: the ceiling for any broker writing one log on this machine
    (no fsync). Measured per 512 MiB, because the cost per byte need not be steady (on a
    virtual machine the first GiBs may land on memory the host has backed already, the rest
    not): {"first": MiB/s over the first 512 MiB, "bytes_per_sec": over the rest (all, if
    that is all), "cpu_ms_per_mib": the same part's CPU per MiB, "parts": [[wall, cpu]...]}."""
    ctx.data.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _APPEND_PROBE, str(ctx.data / "append.probe"),
                          str(total)], capture_output=True, text=True, timeout=600,
                         preexec_fn=pinned(brokers.BROKER_CPUS))
    try:
        parts = json.loads(res.stdout)
        rest = parts[1:] or parts
        wall, cpu = sum(w for w, _ in rest), sum(c for _, c in rest)
    except (ValueError, TypeError, IndexError):
        ctx.progress(f"page-cache append probe failed: {res.stderr[-300:]}")
        return {}
    out = {"first": 512 / parts[0][0] * MiB, "bytes_per_sec": len(rest) * 512 * MiB / wall,
           "cpu_ms_per_mib": cpu * 1000 / (len(rest) * 512), "parts": parts}
    ctx.progress(f"page-cache append (1 MiB pwrite, broker CPU): first 512 MiB "
                 f"{out['first'] / MiB:.0f} MiB/s, then {out['bytes_per_sec'] / MiB:.0f} MiB/s "
                 f"({out['cpu_ms_per_mib']:.2f} ms CPU per MiB)")
    return out


def memory() -> dict:
    """The page-cache writeback settings and memory: how much a run must write before the
    kernel throttles writers (``dirty_ratio`` of the dirtyable memory, about MemAvailable, or
    ``dirty_bytes`` when set) and starts writing back (``dirty_background_*``)."""
    out: dict = {}
    for name in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes",
                 "dirty_background_bytes", "dirty_expire_centisecs",
                 "dirty_writeback_centisecs"):
        try:
            out[f"vm.{name}"] = int(Path(f"/proc/sys/vm/{name}").read_text())
        except (OSError, ValueError):
            pass
    try:
        mem = {ln.split(":")[0]: int(ln.split()[1]) * 1024
               for ln in Path("/proc/meminfo").read_text().splitlines()}
        out["mem_available_bytes"] = mem.get("MemAvailable")
        out["mem_total_bytes"] = mem.get("MemTotal")
    except (OSError, ValueError, IndexError):
        return out
    if out.get("vm.dirty_bytes"):
        out["dirty_threshold_bytes"] = out["vm.dirty_bytes"]
    elif out.get("vm.dirty_ratio") and out.get("mem_available_bytes"):
        out["dirty_threshold_bytes"] = out["vm.dirty_ratio"] * out["mem_available_bytes"] // 100
    return out


PAGE_REPORTING = Path("/sys/module/page_reporting/parameters/page_reporting_order")
NO_REPORTING_ORDER = 11  # above the largest block the buddy allocator keeps (order 10)

_TOUCH = """
import mmap, sys
n = int(sys.argv[1])
m = mmap.mmap(-1, n)
for i in range(0, n, 4096):
    m[i] = 1
"""


def memory_text(kept: dict | None, sep: str) -> str:
    """How a run kept the machine's memory (``memory_kept``'s record), or nothing."""
    if not kept:
        return ""
    return (f"{sep}free page reporting {kept['page_reporting']}"
            + (f", {kept['touched_bytes'] / 2**30:.1f} GiB touched first"
               if "touched_bytes" in kept else ""))


@contextmanager
def memory_kept(progress, wanted: bool = True) -> Iterator[dict]:
    """The machine's memory as a dedicated host's for the measurement, and how that was done.

    On a virtual machine with free page reporting (virtio_balloon), memory the guest frees is
    handed back to the host within about a minute, and touching it again costs a host page
    fault per page: on this kind of machine, writing through the page cache into such memory
    goes at 0.36-0.46 GB/s, into memory freed seconds before (or recycled from the page cache)
    at 1.3-3.1 GB/s (``dd`` of 8-12 GiB). A broker's run lands in one or the other depending
    on what ran before it (a fresh broker after the last one's data was deleted: the slow one;
    a later point of a saturation curve, once the page cache has filled memory: the fast one),
    which put curve points up to 3x above the measured runs. So, where the setting exists and may
    be written (root): reporting is turned off for the measurement (an order above the
    largest free block), every page of MemAvailable but 1 GiB is touched once (about a minute
    when cold), and the setting is put back at the end. Not ``wanted`` (a tiny run, which
    writes too little to notice): nothing is changed."""
    info: dict = {"page_reporting": "absent"}
    if not wanted:
        yield {"page_reporting": "left on (a run too small to notice)"}
        return
    try:
        old = PAGE_REPORTING.read_text().strip()
    except OSError:
        yield info
        return
    try:
        PAGE_REPORTING.write_text(str(NO_REPORTING_ORDER))
    except OSError as e:
        info["page_reporting"] = f"on (order {old}); could not turn it off: {e.strerror}"
        progress(f"free page reporting stays on ({e.strerror}): throughput above the page "
                 "cache's size depends on what ran before")
        yield info
        return
    info["page_reporting"] = f"off for the run (order {old} put back at the end)"
    try:
        size = max(0, (memory().get("mem_available_bytes") or 0) - (1 << 30))
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", _TOUCH, str(size)], check=True, timeout=900)
        info["touched_bytes"], info["touch_s"] = size, round(time.monotonic() - t, 1)
        progress(f"free page reporting off; {size / 2**30:.1f} GiB of memory touched in "
                 f"{info['touch_s']:.0f}s, so no run pays the host's first touch")
        yield info
    finally:
        PAGE_REPORTING.write_text(old)


def filesystem(path: Path) -> dict:
    """The file system holding ``path``: device, type, mount options (findmnt, else
    /proc/self/mountinfo)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(["findmnt", "-J", "-T", str(path), "-o",
                              "TARGET,SOURCE,FSTYPE,OPTIONS"], capture_output=True, text=True,
                             timeout=20)
        fs = json.loads(res.stdout)["filesystems"][0]
        return {"target": fs["target"], "source": fs["source"], "fstype": fs["fstype"],
                "options": fs["options"]}
    except (OSError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired):
        pass
    best: dict = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        f, r = left.split(), right.split()
        if str(path.resolve()).startswith(f[4]) and len(f[4]) >= len(best.get("target", "")):
            best = {"target": f[4], "source": r[1], "fstype": r[0], "options": f[5] + "," + r[2]}
    return best


_FSYNC_PROBE = """
import os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
buf = os.urandom(4096)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
lat = []
for i in range(n):
    os.pwrite(fd, buf, i * 4096)
    t = time.perf_counter()
    os.fdatasync(fd)
    lat.append((time.perf_counter() - t) * 1000)
os.close(fd)
os.unlink(path)
lat.sort()
print(lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1])
"""


def fsync_latency(directory: Path, n: int = 300) -> dict:
    """fdatasync after a 4 KiB append, ``n`` times, in ``directory`` (the brokers' data
    directory, during the run): {"p50_ms", "p99_ms", "max_ms"}."""
    directory.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _FSYNC_PROBE, str(directory / "fsync.probe"),
                          str(n)], capture_output=True, text=True, timeout=600)
    try:
        p50, p99, mx = (float(x) for x in res.stdout.split())
    except ValueError:
        return {"error": res.stderr[-300:]}
    return {"p50_ms": p50, "p99_ms": p99, "max_ms": mx, "count": n}
