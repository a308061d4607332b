"""Running a client's scenarios: a fresh Headrace per client (one broker; a cluster of three
with ZooKeeper; three separate broker processes, one of which a scenario may have killed; or a
broker with TLS and SASL listeners: the client's ``broker``, see ``compat/broker.py``), each
scenario its own process with a timeout (so one hung client cannot stop the others), its ``RESULT`` line read back into an
``Outcome``; the brokers' complaints are added to a failure's reason."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compat.broker import (ClusterProcess, KillableCluster, SecureBroker, complaints_since,
                           tail)
from compat.clients import ROOT, VERSIONS, Client, Unavailable, log
from headrace.broker.tools.process import BrokerProcess


@dataclass
class Outcome:
    status: str            # "pass", "fail", "n/a"
    reason: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "seconds": round(self.seconds, 1)}


RESULT_RE = re.compile(r"^RESULT (pass|fail|n/a)\s?(.*)$")


HOOK_RE = re.compile(r"^HOOK (.+)$")


def run_scenario(cmd: list[str], bootstrap: str, scenario: str, prefix: str, timeout: float,
                 env: dict | None, log_file: Path,
                 hook: Callable[[list[str]], str] | None = None) -> Outcome:
    """Run one scenario program. With ``hook``, a line ``HOOK WORDS...`` the program prints
    is handed to ``hook`` (e.g. the cluster's kill of a leader) and its answer is written to
    the program's stdin as one line; without, stdin is empty."""
    t0 = time.monotonic()
    with open(log_file, "w") as out:
        proc = subprocess.Popen([*cmd, bootstrap, scenario, prefix], stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if hook else subprocess.DEVNULL,
                                env=env, cwd=ROOT, start_new_session=True)
        deadline = t0 + timeout
        handled = 0
        code = None
        while code is None and time.monotonic() < deadline:
            try:
                code = proc.wait(0.1 if hook else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if hook and proc.stdin is not None:
                asked = [m.group(1).split() for m in map(HOOK_RE.match, log_file.read_text(
                    errors="replace").splitlines()) if m]
                for words in asked[handled:]:
                    handled += 1
                    try:
                        answer = hook(words)
                    except Exception as exc:  # the program is told, and fails with it
                        answer = f"error {type(exc).__name__}: {exc}"
                    out.write(f"[compat] hook {' '.join(words)}: {answer}\n")
                    out.flush()
                    try:
                        proc.stdin.write(f"{answer}\n".encode())
                        proc.stdin.flush()
                    except (BrokenPipeError, OSError):
                        pass
        timed_out = code is None
        if timed_out:
            os.killpg(proc.pid, 9)
            code = proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
    seconds = time.monotonic() - t0
    text = log_file.read_text(errors="replace")
    for line in reversed(text.splitlines()):
        m = RESULT_RE.match(line.strip())
        if m:
            return Outcome(m.group(1), m.group(2).strip(), seconds)
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-3:]
    if timed_out:
        return Outcome("fail", f"timed out after {timeout:.0f}s; last output: "
                       + " | ".join(tail)[-400:], seconds)
    return Outcome("fail", f"exited with {code} without a result: " + " | ".join(tail)[-400:],
                   seconds)


def run_client(client: Client, only: list[str] | None, logs: Path) -> dict:
    log(f"== {client.name}: {client.title}")
    t0 = time.monotonic()
    entry: dict = {"title": client.title, "table": client.table, "scenarios": {}}
    try:
        cmd = client.setup()
    except Unavailable as exc:
        log(f"{client.name} unavailable: {exc}")
        entry.update(unavailable=str(exc)[:600], version=client.version)
        entry["scenarios"] = {s: Outcome("n/a", f"client unavailable: {exc}"[:300]).as_json()
                              for s in client.scenarios}
        return entry
    entry["version"] = client.version or VERSIONS.get(client.name, lambda: "")()
    env = client.env() if client.env else None
    data_dir = Path(tempfile.mkdtemp(prefix=f"headrace-compat-{client.name}-"))

    def fresh() -> BrokerProcess | ClusterProcess | KillableCluster | SecureBroker:
        if client.broker == "cluster":
            return ClusterProcess(data_dir)
        if client.broker == "killable-cluster":
            return KillableCluster(data_dir)
        if client.broker == "secure":
            return SecureBroker(data_dir)
        return BrokerProcess(data_dir, client.settings)

    broker = fresh()
    started = False
    stamp = dt.datetime.now().strftime("%H%M%S")
    try:
        for scenario in client.scenarios:
            if only and scenario not in only:
                continue
            if started and not broker.alive:
                log(f"  broker died; restarting it. Last output: {tail(broker, 5)}")
                broker.stop()
                (logs / f"{client.name}__broker-died.log").write_text("\n".join(broker.lines))
                broker = fresh()
                started = False
            if not started:
                try:
                    broker.start()
                except (RuntimeError, TimeoutError, OSError, ImportError) as exc:
                    reason = f"Headrace did not start: {' '.join(str(exc).split())}"[:600]
                    log(reason)
                    for s in client.scenarios:
                        if s not in entry["scenarios"] and (not only or s in only):
                            entry["scenarios"][s] = Outcome("fail", reason).as_json()
                    break
                started = True
            prefix = f"c{stamp}-{client.name}-{scenario}".replace(".", "")
            print(f"[compat]   {client.name} {scenario} ... ", end="", flush=True)
            mark = broker.seen
            extra = getattr(broker, "env", {})
            outcome = run_scenario(cmd, broker.bootstrap, scenario, prefix, client.timeout,
                                   {**(env or os.environ), **extra} if extra else env,
                                   logs / f"{client.name}__{scenario}.log",
                                   getattr(broker, "hook", None))
            complaints = complaints_since(broker, mark)
            if outcome.status == "fail" and complaints:
                outcome.reason += " [broker log: " + " / ".join(complaints) + "]"
            if not broker.alive:
                outcome = Outcome("fail", f"broker process died: {tail(broker, 3)}; "
                                  + outcome.reason, outcome.seconds)
            mark = "FAIL: " + outcome.reason if outcome.status == "fail" else outcome.status
            print(f"{mark[:300]} ({outcome.seconds:.1f}s)", flush=True)
            entry["scenarios"][scenario] = outcome.as_json()
    finally:
        broker.stop()
        (logs / f"{client.name}__broker.log").write_text("\n".join(broker.lines) + "\n")
        zk_log = data_dir / "zookeeper" / "zookeeper.log"
        if zk_log.exists():
            shutil.copyfile(zk_log, logs / f"{client.name}__zookeeper.log")
        shutil.rmtree(data_dir, ignore_errors=True)
    entry["seconds"] = round(time.monotonic() - t0, 1)
    return entry
