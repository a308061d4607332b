"""A Headrace broker in a child process, for tests and tools that need a real Kafka endpoint.

    from headrace.broker.tools.process import BrokerProcess

    with BrokerProcess("/tmp/data", {"num.partitions": "3"}) as broker:
        produce_and_consume(broker.bootstrap)  # "127.0.0.1:<free port>"

``start`` runs ``python -m headrace serve`` on 127.0.0.1 (a free port unless one is given)
and returns once the broker listens; ``stop`` is the clean path (SIGTERM: in-flight requests
answered, logs flushed, clean-shutdown marker written), ``kill`` the unclean one (SIGKILL).
A restart keeps the port and the data directory. The broker's log lines are kept in
``lines`` (the most recent ``KEEP_LINES``), and also appended to ``log_file`` if one is given.
``host`` is the address to listen on and to give as ``bootstrap`` (default 127.0.0.1; with a
``listeners`` override, the host clients should use); ``argv_prefix`` goes before the Python
interpreter on the command line, e.g. ``["ip", "netns", "exec", "b1"]`` (a prefix that execs
keeps ``pid`` the broker's own).

How readiness works: the broker is started with ``--ready-file PATH`` and writes
``host:port`` there (atomically) once it has recovered its data and listens; ``start`` watches
for that file with short sleeps, so it does not depend on the log level and adds at most a
couple of milliseconds to the start-up time.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

KEEP_LINES = 2000
POLL_S = 0.002  # how often ``start`` looks for the ready file


def pinned(cpus: set[int] | None, nofile: int | None = None):
    """A ``preexec_fn`` for ``subprocess.Popen`` that pins the child (and so every thread it
    starts) to ``cpus`` and sets its RLIMIT_NOFILE to ``nofile`` (the hard limit too where
    allowed, else the soft one up to the hard limit); None when both are None."""
    if cpus is None and nofile is None:
        return None

    def preexec() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if nofile is not None:
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            except (ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))

    return preexec


def terminate(proc: subprocess.Popen, timeout: float, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` and wait up to ``timeout`` seconds, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | Path,
        overrides: dict[str, object] | None = None,
        args: Sequence[str] = (),
        port: int = 0,
        *,
        log_file: Path | None = None,
        cpus: set[int] | None = None,
        pythonpath: Path | None = None,
        rlimit_nofile: int | None = None,
        host: str = "127.0.0.1",
        argv_prefix: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.argv_prefix = list(argv_prefix)
        self.overrides = dict(overrides or {})
        self.args = list(args)  # more command-line arguments, e.g. ["--config", path]
        self.port = port
        self.log_file = log_file  # the log lines go here too
        self.cpus = cpus  # CPU affinity of the broker process
        self.pythonpath = pythonpath  # put first on PYTHONPATH (e.g. a snapshot of a commit)
        self.rlimit_nofile = rlimit_nofile  # RLIMIT_NOFILE of the broker (None: inherited)
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.seen = 0  # lines read since the first start (``lines`` keeps the last ones)
        self.spawned_at: float | None = None  # time.monotonic() just before the spawn
        self.ports: list[int] = []  # every worker's port (--workers N), the first is ``port``
        self.listener_ports: dict[str, int] = {}  # listener name -> port, once started

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def bootstrap_servers(self) -> str:
        """The same as ``bootstrap`` (the name ``headrace.Broker`` and clients use)."""
        return self.bootstrap

    def create_topic(self, name: str, partitions: int = 1, **configs: object) -> None:
        """Create a topic (CreateTopics over the wire); topic settings as keywords with
        ``_`` for ``.`` (``cleanup_policy="compact"``). Raises ``AdminError`` if refused."""
        from headrace.broker.client.admin_request import create_topic

        create_topic(
            self.bootstrap, name, partitions, {k.replace("_", "."): v for k, v in configs.items()}
        )

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def command(self, ready_file: Path) -> list[str]:
        cmd = [*self.argv_prefix, sys.executable, "-m", "headrace", "serve"]
        if "listeners" not in self.overrides:  # else the listeners say where
            cmd += ["--host", self.host, "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--ready-file", str(ready_file)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd + self.args

    def start(self, timeout: float = 30) -> BrokerProcess:
        env = None
        if self.pythonpath:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(self.pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
            )
        log = open(self.log_file, "a") if self.log_file else None
        with tempfile.TemporaryDirectory(prefix="headrace-start-") as tmp:
            ready = Path(tmp) / "ready"
            self.spawned_at = time.monotonic()
            proc = self.proc = subprocess.Popen(
                self.command(ready),
                stdin=subprocess.DEVNULL,
                stdout=log or subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                preexec_fn=pinned(self.cpus, self.rlimit_nofile),
            )
            self._reader = threading.Thread(target=self._pump, args=(proc, log), daemon=True)
            self._reader.start()
            deadline = time.monotonic() + timeout
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(self._failure())
                time.sleep(POLL_S)
            # one line per broker (several with --workers): the first is this one's; a line is
            # host:port of its first listener, then NAME://host:port of each listener
            lines = [line.split() for line in ready.read_text().splitlines() if line.strip()]
            self.ports = [int(items[0].rsplit(":", 1)[1]) for items in lines]
            self.port = self.ports[0]
            self.listener_ports = {
                item.split("://", 1)[0]: int(item.rsplit(":", 1)[1]) for item in lines[0][1:]
            }
        return self

    def _pump(self, proc: subprocess.Popen, log) -> None:
        assert proc.stderr is not None  # started with stderr=PIPE
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if len(self.lines) > KEEP_LINES:
                del self.lines[: len(self.lines) - KEEP_LINES]
            self.seen += 1
            if log:
                log.write(line)
                log.flush()
        if log:
            log.close()

    def _failure(self) -> str:
        self._reader.join(2)  # the last lines, up to the exit
        where = f"; see {self.log_file}" if self.log_file else ""
        return f"headrace did not start{where}:\n" + "\n".join(self.lines[-40:])

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the clean shutdown. Returns the exit code (killed if too slow)."""
        if self.proc is None:
            return 0
        code, self.proc = terminate(self.proc, timeout), None
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
