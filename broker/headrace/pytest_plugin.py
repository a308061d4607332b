"""Headrace's pytest plugin: a real Kafka broker for any test suite.

Installing Headrace registers it with pytest (the ``pytest11`` entry point, named
``headrace``; ``-p no:headrace`` turns it off). Two fixtures:

``kafka_broker`` (function scope): a broker in a child process (``BrokerProcess``) on a free
port of 127.0.0.1 with its data in the test's ``tmp_path``, stopped after the test::

    def test_orders(kafka_broker):
        kafka_broker.create_topic("orders", partitions=3)
        run_my_pipeline(bootstrap_servers=kafka_broker.bootstrap_servers)

It has ``bootstrap_servers``, ``create_topic(name, partitions=1, **configs)`` (topic
settings with ``_`` for ``.``), ``restart()`` (clean stop, start again on the same port and
data) and ``kill()`` (SIGKILL: an unclean stop; ``restart()`` then recovers the logs).

``kafka_broker_factory`` (session scope): makes brokers for other scopes or settings;
each is stopped when the session ends (or earlier with ``stop()``)::

    @pytest.fixture(scope="module")
    def compacting_broker(kafka_broker_factory):
        broker = kafka_broker_factory({"log.cleaner.backoff.ms": 100}, num_partitions=3)
        yield broker
        broker.stop()

``kafka_broker_factory(in_process=True, ...)`` gives a ``headrace.Broker`` instead: the
broker runs on a thread of the test process and starts in milliseconds rather than a
fraction of a second, with everything above but ``kill()``, which needs a process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class KafkaBrokerFactory:
    """``factory(settings=None, /, *, in_process=False, data_dir=None, **settings)``: a
    started broker. Settings are Kafka's names, as a dict or as keywords with ``_`` for
    ``.``; the data goes to ``data_dir`` or to a new directory under pytest's temporary
    directory."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._made: list[Any] = []

    def __call__(
        self,
        settings: dict[str, object] | None = None,
        /,
        *,
        in_process: bool = False,
        data_dir: str | Path | None = None,
        **more: object,
    ) -> Any:
        values = dict(settings or {})
        values.update({k.replace("_", "."): v for k, v in more.items()})
        path = Path(data_dir) if data_dir is not None else self._tmp.mktemp("kafka-broker")
        broker: Any
        if in_process:
            from headrace import Broker

            broker = Broker(values, data_dir=path)
        else:
            from headrace.broker.tools.process import BrokerProcess

            broker = BrokerProcess(path, values)
        broker.start()
        self._made.append(broker)
        return broker

    def forget(self, broker: Any) -> None:
        """``broker`` was stopped by whoever made it."""
        self._made.remove(broker)

    def stop_all(self) -> None:
        while self._made:
            self._made.pop().stop()


@pytest.fixture(scope="session")
def kafka_broker_factory(tmp_path_factory: pytest.TempPathFactory):
    """Make started Headrace brokers; all are stopped at the end of the session."""
    factory = KafkaBrokerFactory(tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture
def kafka_broker(kafka_broker_factory: KafkaBrokerFactory, tmp_path: Path):
    """A Headrace broker in a child process for one test: ``bootstrap_servers``,
    ``create_topic``, ``restart()``, ``kill()``."""
    broker = kafka_broker_factory(data_dir=tmp_path / "kafka-broker")
    yield broker
    broker.stop()
    kafka_broker_factory.forget(broker)
