"""Shared fixtures: a real Headrace broker process on 127.0.0.1."""

from __future__ import annotations

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

