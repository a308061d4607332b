"""Run real Kafka clients against Headrace and write the compatibility matrix.

    python -m compat                      # every client (installs what it needs first)
    python -m compat --client java39 --client kcat
    python -m compat --list               # clients and their scenarios
    python -m compat --no-readme          # leave docs/clients.md alone

Each client is installed the way its users install it, into caches (``compat/clients.py``).
Every client gets a fresh Headrace broker on a free port of 127.0.0.1 (the ``*-cluster`` rows a
fresh cluster of three brokers with ZooKeeper, ``compat/broker.py``); each scenario runs as its
own process with a timeout, so one hung client cannot stop the others (``compat/runner.py``). The results go to ``compat/results/matrix.json`` and ``matrix.md``
and to the section of ``docs/clients.md`` between ``<!-- compat-matrix:start -->`` and
``<!-- compat-matrix:end -->`` (``compat/matrix.py``).

A partial run (``--client``) replaces only the rows of the clients it ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "compat" / "results"

sys.path.insert(0, str(ROOT))
from compat.clients import CLIENTS, log  # noqa: E402
from compat.matrix import (CLIENT_ORDER, headrace_version, render_details,  # noqa: E402
                           render_markdown, update_readme)
from compat.runner import run_client  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compat", description=__doc__.split("\n")[0])
    ap.add_argument("--client", action="append", choices=list(CLIENTS),
                    help="run only this client (repeatable)")
    ap.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    ap.add_argument("--list", action="store_true", help="list clients and scenarios")
    ap.add_argument("--no-readme", action="store_true",
                    help="do not rewrite the matrix in docs/clients.md")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = ap.parse_args(argv)

    if args.list:
        for c in CLIENTS.values():
            print(f"{c.name:18} {c.title}: {' '.join(c.scenarios)}")
        return 0
    names = args.client or list(CLIENTS)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    json_path = args.out / "matrix.json"
    matrix = json.loads(json_path.read_text()) if json_path.exists() else {"clients": {}}
    t0 = time.monotonic()
    for name in names:
        entry = run_client(CLIENTS[name], args.scenario, logs)
        old = matrix["clients"].get(name)
        if args.scenario and old:  # keep the scenarios this run did not touch
            old["scenarios"].update(entry["scenarios"])
            entry["scenarios"] = {s: old["scenarios"][s] for s in CLIENTS[name].scenarios
                                  if s in old["scenarios"]}
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        entry["run"] = f"{stamp}, {headrace_version()}"
        matrix["clients"][name] = entry
        if not args.client and not args.scenario:  # the header names whole runs only
            matrix["generated"], matrix["headrace"] = stamp, headrace_version()
        # written after every client, so an interrupted run still leaves results
        json_path.write_text(json.dumps(matrix, indent=1) + "\n")
    matrix["clients"] = {n: matrix["clients"][n] for n in CLIENT_ORDER if n in matrix["clients"]}
    if not args.client and not args.scenario:
        matrix["minutes"] = round((time.monotonic() - t0) / 60, 1)
    json_path.write_text(json.dumps(matrix, indent=1) + "\n")
    (args.out / "matrix.md").write_text(render_details(matrix))
    section = render_markdown(matrix)
    print()
    print(section)
    if not args.no_readme and args.out == RESULTS:
        update_readme(section)
    elapsed = time.monotonic() - t0
    log(f"finished in {elapsed / 60:.1f} min; matrix in {json_path}")
    ran = [matrix["clients"][n] for n in names]
    failed = sum(r["status"] == "fail" for e in ran for r in e["scenarios"].values())
    log(f"{failed} failing scenario(s) in this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
