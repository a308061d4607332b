"""PySpark reads a topic as an Iceberg table (compat/spark/iceberg.py: two kill -9s of the
broker during a load, an aborted and a committed transaction, Spark's rows against a
read_committed consumer's). 35 to 90 s (a Spark session with Iceberg's runtime from Maven
Central), so it runs only when asked: ``HEADRACE_SPARK_ICEBERG=1 pytest
tests/compat/test_spark_iceberg.py`` (needs pyspark 4.0 and Java 17), or directly
``python compat/spark/iceberg.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    os.environ.get("HEADRACE_SPARK_ICEBERG") != "1", reason="HEADRACE_SPARK_ICEBERG=1 runs it"
)
@pytest.mark.timeout(900)
def test_spark_reads_exactly_the_committed_records():
    pytest.importorskip("pyspark")
    pytest.importorskip("pyiceberg")
    done = subprocess.run(
        [sys.executable, str(ROOT / "compat" / "spark" / "iceberg.py")],
        capture_output=True,
        text=True,
        timeout=880,
    )
    last = [line for line in done.stdout.splitlines() if line.strip()][-2:]
    assert done.returncode == 0 and last[-1] == "PASS", "\n".join(last) + done.stderr[-3000:]
