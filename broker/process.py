"""A Headrace broker in a child process, for tests and tools that need a real Kafka endpoint.

    from headrace.broker.process import BrokerProcess

    with BrokerProcess("/tmp/data", {"num.partitions": "3"}) as broker:
        produce_and_consume(broker.bootstrap)  # "127.0.0.1:<free port>"

``start`` runs ``python -m headrace serve`` on 127.0.0.1 (a free port unless one is given)
and returns once the broker listens; ``stop`` is the clean path (SIGTERM: in-flight requests
answered, logs flushed, clean-shutdown marker written), ``kill`` the unclean one (SIGKILL).
A restart keeps the port and the data directory. The broker's log lines are kept in
``lines`` (the most recent ``KEEP_LINES``).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = re.compile(r"headrace listening on ([\d.]+):(\d+)")
KEEP_LINES = 2000


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | Path,
        overrides: dict[str, str] | None = None,
        args: list[str] = (),
        port: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.args = list(args)  # more command-line arguments, e.g. ["--config", path]
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.seen = 0  # lines read since the first start (``lines`` keeps the last ones)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [sys.executable, "-m", "headrace", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        cmd += self.args
        proc = self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )
        listening = threading.Event()

        def pump() -> None:
            for line in proc.stderr:
                self.lines.append(line.rstrip("\n"))
                if len(self.lines) > KEEP_LINES:
                    del self.lines[: len(self.lines) - KEEP_LINES]
                self.seen += 1
                m = LISTENING.search(line)
                if m and not listening.is_set():
                    self.port = int(m.group(2))
                    listening.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not listening.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("headrace did not start:\n" + "\n".join(self.lines[-40:]))
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the clean shutdown. Returns the exit code (killed if too slow)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def kill(self) -> None:
        """SIGKILL: an unclean stop."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
