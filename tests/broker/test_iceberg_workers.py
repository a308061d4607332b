"""The translator's worker processes (broker/iceberg/workers.py): a request answers, an
exception comes back as the request's failure, a worker that dies or hangs fails its request
and is replaced, and no worker outlives its broker (closed with it, or killed with -9); their
timeout and priority are broker settings."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from headrace.broker.iceberg.workers import RemoteError, WorkerFailed, WorkerPool


def pid_and_nice(_: object) -> tuple[int, int]:
    return os.getpid(), os.nice(0)


def policy(_: object) -> int:
    return os.sched_getscheduler(0)


def fail(message: str) -> None:
    raise ValueError(message)


def die(_: object) -> None:
    os._exit(3)


def hang(seconds: float) -> None:
    time.sleep(seconds)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # (a zombie is not alive)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_round_timeout_and_the_workers_priority_are_broker_settings(tmp_path):
    from headrace.broker.config.config import BrokerConfig
    from headrace.broker.iceberg.translator import IcebergSettings

    given = BrokerConfig(
        {
            "iceberg.round.timeout.ms": "5000",
            "iceberg.worker.nice": "0",
            "iceberg.worker.sched.idle": "false",
        }
    )
    settings = IcebergSettings.of(given, tmp_path)
    assert (settings.round_timeout_s, settings.worker_nice, settings.worker_sched_idle) == (
        5.0,
        0,
        False,
    )
    default = IcebergSettings.of(BrokerConfig(), tmp_path)
    assert (default.round_timeout_s, default.worker_nice, default.worker_sched_idle) == (
        300.0,
        10,
        True,
    )


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_workers_run_under_sched_idle_when_asked():
    async def main() -> None:
        for sched_idle, expected in ((True, os.SCHED_IDLE), (False, os.SCHED_OTHER)):
            pool = WorkerPool(1, nice=5, sched_idle=sched_idle)
            try:
                assert await pool.run(policy, None) == expected
            finally:
                pool.close()

    asyncio.run(main())


def test_requests_failures_deaths_and_hangs():
    async def main() -> None:
        pool = WorkerPool(2, nice=5, timeout_s=2.0)
        try:
            pid, nice = await pool.run(pid_and_nice, None)
            assert pid != os.getpid()
            assert nice == min(os.nice(0) + 5, 19)
            again, _ = await pool.run(pid_and_nice, None)
            assert again == pid  # (kept between requests)
            with pytest.raises(RemoteError, match="ValueError: no"):
                await pool.run(fail, "no")
            assert (await pool.run(pid_and_nice, None))[0] == pid  # (an error is no death)
            with pytest.raises(WorkerFailed, match="ended"):
                await pool.run(die, None)
            assert not alive(pid)
            started = time.monotonic()
            with pytest.raises(WorkerFailed, match="no answer"):
                await pool.run(hang, 60.0)
            assert time.monotonic() - started < 10
            both = await asyncio.gather(pool.run(pid_and_nice, None), pool.run(hang, 0.2))
            assert both[0][0] != pid
            assert pool.processes == 2
            pids = [w.process.pid for w in pool._idle]
        finally:
            pool.close()
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids)

    asyncio.run(main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_broker_killed_by_signal_9():
    script = textwrap.dedent(
        """
        import asyncio, sys, time
        from headrace.broker.iceberg.workers import WorkerPool
        from tests.broker.test_iceberg_workers import pid_and_nice, hang

        async def main():
            pool = WorkerPool(2)
            pid, _ = await pool.run(pid_and_nice, None)
            print(pid, flush=True)
            await pool.run(hang, 600.0)  # (busy when its parent is killed)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        worker = int(parent.stdout.readline())
        assert alive(worker)
        time.sleep(0.5)  # (the second request is running)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(worker)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
