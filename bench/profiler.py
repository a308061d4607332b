"""py-spy attached to a running broker (``python -m bench.run --profile``)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import brokers
from headrace.broker.process import pinned, terminate


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
