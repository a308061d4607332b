"""Java class paths from Maven Central, resolved once with Maven and cached.

``mvn dependency:build-classpath`` runs on a small pom (a project directory, or a pom text
written into the cache) and the resulting class path is kept in ``CACHE_DIR`` (``~/.cache/
headrace``, ``$HEADRACE_CACHE`` overrides it); a cached class path is reused while every jar it
names still exists (Maven keeps the jars themselves in ``~/.m2``). Used for ZooKeeper
(``zookeeper_server.py``) and for Apache Kafka in the benchmarks (``bench/apache_kafka.py``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

CACHE_DIR = Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))


class JavaToolMissing(RuntimeError):
    """``java`` or ``mvn`` is not on PATH."""


def require_tools(*tools: str, purpose: str) -> None:
    """Raise ``JavaToolMissing`` naming what to install when one of ``tools`` is not on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        hints = {"java": "a Java runtime, 11 or newer", "mvn": "Apache Maven"}
        names = " and ".join(f"`{t}` ({hints.get(t, t)})" for t in missing)
        raise JavaToolMissing(
            f"{purpose} needs {names} on PATH; install them, e.g. "
            "`apt-get install openjdk-17-jre-headless maven` or `brew install openjdk maven`"
        )


def cached_classpath(cp_file: Path) -> str | None:
    """The class path stored in ``cp_file`` if every jar it names still exists, else None."""
    if not cp_file.exists():
        return None
    cp = cp_file.read_text().strip()
    if cp and all(os.path.exists(p) for p in cp.split(os.pathsep)):
        return cp
    return None


def pom_classpath(name: str, pom: str, refresh: bool = False) -> str:
    """The class path of the dependencies declared in ``pom`` (the text of a pom.xml).

    The pom is written to ``CACHE_DIR/<name>-<hash>/pom.xml`` and the class path cached next to
    it as ``CACHE_DIR/<name>-<hash>.classpath``: a changed pom resolves again.
    """
    digest = hashlib.sha256(pom.encode()).hexdigest()[:12]
    cp_file = CACHE_DIR / f"{name}-{digest}.classpath"
    cp = None if refresh else cached_classpath(cp_file)
    if cp is not None:
        return cp
    require_tools("mvn", purpose=f"resolving {name} from Maven Central")
    project = CACHE_DIR / f"{name}-{digest}"
    project.mkdir(parents=True, exist_ok=True)
    (project / "pom.xml").write_text(pom)
    build_classpath(project, cp_file)
    return cp_file.read_text().strip()


def build_classpath(project_dir: Path, out_file: Path, extra: Sequence[str] = ()) -> None:
    """``mvn dependency:build-classpath`` in ``project_dir`` into ``out_file``, with a progress
    line every few seconds on stderr."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_suffix(".tmp")
    cmd = ["mvn", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={tmp}", *extra]
    _log(f"resolving with Maven in {project_dir} (first run downloads from Maven Central)")
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=project_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    downloaded = 0
    tail: list[str] = []
    last = start
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-40:]
        if "Downloaded from" in line:
            downloaded += 1
        now = time.monotonic()
        if now - last >= 2.0:
            _log(f"{downloaded} files downloaded, {now - start:.0f}s")
            last = now
    rc = proc.wait()
    if rc != 0 or not tmp.exists():
        raise RuntimeError("Maven resolution failed:\n" + "\n".join(tail))
    tmp.replace(out_file)
    _log(
        f"resolved in {time.monotonic() - start:.1f}s ({downloaded} files downloaded); "
        f"class path cached in {out_file}"
    )


def _log(msg: str) -> None:
    print(f"[maven] {msg}", file=sys.stderr, flush=True)
