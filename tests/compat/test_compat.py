"""The compatibility suite (compat/run.py) as tests: one test per client and scenario.

The suite runs once per session for every client with a selected test (a few minutes;
clients are installed into caches on the first run), then each (client, scenario) checks its
result. Scenarios known to fail are xfail with the reason; n/a ones are skipped.
``HEADRACE_COMPAT=0`` skips the suite; ``HEADRACE_COMPAT_CLIENTS=java39,kcat`` limits it to
some clients, and so does ``-k``: ``pytest tests/compat -k cluster`` runs only the rows against
a cluster of three brokers (``java4-cluster``, ``kafka-tools-4.0-cluster``, ``spark-cluster``,
and the leader kill -9 rows ``java4-cluster-kill``, ``confluent-kafka-cluster-kill``,
``java44-cluster-kill``), ``-k security`` the rows against TLS and SASL listeners, ``-k share``
or ``-k streams`` the share-group and Kafka Streams scenarios. The whole suite took 23 min
before the security and leader-kill rows (about 4 min more); the budget is 40 min.

Of the Kafka 4.4 rows the Java client's (``java44``, ``java44-cluster``, ``java44-security``,
``java44-cluster-kill``: its share consumer and Kafka Streams included) run here; Kafka 4.4's
tools (``kafka-tools-4.4`` and its ``-cluster`` row) would add about 2.5 min more than the test
command can spare, so only their share-group scenarios run here (``in_tests`` in
compat/clients.py: ``kafka-share-groups``, ``kafka-console-share-consumer``) and
``python -m compat`` runs the rest; ``HEADRACE_COMPAT_CLIENTS=kafka-tools-4.4 pytest
tests/compat`` runs all of them as tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compat.run import CLIENTS  # noqa: E402

# (client, scenario) -> why it fails today: a broker gap to fix, or a client bug refused as Kafka refuses it
KNOWN_FAILING: dict[tuple[str, str], str] = {
    ("kcat-security", "security-sasl-ssl-scram-sha-512"): "librdkafka before 2.6.1 (Debian's kcat "
    "has 2.0.2) repeats its own nonce in the SCRAM client-final message; Headrace checks the "
    "nonce as RFC 5802 and Apache Kafka 4 do, so it fails as against Kafka 4 "
    "(docs/security.md, SASL)",
}

NAMED = [c for c in os.environ.get("HEADRACE_COMPAT_CLIENTS", "").split(",") if c]
# client -> the scenarios run: every one of a client named, else those it runs in tests
SELECTED = {c: CLIENTS[c].scenarios for c in NAMED} or {
    c: client.test_scenarios() for c, client in CLIENTS.items() if client.test_scenarios()}
CASES = [(c, s) for c, scenarios in SELECTED.items() for s in scenarios]

pytestmark = [
    pytest.mark.skipif(os.environ.get("HEADRACE_COMPAT") == "0", reason="HEADRACE_COMPAT=0"),
    pytest.mark.timeout(2500),
]


@pytest.fixture(scope="session")
def matrix(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("compat")
    cmd = [sys.executable, "-m", "compat", "--no-readme", "--out", str(out)]
    # only the clients whose tests were selected (-k, node ids) run
    here = Path(__file__)
    wanted = {item.callspec.params["client"] for item in request.session.items
              if item.path == here and hasattr(item, "callspec")}
    whole = [c for c in SELECTED if c in wanted and SELECTED[c] == CLIENTS[c].scenarios]
    some = [c for c in SELECTED if c in wanted and c not in whole]
    if whole:
        subprocess.run(cmd + [a for c in whole for a in ("--client", c)], cwd=ROOT, check=True,
                       timeout=2400)
    for c in some:  # a client of which the tests run only some scenarios (in_tests a tuple)
        subprocess.run(cmd + ["--client", c] + [a for s in SELECTED[c] for a in ("--scenario", s)],
                       cwd=ROOT, check=True, timeout=2400)
    return json.loads((out / "matrix.json").read_text())


@pytest.mark.parametrize("client,scenario", CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_scenario(matrix, client, scenario):
    entry = matrix["clients"][client]
    if entry.get("unavailable"):
        pytest.skip(f"{client} unavailable here: {entry['unavailable']}")
    result = entry["scenarios"][scenario]
    if result["status"] == "n/a":
        pytest.skip(result["reason"])
    known = KNOWN_FAILING.get((client, scenario))
    if known and result["status"] == "fail":
        pytest.xfail(f"{known} (this run: {result['reason']})")
    assert result["status"] == "pass", result["reason"]
