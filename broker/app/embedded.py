"""``headrace.Broker``: a broker inside the calling process, for the fastest tests.

    import headrace

    with headrace.Broker(num_partitions=3) as broker:
        run_my_pipeline(bootstrap_servers=broker.bootstrap_servers)   # "127.0.0.1:<port>"

    async with headrace.Broker({"auto.create.topics.enable": False}) as broker:
        ...

Settings are Kafka's names, given as a dict, as keywords with ``_`` for ``.``
(``num_partitions=3``), or both; a bad one raises ``ConfigError`` (a ``ValueError``) at
once. The broker listens on 127.0.0.1 on a free port (unless ``listeners`` says otherwise),
and keeps its data in ``data_dir``, or in a temporary directory removed when the ``with``
block ends.

How this works
--------------
``start`` builds a ``BrokerServer`` (server.py, the same one ``headrace serve`` runs) and a
thread with its own event loop (uvloop when installed); the thread starts the server and
runs the loop, and ``start`` returns once the broker listens, raising the server's
``StartupError`` when it cannot. ``stop`` asks the loop to stop the server cleanly (answer
what is in flight, flush every log, write the clean-shutdown marker, release the data
directory), then ends the loop and joins the thread. ``restart`` is ``stop`` then ``start``
with the same data directory and port. The broker shares the interpreter (and its GIL) with
the caller: for fault tests that kill the broker, use ``BrokerProcess`` (process.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from headrace.broker.client.admin_request import create_topic
from headrace.broker.config.config import BrokerConfig

from .server import BrokerServer

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class Broker:
    """A Headrace broker running on its own thread and event loop in this process."""

    def __init__(
        self,
        settings: Mapping[str, object] | None = None,
        /,
        *,
        data_dir: str | Path | None = None,
        **more: object,
    ) -> None:
        values = {k: _text(v) for k, v in (settings or {}).items()}
        values.update({k.replace("_", "."): _text(v) for k, v in more.items()})
        if "log.dirs" in values and data_dir is not None:
            raise ValueError("give the data directory as data_dir or as log.dirs, not both")
        if data_dir is None and "log.dirs" in values:
            data_dir = values.pop("log.dirs")
        values.setdefault("listeners", "PLAINTEXT://127.0.0.1:0")
        BrokerConfig({**values, "log.dirs": "."})  # bad settings fail here, not in the thread
        self._values = values
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._temporary: tempfile.TemporaryDirectory | None = None
        self._server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0  # the first listener's port, once started

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the first listener, for a client's ``bootstrap_servers``."""
        if self._server is None:
            raise RuntimeError("the broker is not started")
        host, port = self._server.advertised(self._server.listeners[0])
        return f"{host}:{port}"

    @property
    def metrics_port(self) -> int | None:
        """The port of /metrics, /health and /ready (set ``metrics.port``, 0 for a free one)."""
        if self._server is None:
            raise RuntimeError("the broker is not started")
        return self._server.metrics_port

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="headrace-")
            self._data_dir = Path(self._temporary.name)
        return self._data_dir

    def start(self) -> Broker:
        if self._thread is not None:
            raise RuntimeError("the broker is already started")
        config = BrokerConfig({**self._values, "log.dirs": str(self.data_dir)})
        server = BrokerServer(config)
        loop = _new_event_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(
            target=_run, args=(loop, server, started), name="headrace-broker", daemon=True
        )
        thread.start()
        try:
            started.result(START_TIMEOUT_S)
        except BaseException:
            thread.join(STOP_TIMEOUT_S)
            raise
        self._server, self._loop, self._thread = server, loop, thread
        self.port = server.port
        return self

    def stop(self) -> None:
        """Stop cleanly: in-flight requests answered, logs flushed, marker written."""
        server, loop, thread = self._server, self._loop, self._thread
        if server is None or loop is None or thread is None:
            return
        self._server = self._loop = self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(STOP_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_TIMEOUT_S)

    def restart(self) -> Broker:
        """Stop cleanly and start again on the same data directory and port."""
        port = self.port
        self.stop()
        if port and self._values["listeners"].endswith("//127.0.0.1:0"):
            self._values["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        return self.start()

    def create_topic(self, name: str, partitions: int = 1, **configs: object) -> None:
        """Create a topic (CreateTopics over the wire); topic settings as keywords with
        ``_`` for ``.`` (``cleanup_policy="compact"``). Raises ``AdminError`` if refused."""
        create_topic(
            self.bootstrap_servers,
            name,
            partitions,
            {k.replace("_", "."): v for k, v in configs.items()},
        )

    def close(self) -> None:
        """Stop, and remove the data directory if it is a temporary one."""
        try:
            self.stop()
        finally:
            if self._temporary is not None:
                self._temporary.cleanup()
                self._temporary = None
                self._data_dir = None

    def __enter__(self) -> Broker:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Broker:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run(
    loop: asyncio.AbstractEventLoop,
    server: BrokerServer,
    started: concurrent.futures.Future[None],
) -> None:
    """The broker's thread: start the server, serve until stopped, then close the loop."""
    asyncio.set_event_loop(loop)
    try:
        try:
            loop.run_until_complete(server.start())
        except BaseException as e:
            started.set_exception(e)
        else:
            started.set_result(None)
            loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
