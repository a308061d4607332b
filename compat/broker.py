"""A Headrace broker process for the compatibility suite (``python -m headrace serve``)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = re.compile(r"headrace listening on ([\d.]+):(\d+)")


class HeadraceBroker:
    """``python -m headrace serve`` on a free port of 127.0.0.1 with its own data directory."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.lines: list[str] = []
        self.seen = 0  # lines ever read (``lines`` keeps only the last ones)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> "HeadraceBroker":
        cmd = [sys.executable, "-m", "headrace", "serve", "--host", "127.0.0.1",
               "--port", "0", "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        found = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.lines = (self.lines + [line.rstrip()])[-400:]
                self.seen += 1
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.port = int(m.group(2))
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("Headrace did not start:\n" + "\n".join(self.lines))
        return self

    def complaints_since(self, mark: int, limit: int = 3) -> list[str]:
        """What the broker logged about failed or refused requests since ``seen`` was
        ``mark``: "closing ..." lines and the last line of each traceback, deduplicated."""
        new = self.lines[-(self.seen - mark):] if self.seen > mark else []
        out: list[str] = []
        for i, line in enumerate(new):
            text = None
            if " closing " in line or " WARNING " in line or " ERROR " in line:
                text = line.split(" ", 3)[-1] if line[:2].isdigit() else line
            elif line and not line.startswith((" ", "Traceback")) and \
                    i > 0 and new[i - 1].startswith(" ") and ("Error" in line or "Exception" in line):
                where = next((ln.strip() for ln in reversed(new[:i]) if ln.strip().startswith("File ")), "")
                text = f"{line} ({where})" if where else line
            if text:
                text = text.replace("request failed", "request failed:")
                if text not in out:
                    out.append(text)
        return out[-limit:]

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def tail(self, n: int = 5) -> str:
        return " | ".join(self.lines[-n:])

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "HeadraceBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
