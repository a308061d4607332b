"""The compatibility suite is honest about scenario names: a name a client's program does
not know fails (``RESULT fail unknown scenario ...``) instead of passing as n/a, and every
scenario the suite lists for a client is one its program knows. Runs without the clients
(``HEADRACE_COMPAT=0`` too): the Python programs are run, the others' sources are read."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from compat import kit  # noqa: E402
from compat.clients import CLIENTS  # noqa: E402
from compat.runner import run_scenario  # noqa: E402

# client -> its Python program (what setup() would return, without installing anything)
PYTHON_PROGRAMS = {
    "kafka-python": ["compat/kafka-python/scenarios.py"],
    "aiokafka": ["compat/aiokafka/scenarios.py"],
    "confluent-kafka": ["compat/confluent-kafka/scenarios.py"],
    "kcat": ["compat/kcat/scenarios.py"],
    "kafka-tools-3.9": ["compat/kafka-tools/scenarios.py", "--version", "3.9.2"],
    "kafka-tools-4.0": ["compat/kafka-tools/scenarios.py", "--version", "4.0.2"],
    "kafka-tools-4.0-cluster": ["compat/kafka-tools/scenarios.py", "--version", "4.0.2"],
    "kafka-tools-4.4": ["compat/kafka-tools/scenarios.py", "--version", "4.4.0"],
    "kafka-tools-4.4-cluster": ["compat/kafka-tools/scenarios.py", "--version", "4.4.0"],
    "spark": ["compat/spark/scenarios.py"],
    "spark-cluster": ["compat/spark/scenarios.py"],
    "spark-security": ["compat/spark/scenarios.py"],
    "confluent-kafka-security": ["compat/confluent-kafka/scenarios.py"],
    "confluent-kafka-cluster-kill": ["compat/confluent-kafka/scenarios.py"],
    "kcat-security": ["compat/kcat/scenarios.py"],
}


def test_kit_fails_an_unknown_scenario(capsys):
    code = kit.main({"known": lambda bootstrap, prefix: None}, ["127.0.0.1:1", "knwon", "p"])
    assert code == 1
    assert capsys.readouterr().out.strip() == "RESULT fail unknown scenario knwon (known: known)"
    assert kit.main({"known": lambda bootstrap, prefix: None}, ["127.0.0.1:1", "known", "p"]) == 0


def test_the_runner_reports_a_misspelled_scenario_as_a_failure(tmp_path):
    cmd = [sys.executable, str(ROOT / "compat/kafka-python/scenarios.py")]
    outcome = run_scenario(cmd, "127.0.0.1:1", "produce-gzpi", "p", 60, None, tmp_path / "log")
    assert outcome.status == "fail"
    assert outcome.reason.startswith("unknown scenario produce-gzpi")


@pytest.mark.parametrize("client", sorted(PYTHON_PROGRAMS))
def test_every_listed_scenario_is_known_to_its_program(client):
    program = PYTHON_PROGRAMS[client]
    done = subprocess.run(
        [sys.executable, str(ROOT / program[0]), *program[1:], "--list"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    known = set(done.stdout.split())
    assert set(CLIENTS[client].scenarios) <= known


def test_every_python_client_is_checked():
    programs = {c for c, client in CLIENTS.items() if not c.startswith(("java", "kafkajs", "franz"))}
    assert programs == set(PYTHON_PROGRAMS)


@pytest.mark.parametrize(
    "source,unknown",
    [
        ("compat/java/src/main/java/dev/headrace/compat/Suite.java", 'new Failed("unknown scenario " + scenario)'),
        ("compat/franz-go/main.go", '"RESULT fail unknown scenario " + os.Args[2]'),
        ("compat/kafkajs/scenarios.js", "RESULT fail unknown scenario ${scenarioName}"),
    ],
)
def test_the_other_programs_fail_an_unknown_scenario(source, unknown):
    text = (ROOT / source).read_text()
    assert unknown in text
    assert "not a scenario of this client" not in text


@pytest.mark.parametrize(
    "client,source",
    [
        ("java39", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("java44", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("java4-cluster", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("java4-cluster-kill", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("java44-cluster-kill", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("java4-security", "compat/java/src/main/java/dev/headrace/compat/Suite.java"),
        ("franz-go", "compat/franz-go/main.go"),
        ("kafkajs", "compat/kafkajs/scenarios.js"),
    ],
)
def test_the_other_programs_know_their_listed_scenarios(client, source):
    """Each listed name appears as a quoted scenario name in the program (produce-<codec>
    names are built from the codec list in Go and Java)."""
    text = (ROOT / source).read_text()
    for scenario in CLIENTS[client].scenarios:
        names = {f'"{scenario}"', f"'{scenario}'", f"{scenario}:", f"{scenario},"}
        if scenario.startswith("produce-"):
            names |= {f'"{scenario.removeprefix("produce-")}"', f"'{scenario.removeprefix('produce-')}'"}
        assert any(n in text for n in names), f"{client}: {scenario} not in {source}"


def test_the_kafka44_scenarios_are_known_to_the_class_that_runs_them():
    """Suite.java hands some scenarios to dev.headrace.compat.Kafka44 (src/kafka44, built for
    kafka-clients 4.4 only; the older builds answer them n/a): each is one Kafka44.java knows
    and one a Java row lists."""
    java = ROOT / "compat/java/src"
    suite = (java / "main/java/dev/headrace/compat/Suite.java").read_text()
    kafka44 = (java / "kafka44/java/dev/headrace/compat/Kafka44.java").read_text()
    case = re.search(r'case ((?:"[\w-]+",\s*)*"[\w-]+") -> kafka44\(scenario\)', suite)
    assert case is not None
    handed = set(re.findall(r'"([\w-]+)"', case.group(1)))
    assert handed == {"share-group", "cluster-share-leader-kill-9", "streams-at-least-once",
                      "streams-exactly-once-v2", "streams-classic-protocol"}
    for scenario in handed:
        assert f'case "{scenario}" ->' in kafka44, scenario
    listed = {s for c, client in CLIENTS.items() if c.startswith("java")
              for s in client.scenarios}
    assert handed <= listed


def test_the_runner_answers_a_hook_line_on_the_programs_stdin(tmp_path):
    """A scenario that prints ``HOOK WORDS`` gets the hook's answer as its next stdin line (how
    the leader-kill scenarios have the harness kill a broker while they produce)."""
    program = tmp_path / "hooked.py"
    program.write_text(
        "import sys\n"
        "print('HOOK kill-leader t 0', flush=True)\n"
        "answer = sys.stdin.readline().strip()\n"
        "print('RESULT pass' if answer == 'killed 2' else f'RESULT fail answered {answer!r}')\n"
    )
    asked = []

    def hook(words):
        asked.append(words)
        return "killed 2"

    cmd = [sys.executable, str(program)]
    outcome = run_scenario(cmd, "127.0.0.1:1", "s", "p", 60, None, tmp_path / "log", hook)
    assert (outcome.status, asked) == ("pass", [["kill-leader", "t", "0"]]), outcome.reason
    # without a hook, stdin is empty: the program reads nothing and says so
    outcome = run_scenario(cmd, "127.0.0.1:1", "s", "p", 60, None, tmp_path / "log2")
    assert outcome.status == "fail" and outcome.reason == "answered ''"
