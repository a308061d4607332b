"""``headrace serve --workers N``: N brokers of one cluster on this machine, one per core.

One Python process uses one core, so a machine's cores are used by running a broker per core:
each worker is a ``headrace serve`` child process with its own node id (``node.id`` + i), port
(the port + i; 0 stays 0: each gets its own free one; the metrics and schema registry ports
likewise) and data directory (``log.dirs``/
``node-<id>``), all registered in the same ZooKeeper. Clients see a cluster of N brokers and
send each request to the broker that leads its partition, so there is no forwarding hop.

The parent forwards SIGINT and SIGTERM to every worker and waits for their clean stops; when a
worker exits on its own the others are stopped too, and the exit code is the first non-zero
one. With ``--ready-file`` the parent writes ``host:port`` of every worker, one per line, once
all are ready.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.listeners import listeners, listeners_text
from headrace.storage import replace_file


def _orphan_stops() -> None:
    """(In the child, before exec.) SIGTERM this process when its parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run(config: BrokerConfig, argv: list[str], workers: int, ready_file: str | None) -> int:
    """Start ``workers`` brokers; ``argv`` is the ``serve`` command line without --workers,
    --ready-file and the listener and data directory, which each worker gets its own of."""
    found = listeners(config)
    first = int(config["broker.id"]) if int(config["broker.id"]) >= 0 else int(config["node.id"])
    data = Path(str(config["log.dirs"]))
    stopping = False

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    children: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="headrace-workers-") as tmp:
        readies = []
        for i in range(workers):
            ready = Path(tmp) / f"ready-{i}"
            readies.append(ready)
            node = first + i
            cmd = [sys.executable, "-m", "headrace", "serve", *argv]
            cmd += ["--override", f"node.id={node}", "--override", "broker.id=-1"]
            cmd += ["--override", f"listeners={listeners_text(found, i)}"]
            if config["advertised.listeners"]:
                advertised = listeners_text(found, i, advertised=True)
                cmd += ["--override", f"advertised.listeners={advertised}"]
            cmd += ["--override", f"log.dirs={data / f'node-{node}'}", "--workers", "1"]
            if int(config["metrics.port"]) > 0:  # each worker its own: the port + i
                cmd += ["--override", f"metrics.port={int(config['metrics.port']) + i}"]
            registry = _registry_listener(str(config["schema.registry.listeners"]), i)
            if registry:  # the schema registry's too
                cmd += ["--override", f"schema.registry.listeners={registry}"]
            cmd += ["--ready-file", str(ready)]
            # the workers ignore the terminal's Ctrl-C (the parent stops them) and get a SIGTERM
            # if the parent dies without stopping them
            children.append(subprocess.Popen(cmd, start_new_session=True, preexec_fn=_orphan_stops))
        while not stopping and not all(r.exists() for r in readies):
            if any(c.poll() is not None for c in children):
                break
            time.sleep(0.05)
        if ready_file and all(r.exists() for r in readies):
            lines = "".join(r.read_text() for r in readies)
            replace_file(ready_file, lines.encode(), durable=False)
        while not stopping and all(c.poll() is None for c in children):
            time.sleep(0.1)
    for c in children:
        if c.poll() is None:
            c.send_signal(signal.SIGTERM)
    codes = [c.wait() for c in children]
    if ready_file:
        Path(ready_file).unlink(missing_ok=True)
    return next((c for c in codes if c), 0)


def _registry_listener(text: str, i: int) -> str:
    """Worker ``i``'s ``schema.registry.listeners``: the port + i (0 stays 0); "" when off."""
    from urllib.parse import urlsplit

    text = text.strip()
    if not text:
        return ""
    url = urlsplit(text)
    try:
        port = url.port
    except ValueError:
        return text  # (the worker refuses it at start, naming the setting)
    if not port:
        return text
    return f"{url.scheme}://{url.hostname}:{port + i}"
