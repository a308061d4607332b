"""``headrace verify DIR``: check every segment of a data directory (or of one partition).

For each partition directory (DIR itself when it holds segments, else each directory in it
that does), every segment in offset order through ``headrace.storage.check_partition``: each
batch whole and its CRC-32C, base offsets above the batch and the segment before, each
offset index entry against the batch at its position, each time index entry against the
batches' timestamps. Nothing is written; run it on a stopped broker's directory (a running
broker's active segments may be mid-append).

Exit 0 and a summary when all is well; exit 1 and, first, the first bad position
(``file: position N: what``) when something is wrong, then every other problem found
(``--max-problems``, default 20). Directories over ``PROGRESS_MIN_BYTES`` get a progress bar
on stderr when it is a terminal (``--progress`` always, ``--no-progress`` never).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from headrace.storage import Problem, check_partition, segment_paths

PROGRESS_MIN_BYTES = 64 << 20
BAR_WIDTH = 30
REDRAW_S = 0.2


def add_parser(commands) -> None:
    verify = commands.add_parser(
        "verify", help="check every segment's CRCs, offsets and indexes in a data directory"
    )
    verify.add_argument("directory", metavar="DIR")
    verify.add_argument("--max-problems", type=int, default=20, help="problems listed (20)")
    verify.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: on a terminal, for large directories)",
    )


def partitions(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        raise ValueError(f"{directory} is not a directory")
    if segment_paths(directory):
        return [directory]
    found = [
        os.path.join(directory, name)
        for name in sorted(os.listdir(directory))
        if os.path.isdir(os.path.join(directory, name))
        and segment_paths(os.path.join(directory, name))
    ]
    if not found:
        raise ValueError(f"{directory} holds no segments (.log files), nor do its directories")
    return found


class _Bar:
    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.drawn_at = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.drawn_at >= REDRAW_S or self.done >= self.total:
            self.drawn_at = now
            self.draw()

    def draw(self) -> None:
        share = min(self.done / self.total, 1.0)
        filled = int(share * BAR_WIDTH)
        sys.stderr.write(
            f"\rverifying [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%} "
            f"{self.done >> 20}/{self.total >> 20} MiB"
        )
        sys.stderr.flush()

    def finish(self) -> None:
        if self.done < self.total:  # stopped early at a corrupt batch: show where it got
            self.draw()
        sys.stderr.write("\n")


def run(args: argparse.Namespace) -> int:
    dirs = partitions(args.directory)
    total = sum(os.path.getsize(p) for d in dirs for p in segment_paths(d))
    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and total >= PROGRESS_MIN_BYTES
    bar = _Bar(total) if show else None
    problems: list[Problem] = []
    segments = batches = checked = 0
    for directory in dirs:
        for check in check_partition(directory, bar.advance if bar is not None else None):
            segments += 1
            batches += check.batches
            checked += check.bytes
            problems += check.problems
    if bar is not None:
        bar.finish()
    what = f"{len(dirs)} partition(s), {segments} segment(s), {batches} batch(es), {checked} bytes"
    if not problems:
        print(f"verified {what}: no problems")
        return 0
    print(f"first bad position: {problems[0]}")
    for p in problems[1 : args.max_problems]:
        print(f"also: {p}")
    if len(problems) > args.max_problems:
        print(f"... and {len(problems) - args.max_problems} more")
    print(f"checked {what}: {len(problems)} problem(s)")
    return 1
