"""Shared fixtures: a real Headrace broker process on 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from headrace.broker.process import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, data_dir: Path | None = None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()



@pytest.fixture
def small_disk(tmp_path, request):
    """A tmpfs of ``request.param`` (default 2m) mounted for the test: a disk that fills up.
    Needs root; skipped otherwise."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    size = getattr(request, "param", "2m")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
