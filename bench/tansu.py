"""Tansu, a Kafka-compatible broker in Rust, installed from crates.io on first use: the peer
the benchmark runs beside Apache Kafka and Headrace (``python -m bench.run --brokers
kafka,headrace,tansu``).

    python -m bench.tansu install     # build and cache it now (many minutes), print the binary
    python -m bench.tansu where       # the cached binary, or exit 1

How this works
--------------
``binary()`` returns the ``tansu`` executable of ``TANSU_VERSION``, installing it the first
time with ``cargo install tansu --version 0.6.0 --locked --features libsql --root
<CACHE_DIR>/tansu-0.6.0-libsql`` (``CACHE_DIR``: ``~/.cache/headrace``, where the Kafka class
paths are cached; ``$HEADRACE_CACHE`` overrides it). ``--locked`` builds the dependency
versions the crate was published with; cargo's ``Compiling`` lines are counted into a
progress line every 30 seconds on stderr, and a lock file keeps two harnesses from building
at once. Later runs find the binary and reuse it. It needs ``cargo`` (rustup's
``~/.cargo/bin`` is looked in when it is not on PATH) and a C compiler (libSQL's SQLite).

Storage: Tansu 0.6 has no log on local disk of its own; its engines are memory and S3
(``dynostore``), PostgreSQL, SQLite (``libsql``), Turso (alpha) and SlateDB (memory or S3),
each a cargo feature, and the crate's default features build none of them (only ``null://``,
which discards what it is sent). A single broker on local disk is SQLite: ``--features
libsql`` and ``--storage-engine sqlite://tansu.db``, a database file in the broker's data
directory (the working directory of the process). Tansu opens it in WAL mode with
``synchronous = NORMAL``: each produce is a transaction written to the WAL through the page
cache, fsynced only at checkpoints, so an acknowledged record survives the process but not
the machine, as with Kafka's and Headrace's defaults. There is no setting that flushes every
produce, so Tansu has no counterpart of the durable scenario (S2); ``STORAGE`` says all of
this in the results.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from headrace.broker.tools.maven import CACHE_DIR

TANSU_VERSION = "0.6.0"
FEATURES = ("libsql",)  # the storage engine: SQLite, on local disk
STORAGE_URL = "sqlite://tansu.db"  # relative to the broker's working directory
STORAGE = (f"SQLite (libSQL, cargo feature libsql): {STORAGE_URL} in the broker's data "
           "directory, WAL journal with synchronous=NORMAL (each produce written to the WAL "
           "through the page cache, fsynced at checkpoints only; no per-produce flush setting)")


def root(version: str = TANSU_VERSION) -> Path:
    """Where ``cargo install --root`` puts this version and feature set."""
    return CACHE_DIR / f"tansu-{version}-{'-'.join(FEATURES)}"


def installed(version: str = TANSU_VERSION) -> Path | None:
    """The cached ``tansu`` binary, or None when it is not installed yet."""
    exe = root(version) / "bin" / "tansu"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


def cargo() -> str:
    """The ``cargo`` executable: on PATH, else rustup's ``~/.cargo/bin``."""
    found = shutil.which("cargo") or shutil.which("cargo", path=str(Path.home() / ".cargo" / "bin"))
    if found is None:
        raise RuntimeError("Tansu is installed from crates.io with `cargo`, which is not on PATH "
                           "(nor in ~/.cargo/bin): install Rust, e.g. from https://rustup.rs")
    return found


def binary(version: str = TANSU_VERSION, progress=None) -> Path:
    """The ``tansu`` binary of ``version``, built with cargo the first time (see the module's
    docstring); ``progress`` (default: stderr) sees the build's progress lines."""
    exe = installed(version)
    if exe is not None:
        return exe
    say = progress or _log
    dest = root(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f"tansu-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another harness may be building it: wait for it
        exe = installed(version)
        if exe is None:
            _install(version, dest, say)
            exe = installed(version)
            if exe is None:
                raise RuntimeError(f"cargo install finished but {dest}/bin/tansu is not there")
    return exe


def _install(version: str, dest: Path, say) -> None:
    cmd = [cargo(), "install", "tansu", "--version", version, "--locked",
           "--features", ",".join(FEATURES), "--root", str(dest)]
    say(f"installing Tansu {version} from crates.io: {' '.join(cmd[1:])} (compiles hundreds of "
        "crates: many minutes the first time, cached afterwards)")
    start = time.monotonic()
    compiled, tail = 0, []
    done = threading.Event()

    def ticker() -> None:  # a line every 30 s, also while one large crate compiles
        while not done.wait(30):
            say(f"cargo install tansu: {compiled} crates compiled, "
                f"{time.monotonic() - start:.0f}s ({tail[-1].strip() if tail else 'starting'})")

    env = {**os.environ, "CARGO_TERM_COLOR": "never", "CARGO_TERM_PROGRESS_WHEN": "never"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    threading.Thread(target=ticker, daemon=True).start()
    try:
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            if re.match(r"\s*Compiling ", line):
                compiled += 1
        rc = proc.wait()
    except BaseException:  # interrupted: do not leave cargo building
        proc.kill()
        proc.wait()
        raise
    finally:
        done.set()
    if rc != 0:
        raise RuntimeError(f"cargo install tansu {version} failed ({rc}):\n" + "\n".join(tail))
    say(f"Tansu {version} installed in {time.monotonic() - start:.0f}s ({compiled} crates "
        f"compiled): {dest / 'bin' / 'tansu'}")


def version_of(exe: Path) -> str:
    """``tansu --version`` of ``exe``, e.g. "tansu 0.6.0"."""
    res = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30)
    return (res.stdout or res.stderr).strip()


def command(exe: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """The broker's command line: listening on and advertising ``host:port``, SQLite storage
    (run it in its data directory, where the database file goes)."""
    url = f"tcp://{host}:{port}"
    return [str(exe), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", STORAGE_URL]


def _log(msg: str) -> None:
    print(f"[tansu] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("install", "where"))
    a = ap.parse_args(argv)
    exe = binary() if a.action == "install" else installed()
    if exe is None:
        print(f"not installed (would be {root() / 'bin' / 'tansu'})", file=sys.stderr)
        return 1
    print(exe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
