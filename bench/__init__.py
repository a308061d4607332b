"""Benchmarks: Apache Kafka and Headrace side by side (``python -m bench.run``).

The files, in reading order: ``scenarios.py`` (the scenarios as data and their bars),
``run.py`` (the driver), ``context.py`` (what every runner is given), the runners with their
output parsers ``produce.py``, ``consume.py``, ``latency.py``, ``coldstart.py``, then
``brokers.py`` (the two brokers behind one interface, CPU pinning and accounting, the Java
tool runner), ``apache_kafka.py`` (Apache Kafka from Maven Central), ``wire.py`` (a minimal
Kafka client for set-up and S7), ``machine.py`` (machine facts and limits), ``profiler.py``
(py-spy), ``report.py`` (results.md, plots, docs/benchmarks.md). ``storage_bench.py`` is a
separate storage micro-benchmark.
"""
