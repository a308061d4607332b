"""The ``headrace`` command.

    headrace serve [--host H] [--port P] [--data-dir DIR] [--config FILE] [--override k=v ...]
                   [--log-level LEVEL] [--ready-file PATH] [--workers N]

Starts a broker (127.0.0.1:9092, data in ./headrace-data by default). SIGTERM and Ctrl-C
stop it cleanly: in-flight requests are answered, every log is flushed and a clean-shutdown
marker is written. ``--ready-file PATH``: once the data is recovered and the broker listens,
one line is written to PATH atomically: ``host:port`` of the first listener (the bound port,
also when asked for port 0), then, with several listeners, ``NAME://host:port`` of each, for
whatever started the broker to wait on (see ``headrace.broker.tools.process``); it is removed at
exit.
``--workers N`` (cluster mode only, where it defaults to one per core) runs N brokers of the
cluster, see ``headrace.broker.app.workers``.

    headrace zookeeper [--port 2181] [--data-dir DIR]

Runs a standalone ZooKeeper (Maven Central's jars, see ``headrace.broker.tools.zookeeper_server``)
on 127.0.0.1 in the foreground, data in ./zookeeper-data by default; needs Java and Maven.

    headrace topics list|describe|create|delete|alter ...   (topics_command.py)
    headrace groups list|describe|reset-offsets|delete ... (groups_command.py)

Admin commands over the Kafka protocol against a running broker or cluster
(``--bootstrap-server``, ``--json``).
A command that fails (the broker refuses, or cannot be reached) prints why and exits with 1.

    headrace dump-log FILE|DIR [--print-data]     (dump_log_command.py)
    headrace verify DIR [--progress]              (verify_command.py)

Segment files read as they are on disk, like Kafka's kafka-dump-log, and checked (CRCs,
offsets, indexes); ``verify`` exits with 1 and names the first bad position.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.broker.client.admin_request import AdminError
from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.listeners import listeners
from headrace.broker.config.settings import BROKER_SETTINGS, ConfigError
from headrace.broker.tools import dump_log_command, groups_command, topics_command, verify_command
from headrace.storage import replace_file

if TYPE_CHECKING:
    from .server import BrokerServer

EXIT_FAILED = 1  # an admin command failed (the broker refused, or could not be reached)
EXIT_CONFIG = 2
EXIT_STARTUP = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headrace", description="A Kafka-compatible broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 9092)")
    serve.add_argument("--data-dir", help="data directory (default ./headrace-data)")
    serve.add_argument("--config", help="Kafka-style properties file (key=value lines)")
    serve.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="set one setting"
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level,
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (also log4j's TRACE, WARN, FATAL)",
    )
    serve.add_argument(
        "--ready-file", metavar="PATH", help="write host:port here once listening (removed at exit)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="brokers to run on this machine (cluster mode only; default: one per core)",
    )
    commands.add_parser("settings", help="list the settings and their defaults")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default="127.0.0.1:9092",
        metavar="HOST:PORT[,HOST:PORT]",
        help="a broker of the cluster (PLAINTEXT; default 127.0.0.1:9092)",
    )
    common.add_argument("--json", action="store_true", help="JSON instead of tables")
    topics_command.add_parser(commands, common)
    groups_command.add_parser(commands, common)
    dump_log_command.add_parser(commands)
    verify_command.add_parser(commands)
    zk = commands.add_parser("zookeeper", help="run a standalone ZooKeeper on 127.0.0.1")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk.add_argument("--data-dir", default="zookeeper-data", help="default ./zookeeper-data")
    return parser


# log4j's level names (Kafka's) -> Python's
_LOG4J_LEVELS = {"TRACE": "DEBUG", "WARN": "WARNING", "FATAL": "CRITICAL"}


def _log_level(text: str) -> str:
    level = _LOG4J_LEVELS.get(text.upper(), text.upper())
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)"
        )
    return level


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "settings":
        for s in BROKER_SETTINGS.values():
            print(f"{s.name}={s.default}\n    {s.doc}")
        return
    command = {
        "topics": topics_command,
        "groups": groups_command,
        "dump-log": dump_log_command,
        "verify": verify_command,
    }.get(args.command)
    if command is not None:
        try:
            sys.exit(command.run(args))
        except (AdminError, OSError, ValueError) as e:
            print(f"headrace: {e}", file=sys.stderr)
            sys.exit(EXIT_FAILED)
    if args.command == "zookeeper":
        from headrace.broker.tools.zookeeper_server import run_foreground

        sys.exit(run_foreground(args.port, args.data_dir))
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = list(args.override)
    try:
        config = BrokerConfig.load(args.config, overrides)
        extra = []
        if args.host or args.port is not None:
            (listener, *others) = listeners(config)
            if others:
                raise ConfigError("--host and --port change one listener; listeners has several")
            host = args.host or listener.host
            port = listener.port if args.port is None else args.port
            extra.append(f"listeners={listener.name}://{host}:{port}")
        if args.data_dir:
            extra.append(f"log.dirs={args.data_dir}")
        if extra:
            config = BrokerConfig.load(args.config, overrides + extra)
        workers = args.workers
        if workers is None:
            workers = len(os.sched_getaffinity(0)) if config["zookeeper.connect"] else 1
        if workers < 1 or (workers > 1 and not config["zookeeper.connect"]):
            raise ConfigError("--workers N wants N >= 1, and N > 1 needs zookeeper.connect")
        if config["log.io.backend"] != "os":
            from headrace.storage.io import get_backend

            try:
                get_backend(str(config["log.io.backend"]))
            except ValueError as e:
                raise ConfigError(f"log.io.backend: {e}") from None
    except (ConfigError, OSError) as e:
        print(f"headrace: {e}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    if workers > 1:
        from . import workers as worker_processes

        argv = (["--config", args.config] if args.config else []) + ["--log-level", args.log_level]
        for item in overrides + extra:
            argv += ["--override", item]
        sys.exit(worker_processes.run(config, argv, workers, args.ready_file))
    sys.exit(_run(config, args.ready_file))


# glibc's malloc in a broker process (keep_freed_memory): blocks up to this size come from its
# heap rather than from mmap, and up to MALLOC_KEEP bytes of free memory stay at the heap's top
MALLOC_HEAP_BLOCK = 16 << 20
MALLOC_KEEP = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory of freed request frames for the next ones; returns
    whether it did (False with another C library, which is left as it is).

    A produce request or a replica fetch answer of about 1 MiB is read into a buffer of its
    size, freed once its records are in the log. By default glibc gives the memory of such a
    block back to the kernel when it is freed (it came from mmap, or it lies at the top of the
    heap, which is cut back once more than twice the largest block freed is free there), so the
    next frame's buffer was fresh memory: a page fault and a page the kernel zeroes for every
    4 KiB of every frame, about a tenth of a 3-broker cluster's CPU under replication. Blocks up
    to ``MALLOC_HEAP_BLOCK`` now come from the heap, which keeps up to ``MALLOC_KEEP`` bytes
    free for the next frames (``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, ValueError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_HEAP_BLOCK)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_KEEP)
    )


def _run(config: BrokerConfig, ready_file: str | None = None) -> int:
    from .server import BrokerServer, StartupError

    keep_freed_memory()

    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run

    async def serve() -> int:
        broker = BrokerServer(config)
        try:
            await broker.start()
        except StartupError as e:
            print(f"headrace: {e}", file=sys.stderr)
            return EXIT_STARTUP
        # objects made at start-up (schemas, codecs, topic maps) live as long as the process:
        # keep them out of the collector's scans, and scan young objects less often, since
        # the request path makes few reference cycles
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if ready_file:  # after the handlers: a SIGTERM from then on is a clean stop
            _write_ready(Path(ready_file), _ready_line(broker))
        await stop.wait()
        await broker.stop()
        return 0

    try:
        return runner(serve())
    finally:
        if ready_file:
            Path(ready_file).unlink(missing_ok=True)


def _ready_line(broker: BrokerServer) -> str:
    """What ``--ready-file`` gets: the first listener's bound ``host:port``, then (when there
    are several) every listener's ``NAME://host:port``, and the schema registry's as
    ``SCHEMA_REGISTRY://host:port`` when it is on."""
    items = [f"{broker.host or '0.0.0.0'}:{broker.port}"]
    for x in broker.listeners if len(broker.listeners) > 1 else ():
        items.append(f"{x.name}://{x.host or '0.0.0.0'}:{broker.bound[x.name]}")
    if broker.registry_port is not None:  # the schema registry's, by this name
        items.append(f"SCHEMA_REGISTRY://{broker.host or '0.0.0.0'}:{broker.registry_port}")
    return " ".join(items)


def _write_ready(path: Path, line: str) -> None:
    """``line`` into ``path``, all at once: written beside it, then renamed."""
    replace_file(path, f"{line}\n".encode(), durable=False)
