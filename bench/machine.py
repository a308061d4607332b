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
from pathlib import Path

from bench import brokers
from bench.apache_kafka import HOST, KAFKA_VERSION
from bench.context import HERE, Context
from headrace.broker.process import pinned


def machine() -> dict:
    info = {"platform": platform.platform(), "python": sys.version.split()[0],
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
    except OSError:
        info["java"] = None
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
import os, sys, time
path, total = sys.argv[1], int(sys.argv[2])
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
t, c = time.perf_counter(), time.process_time()
for i in range(total >> 20):
    os.pwrite(fd, buf, i << 20)
print(total / (time.perf_counter() - t), total / max(time.process_time() - c, 1e-9))
os.close(fd)
os.unlink(path)
"""


def append_limit(ctx: Context, total: int) -> dict:
    """Appending to a new file through the page cache in 1 MiB pwrites, on the broker CPU, in
    the brokers' data directory: the ceiling for any broker writing one log on this machine
    (no fsync). {"bytes_per_sec": wall, "bytes_per_cpu_sec": per CPU second}."""
    ctx.data.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _APPEND_PROBE, str(ctx.data / "append.probe"),
                          str(total)], capture_output=True, text=True, timeout=300,
                         preexec_fn=pinned(brokers.BROKER_CPUS))
    try:
        wall, cpu = (float(x) for x in res.stdout.split())
    except ValueError:
        ctx.progress(f"page-cache append probe failed: {res.stderr[-300:]}")
        return {}
    ctx.progress(f"page-cache append (1 MiB pwrite, broker CPU): {wall / 2**20:.0f} MiB/s")
    return {"bytes_per_sec": wall, "bytes_per_cpu_sec": cpu}
