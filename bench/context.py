"""What every scenario runner is given: the run's settings and folders, and progress lines."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


class Progress:
    """One line per step on stderr, with the elapsed time."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            el = time.monotonic() - self.t0
            print(f"[bench {int(el // 60):02d}:{int(el % 60):02d}] {msg}", file=sys.stderr,
                  flush=True)


class Context:
    def __init__(self, args: argparse.Namespace, stamp: str) -> None:
        self.size: str = args.size
        self.runs: int = args.runs
        self.kinds: list[str] = args.brokers.split(",")
        self.raw = Path(args.raw_dir or RESULTS / "raw") / stamp
        self.data = Path(args.data_dir) / stamp if args.data_dir else self.raw / "data"
        self.logs = self.raw / "logs"
        self.progress = Progress(args.quiet)
        self.profile_dir: Path | None = None
        self.profile_idle: bool = args.profile_idle
        self.seq = 0
        # saturation (bench/run.py): absent from older callers' namespaces
        self.clients: list[int] = [int(x) for x in str(getattr(args, "clients", "1")).split(",")]
        self.growth: float = getattr(args, "growth", 0.05)
        self.driver: str = getattr(args, "driver", "perf")
        self.kafka_variants: list[str] = str(getattr(args, "kafka_variants", "kafka")).split(",")
        self.headrace_workers: int = getattr(args, "headrace_workers", 1)
        self.layouts: list[str] = str(getattr(args, "layouts", "pinned")).split(",")
        self.sweep: set[str] = set(str(getattr(args, "sweep", "") or "").split(","))
        self.sweep_fractions: list[float] = [
            float(x) for x in str(getattr(args, "sweep_fractions", "0.25,0.5,0.75")).split(",")]
        self.sweep_clients: int = getattr(args, "sweep_clients", 1)
        self.dirty_threshold: int | None = None
        self.settings: dict[str, dict] = {}  # broker variant: its settings in full
        self.start_retries: list[str] = []  # broker starts tried again (a port taken)

    def next_dir(self, tag: str) -> Path:
        self.seq += 1
        return self.data / f"{self.seq:03d}-{tag}"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def echo(ctx: Context, prefix: str):
    """An ``on_line`` for ``java_tool`` that shows the tools' progress lines."""
    def on_line(line: str) -> None:
        if "records sent" in line or line.startswith("E2E") or "," in line:
            ctx.progress(f"  {prefix} {line.strip()[:150]}")
    return on_line
