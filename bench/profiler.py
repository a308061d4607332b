"""Profiles under ``python -m bench.run --profile``: py-spy attached to Headrace, and a Java
Flight Recording of Kafka (its execution samples turned into the same collapsed stacks)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import brokers
from headrace.broker.tools.process import pinned, terminate


def pyspy() -> str:
    """py-spy next to this interpreter (a venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy not found: pip install -e '.[bench]'")
    return found


class Profiler:
    """py-spy attached to the broker for the duration of a run (collapsed stacks).

    Blocking sampling (the default; ``--nonblocking`` tears stacks) at 100 Hz, with native
    frames so that time inside uvloop, the socket calls and C extensions is named."""

    def __init__(self, pid: int, out: Path, native: bool = True, idle: bool = False) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [pyspy(), "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "100",
             "--threads", *(["--native"] if native else []), *(["--idle"] if idle else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=pinned(brokers.CLIENT_CPUS))
        time.sleep(0.5)

    def finish(self, timeout: float = 60) -> None:
        """Stop sampling (before the broker shuts down, so that its shutdown is not in the
        profile) and wait for py-spy to write its file."""
        terminate(self.proc, timeout, signal.SIGINT)


class FlightRecording:
    """A Java Flight Recording (the ``profile`` settings: Java execution samples every 10-20
    ms) of a running JVM, from ``start`` (after the broker is ready, so start-up is not in
    it) to ``finish`` (``jcmd JFR.start`` / ``JFR.dump`` / ``JFR.stop``)."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        out.parent.mkdir(parents=True, exist_ok=True)
        self._jcmd("JFR.start", "name=bench", "settings=profile")

    def _jcmd(self, *args: str) -> None:
        res = subprocess.run(["jcmd", str(self.pid), *args], capture_output=True, text=True,
                             timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"jcmd {' '.join(args)}: {res.stdout[-300:]}{res.stderr[-300:]}")

    def finish(self) -> None:
        self._jcmd("JFR.dump", "name=bench", f"filename={self.out}")
        self._jcmd("JFR.stop", "name=bench")


def jfr_to_collapsed(jfr: Path, out: Path, depth: int = 64) -> int:
    """The ``jdk.ExecutionSample`` events of ``jfr`` (``jfr print``, from the JDK) as collapsed
    stacks in ``out``, in py-spy's raw format ("thread;root frame;...;leaf count"), frames as
    "method (package/Class.java)". Returns the number of samples."""
    tool = shutil.which("jfr")
    if not tool:
        raise RuntimeError("the JDK's jfr tool is not on PATH")
    res = subprocess.run([tool, "print", "--events", "jdk.ExecutionSample", "--stack-depth",
                          str(depth), str(jfr)], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"jfr print failed: {res.stderr[-500:]}")
    counts: dict[str, int] = {}
    thread, frames, in_stack = "?", [], False
    for line in res.stdout.splitlines():
        t = line.strip()
        if t.startswith("sampledThread = "):
            thread = t.split('"')[1] if '"' in t else t[16:]
            # thread pools: data-plane-kafka-request-handler-3 -> ...-handler-N
            thread = re.sub(r"-\d+$", "-N", thread)
        elif t.startswith("stackTrace = ["):
            in_stack, frames = True, []
        elif in_stack and t == "]":
            in_stack = False
            key = ";".join([f"thread (jvm): {thread}", *reversed(frames)])
            counts[key] = counts.get(key, 0) + 1
        elif in_stack and t and t != "...":
            sig = t.split(" line:")[0]
            name = sig.split("(")[0]
            cls, _, method = name.rpartition(".")
            frames.append(f"{method} ({cls.replace('.', '/')}.java)")
    out.write_text("".join(f"{k} {v}\n" for k, v in counts.items()))
    return sum(counts.values())
