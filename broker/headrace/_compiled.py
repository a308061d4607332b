"""The modules setup.py compiles with Cython (``MODULES``: the produce path, from the
connection to the log), and their edited sources.

A compiled module keeps its ``.py`` beside it, and Python prefers the compiled one. In a source
checkout, where the install is editable, a ``.py`` edited after the build would then not run at
all; ``install`` makes such a module import from its ``.py`` (saying so once) until
``pip install -e .`` compiles it again. An installed wheel is no checkout: nothing changes there.
"""

from __future__ import annotations

import logging
import sys
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from pathlib import Path

# module -> source in the checkout: the path of a Produce request (and of most others), by layer
MODULES = {
    "headrace.pipeline.connection": "pipeline/connection.py",
    "headrace.pipeline.router": "pipeline/router.py",
    "headrace.pipeline.writer": "pipeline/writer.py",
    "headrace.pipeline.limits": "pipeline/limits.py",
    "headrace.protocol.api": "protocol/api.py",
    "headrace.protocol.headers": "protocol/headers.py",
    "headrace.protocol.records": "protocol/records.py",
    "headrace.protocol.error_codes": "protocol/error_codes.py",
    "headrace.broker.app.dispatch": "broker/app/dispatch.py",
    "headrace.broker.app.metrics": "broker/app/metrics.py",
    "headrace.broker.apis.produce": "broker/apis/produce.py",
    "headrace.broker.apis.leader_hints": "broker/apis/leader_hints.py",
    "headrace.broker.log.partition": "broker/log/partition.py",
    "headrace.broker.log.log_validator": "broker/log/log_validator.py",
    "headrace.record_format": "broker/headrace/record_format.py",
    "headrace.storage.append": "storage/append.py",
    "headrace.storage.segment": "storage/segment.py",
    "headrace.storage.index": "storage/index.py",
    "headrace.storage.open_files": "storage/open_files.py",
    "headrace.storage.io": "storage/io.py",
}

CHECKOUT = Path(__file__).resolve().parents[2]  # broker/headrace/_compiled.py in a checkout


class EditedSource:
    """A finder ahead of the others: a compiled ``headrace`` module older than its ``.py``
    comes from the ``.py``."""

    @staticmethod
    def find_spec(name: str, path=None, target=None) -> ModuleSpec | None:
        if path is None or not name.startswith("headrace."):
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or not spec.origin:
            return None
        compiled = Path(spec.origin)
        source = compiled.with_name(name.rpartition(".")[2] + ".py")
        try:
            if source.stat().st_mtime <= compiled.stat().st_mtime:
                return None
        except OSError:  # no .py: an extension written in C
            return None
        logging.getLogger("headrace").warning(
            "%s changed after it was compiled: it runs from source until `pip install -e .`",
            source,
        )
        return spec_from_file_location(name, source)


def install() -> None:
    """Put ``EditedSource`` first, in a source checkout only."""
    if (CHECKOUT / "setup.py").exists() and EditedSource not in sys.meta_path:
        sys.meta_path.insert(0, EditedSource)  # type: ignore[arg-type]
