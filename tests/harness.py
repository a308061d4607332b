"""A real Headrace broker process on 127.0.0.1, for integration tests."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = re.compile(r"headrace listening on ([\d.]+):(\d+)")


class BrokerProcess:
    """``python -m headrace serve`` on a free port, with its own data directory."""

    def __init__(
        self, data_dir: Path, overrides: dict[str, str] | None = None, args: list[str] = ()
    ) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.args = list(args)  # more command-line arguments, e.g. ["--config", path]
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [sys.executable, "-m", "headrace", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        cmd += self.args
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        found = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log.append(line)
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.port = int(m.group(2))
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "".join(self.log))
        return self

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self.proc = None
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
