"""The schema registry with a Java client: Confluent's own registry client (io.confluent
kafka-schema-registry-client 7.5.3 and Avro 1.11.3, as Flink ships them relocated on Maven
Central) and the Java producer and consumer, run by compat/java-registry's AvroRoundTrip:
register, produce in Confluent's wire format, evolve, be refused an incompatible change, and
read every record back with the newest schema. Then the text Confluent's client keeps for a
schema is the one Headrace keeps for any form of it.

The Maven project is built when its sources are newer than its build (the first run resolves
kafka-clients and the Flink jar from Maven Central); a run takes a few seconds after that.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from headrace.broker.tools.process import BrokerProcess

PROJECT = Path(__file__).resolve().parents[2] / "compat" / "java-registry"
MAIN = "dev.headrace.compat.registry.AvroRoundTrip"

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None, reason="no java/mvn"
)


def classpath() -> str:
    """The program's class path, building it first when it is missing or older than its
    sources."""
    target = PROJECT / "target"
    stamp = target / "classpath.txt"
    sources = [PROJECT / "pom.xml", *PROJECT.rglob("*.java")]
    if not stamp.exists() or max(p.stat().st_mtime for p in sources) > stamp.stat().st_mtime:
        done = subprocess.run(
            ["mvn", "-q", "-B", "-Dstyle.color=never", "package"],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        stamp.touch()  # (Maven leaves an unchanged class path file as it was)
    return f"{target / 'classes'}:{stamp.read_text().strip()}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("registry-java"),
        {"schema.registry.listeners": "http://127.0.0.1:0", "num.partitions": 1},
    ).start()
    yield b
    b.kill()


def test_java_client_registers_produces_evolves_and_reads_back(broker):
    url = f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"
    done = subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(),
         MAIN, broker.bootstrap, url, "java-orders"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    print(done.stdout, done.stderr[-3000:])
    assert done.returncode == 0
    steps = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert [s.split(" as id")[0] for s in steps] == [
        "ok registered v1",
        "ok produced 3 records with v1",
        "ok registered v2",
        "ok produced 2 records with v2",
        "ok an incompatible change is refused with 409",
        "ok consumed and read 5 records with v2 (v1's with the default)",
    ]
    # what Headrace keeps is the text Confluent's client keeps (Avro's Schema.toString())
    canonical = next(s for s in done.stdout.splitlines() if s.startswith("canonical "))
    canonical = canonical.removeprefix("canonical ")
    v1 = requests.get(f"{url}/subjects/java-orders-value/versions/1", timeout=30).json()
    assert v1["schema"] == canonical
    # ... for any form of it: reordered and indented, under another subject, the same id
    document = json.loads(canonical)
    other = json.dumps({k: document[k] for k in reversed(list(document))}, indent=2)
    r = requests.post(
        f"{url}/subjects/java-orders-copy/versions", json={"schema": other}, timeout=30
    )
    assert r.status_code == 200 and r.json()["id"] == v1["id"], r.text
