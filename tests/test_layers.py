"""The packages depend one way: broker -> pipeline -> protocol, broker -> storage.

How this works: every ``.py`` file under a folder of ``[tool.setuptools.package-dir]`` in
pyproject.toml gets its installed module name (``pipeline/router.py`` is
``headrace.pipeline.router``; ``broker/headrace/`` is the top-level ``headrace`` package, so
the longest matching folder wins). Each file is parsed with ``ast`` and every import is
resolved to an absolute module name: ``import a.b``, ``from a import b`` (``b`` counts when it is
a module), relative imports of any level against the file's own package, and calls of
``importlib.import_module`` / ``__import__`` whose arguments are string literals. Each
imported ``headrace.*`` module belongs to a unit (``headrace.storage.log`` -> ``storage``) and
``ALLOWED`` says which units a unit may import. Calls with computed names are not checked.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = "headrace"
LEAF = "record_format"  # headrace.record_format: record-format primitives every package may use

# unit -> the units it may import (besides itself and the top-level ``headrace`` package,
# whose __init__ every ``import headrace.x`` runs anyway)
ALLOWED: dict[str, set[str]] = {
    "protocol": {LEAF},
    "storage": {LEAF},
    "pipeline": {"protocol", LEAF},
    "broker": {"protocol", "pipeline", "storage", LEAF},
    LEAF: set(),
    # broker/headrace/__init__.py: ``headrace.Broker``, imported on first use (module
    # __getattr__), so that ``import headrace.protocol`` does not load the broker
    TOP: {"broker"},
}


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """``[tool.setuptools.package-dir]``: package name -> folder."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    return {name: root / d for name, d in config["tool"]["setuptools"]["package-dir"].items()}


def unit_of(module: str) -> str | None:
    """The layering unit of an absolute module name; None outside the project."""
    parts = module.split(".")
    if parts[0] != TOP:
        return None
    if len(parts) == 1:
        return TOP
    if parts[1] in ALLOWED:
        return parts[1]
    return "broker"  # other top-level modules (``headrace.__main__``) are the server's


@dataclass(frozen=True)
class Source:
    path: Path
    module: str  # installed name: headrace.pipeline.router
    package: str  # the package relative imports start from

    @property
    def unit(self) -> str | None:
        return unit_of(self.module)


def sources(dirs: dict[str, Path]) -> list[Source]:
    """Every Python file under the mapped folders, named by its most specific mapping."""
    by_depth = sorted(dirs.items(), key=lambda item: len(item[1].parts), reverse=True)
    found: dict[Path, Source] = {}
    for name, folder in by_depth:
        for path in sorted(folder.rglob("*.py")):
            if path in found:
                continue  # a deeper mapping (broker/headrace/) already named it
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                module = ".".join((name, *rel[:-1]))
                package = module
            else:
                module = ".".join((name, *rel))
                package = module.rpartition(".")[0]
            found[path] = Source(path, module, package)
    return sorted(found.values(), key=lambda s: s.path)


def resolve(name: str, level: int, package: str) -> str:
    """Absolute name of a relative import; ValueError when it climbs past the top."""
    if level == 0:
        return name
    parts = package.split(".")
    if level - 1 >= len(parts):
        raise ValueError(f"relative import of level {level} beyond the top from {package}")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def _literal(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _call_arg(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _with_submodules(base: str, names: list[str], known: set[str]) -> list[str]:
    """``from base import names``: base, and ``base.name`` for each name that is a module."""
    found = [base]
    for name in names:
        full = f"{base}.{name}"
        if full in known or (base == TOP and name in ALLOWED):
            found.append(full)
    return found


def _modules(
    node: ast.Import | ast.ImportFrom | ast.Call, package: str, known: set[str]
) -> list[str]:
    """The absolute module names one import statement or import call brings in."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = resolve(node.module or "", node.level, package)
        return _with_submodules(base, [alias.name for alias in node.names], known)
    if _call_name(node) == "import_module":
        name = _literal(_call_arg(node, 0, "name"))
        package_node = _call_arg(node, 1, "package")
        if isinstance(package_node, ast.Name) and package_node.id == "__package__":
            anchor: object = package
        else:
            anchor = _literal(package_node)
        if not isinstance(name, str):
            return []  # computed at run time
        level = len(name) - len(name.lstrip("."))
        if level == 0:
            return [name]
        return [resolve(name[level:], level, anchor)] if isinstance(anchor, str) else []
    if _call_name(node) == "__import__":
        name = _literal(_call_arg(node, 0, "name"))
        up = _literal(_call_arg(node, 4, "level")) or 0
        fromlist = _literal(_call_arg(node, 3, "fromlist")) or ()
        if isinstance(name, str) and isinstance(up, int) and isinstance(fromlist, list | tuple):
            base = resolve(name, up, package)
            return _with_submodules(base, [n for n in fromlist if isinstance(n, str)], known)
    return []


def imported(source: Source, known: set[str]) -> list[tuple[int, str]]:
    """(line, absolute module) for each import in the file; ``known`` are the tree's modules.

    For ``from a import b`` both ``a`` and ``a.b`` count when ``a.b`` is a module (or a
    layering unit, which always is); otherwise ``b`` is a name inside ``a``.
    """
    tree = ast.parse(source.path.read_text(), str(source.path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Call):
            try:
                modules = _modules(node, source.package, known)
            except ValueError as e:
                modules = [f"<{e}>"]
            found.extend((node.lineno, module) for module in modules)
    return found


def violations(root: Path = ROOT) -> list[str]:
    """One line per import that breaks the layering, as ``path:line: unit imports module``."""
    tree = sources(package_dirs(root))
    known = {s.module for s in tree}
    wrong = []
    for source in tree:
        unit = source.unit
        assert unit in ALLOWED, f"{source.path}: no layering rule for {source.module}"
        may = ALLOWED[unit] | {unit, TOP}
        for line, module in imported(source, known):
            target = unit_of(module) if not module.startswith("<") else module
            if target is not None and target not in may:
                where = f"{source.path.relative_to(root)}:{line}"
                wrong.append(f"{where}: {unit} imports {module} ({target})")
    return wrong


def test_packages_import_only_what_they_may():
    wrong = violations()
    assert not wrong, "\n".join(["layering broken:", *wrong])


def test_every_package_folder_has_a_rule_and_files():
    dirs = package_dirs()
    for name, folder in dirs.items():
        assert unit_of(name) in ALLOWED, name
        assert list(folder.rglob("*.py")), f"{folder} has no Python files"


def test_every_package_is_installed():
    """``pip install .`` (not editable) installs only the packages pyproject.toml lists: every
    folder with an ``__init__.py`` under a package folder must be one of them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    dirs = package_dirs()
    mapped = {folder: name for name, folder in dirs.items()}
    found = set()
    for name, folder in dirs.items():
        for init in folder.rglob("__init__.py"):
            if mapped.get(init.parent, name) != name:
                continue  # a folder mapped to a package of its own (broker/headrace)
            found.add(".".join((name, *init.parent.relative_to(folder).parts)))
    assert found - listed == set(), "packages missing from pyproject.toml"
    assert listed - found == set(), "pyproject.toml lists packages that are not there"


# Inside broker/: its sub-packages, from the top down. A module may import its own sub-package
# and those below it, never one above (so no two sub-packages import each other); the modules
# at the root of broker/ (``background``) are below them all. ``coordinator.txn`` is above
# ``coordinator.group``: a transaction's offsets are a group's; ``iceberg`` is above ``registry``:
# a table's columns come from the registry's schemas (its Protobuf parser among them).
BROKER_LAYERS = [
    "app",
    "tools",
    "apis",
    "iceberg",
    "registry",
    "share",
    "coordinator.txn",
    "coordinator.share",
    "coordinator.group",
    "replication",
    "client",
    "security",
    "log",
    "cluster",
    "config",
    "",
]
NESTED = {"coordinator"}  # sub-packages whose own sub-packages are the layers


def broker_layer(module: str) -> str | None:
    """``headrace.broker.log.topics`` -> ``log``; the root's modules -> ``""``."""
    parts = module.split(".")
    if parts[:2] != [TOP, "broker"] or len(parts) < 3:
        return None
    inside = parts[2:]
    if inside[0] in NESTED and len(inside) > 1:
        return ".".join(inside[:2])
    return inside[0] if inside[0] in BROKER_LAYERS else ""


def broker_upward(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(from layer, to layer) -> the imports that run up, as ``path:line module``."""
    tree = [s for s in sources(package_dirs(root)) if broker_layer(s.module) is not None]
    known = {s.module for s in tree}
    rank = {layer: i for i, layer in enumerate(BROKER_LAYERS)}
    found: dict[tuple[str, str], list[str]] = {}
    for source in tree:
        own = broker_layer(source.module)
        assert own in rank, f"{source.path}: {own!r} is not in BROKER_LAYERS"
        for line, module in imported(source, known):
            target = broker_layer(module)
            if target in rank and rank[target] < rank[own]:
                where = f"{source.path.relative_to(root)}:{line} {module}"
                found.setdefault((own, target), []).append(where)
    return found


def test_broker_sub_packages_import_only_downward():
    """(Type-only imports count: a sub-package that names another's classes depends on it.)"""
    found = broker_upward()
    assert not found, "\n".join(
        ["imports that run up inside broker/:", *(w for ws in found.values() for w in ws)]
    )


def test_the_broker_layer_checker_catches_an_upward_import(tmp_path):
    root = fake_tree(tmp_path, {})
    for folder in ("broker/log", "broker/cluster", "broker/coordinator/group"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")
    (root / "broker/log/topics.py").write_text("from ..cluster import cluster\n")
    (root / "broker/cluster/cluster.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from headrace.broker.log.topics import TopicManager\n"
    )
    (root / "broker/coordinator/group/offsets.py").write_text(
        "from headrace.broker.log import topics\nfrom ...cluster.cluster import X\n"
    )
    found = broker_upward(root)
    assert set(found) == {("cluster", "log")}, found
    assert found[("cluster", "log")] == ["broker/cluster/cluster.py:3 headrace.broker.log.topics"]


def test_each_broker_sub_package_maps_its_files():
    """Each sub-package's ``__init__`` is its map: it names every file in it."""
    broker = package_dirs()["headrace.broker"]
    for init in sorted(broker.rglob("__init__.py")):
        folder = init.parent
        if folder == broker / "headrace" or "__pycache__" in folder.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        entries = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
        entries += [f"{d.name}/" for d in folder.iterdir() if (d / "__init__.py").exists()]
        if folder == broker:
            entries = [e for e in entries if e != "headrace/"]
        missing = [e for e in sorted(entries) if e not in doc]
        assert not missing, f"{init.relative_to(ROOT)} does not name {missing}"


# The checker itself, on fake trees laid out like the project.

PYPROJECT = """
[tool.setuptools.package-dir]
"headrace" = "broker/headrace"
"headrace.broker" = "broker"
"headrace.protocol" = "protocol"
"headrace.pipeline" = "pipeline"
"headrace.storage" = "storage"
"""

FOLDERS = [
    "protocol",
    "protocol/records",
    "storage",
    "storage/sub",
    "pipeline",
    "broker",
    "broker/x",
    "broker/x/y",
    "broker/headrace",
]


def fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    for name in ("storage/log.py", "protocol/records/batch.py", "broker/headrace/record_format.py"):
        (tmp_path / name).write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


BROKEN = {
    # file -> (source, the unit it must not reach)
    "import": ("protocol/codec.py", "import headrace.storage\n", "storage"),
    "import-as": ("protocol/codec.py", "import headrace.storage.log as log\n", "storage"),
    "from-module": ("protocol/codec.py", "from headrace.storage.log import Log\n", "storage"),
    "from-top": ("protocol/codec.py", "from headrace import storage\n", "storage"),
    "from-top-many": ("pipeline/flush.py", "from headrace import protocol, storage\n", "storage"),
    "relative-2": ("storage/segment.py", "from ..protocol import codec\n", "protocol"),
    "relative-2-names-a-package": ("storage/segment.py", "from .. import protocol\n", "protocol"),
    "relative-3": ("protocol/records/v2.py", "from ...storage import Log\n", "storage"),
    "relative-3-names-a-package": (
        "protocol/records/v2.py",
        "from ... import storage\n",
        "storage",
    ),
    "relative-3-deep-module": ("protocol/records/v2.py", "from ...broker.x import y\n", "broker"),
    "relative-3-from-subpackage-init": (
        "protocol/records/__init__.py",
        "from ...pipeline import q\n",
        "pipeline",
    ),
    "relative-3-in-subpackage": (
        "storage/sub/log.py",
        "from ...protocol import codec\n",
        "protocol",
    ),
    "relative-1-in-top-level-module": (
        "broker/headrace/record_format.py",
        "from .storage import x\n",
        "storage",
    ),
    "inside-function": ("storage/log2.py", "def f():\n    import headrace.broker\n", "broker"),
    "type-checking": (
        "storage/log2.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from headrace.pipeline import router\n",
        "pipeline",
    ),
    "import_module": (
        "protocol/codec.py",
        "import importlib\nimportlib.import_module('headrace.storage')\n",
        "storage",
    ),
    "import_module-relative": (
        "protocol/codec.py",
        "from importlib import import_module\nimport_module('.storage', 'headrace')\n",
        "storage",
    ),
    "import_module-keywords": (
        "protocol/codec.py",
        "import importlib\nimportlib.import_module(package='headrace', name='.storage.log')\n",
        "storage",
    ),
    "import_module-own-package": (
        "protocol/records/v2.py",
        "import importlib\nimportlib.import_module('...storage', __package__)\n",
        "storage",
    ),
    "__import__": ("pipeline/flush.py", "__import__('headrace.storage.log')\n", "storage"),
    "__import__-fromlist": (
        "pipeline/flush.py",
        "__import__('headrace', fromlist=['broker'])\n",
        "broker",
    ),
    "__import__-relative": (
        "pipeline/flush.py",
        "__import__('storage', globals(), locals(), [], 2)\n",
        "storage",
    ),
    "leaf-imports-project": (
        "broker/headrace/record_format.py",
        "from headrace.protocol import x\n",
        "protocol",
    ),
    "leaf-imports-relative": (
        "broker/headrace/record_format.py",
        "from . import pipeline\n",
        "pipeline",
    ),
    "top-imports-project": ("broker/headrace/__init__.py", "from . import storage\n", "storage"),
    "upward-from-broker-subpackage": ("storage/log.py", "from ..broker.x.y import z\n", "broker"),
    "beyond-top": ("protocol/codec.py", "from .... import anything\n", "<"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_checker_catches(tmp_path, case):
    name, text, target = BROKEN[case]
    root = fake_tree(tmp_path, {name: text})
    found = violations(root)
    assert len(found) >= 1, f"{case} not caught"
    assert all(line.startswith(f"{name}:") for line in found), found
    assert any(f"({target}" in line for line in found), found


CLEAN = {
    "protocol/codec.py": "import os\nfrom .records import batch\nfrom . import records\n"
    "from headrace.protocol.records.batch import B\n"
    "from headrace import record_format, __version__\n"
    "import headrace.record_format as rf\n",
    "protocol/records/v2.py": "from ..records import batch\nfrom .. import codec\n"
    "from ...record_format import crc\n",
    "storage/segment.py": "from .log import Log\nfrom headrace.record_format import crc\n"
    "import importlib\nimportlib.import_module('.log', __package__)\n",
    "pipeline/flush.py": "from ..protocol import codec\nimport headrace.protocol\n"
    "__import__('headrace.protocol')\nimportlib.import_module(name)\n",
    "broker/x/y/z.py": "from ....storage import log\nfrom ....pipeline import flush\n"
    "from ... import produce\nfrom headrace import storage, protocol\n"
    "import importlib\nimportlib.import_module(f'.{name}', __package__)\n",
    "broker/produce.py": "from .x.y import z\nfrom headrace.storage.log import Log\n",
    "broker/headrace/__main__.py": "from headrace.broker.cli import main\nfrom . import broker\n",
    "broker/headrace/record_format.py": "import struct\nfrom headrace import __version__\n",
}


def test_checker_passes_a_clean_tree(tmp_path):
    root = fake_tree(tmp_path, CLEAN)
    assert violations(root) == []


def test_module_names_follow_package_dir(tmp_path):
    root = fake_tree(tmp_path, CLEAN)
    names = {
        s.path.relative_to(root).as_posix(): (s.module, s.package)
        for s in sources(package_dirs(root))
    }
    assert names["broker/headrace/__init__.py"] == ("headrace", "headrace")
    assert names["broker/headrace/record_format.py"] == ("headrace.record_format", "headrace")
    assert names["broker/x/y/z.py"] == ("headrace.broker.x.y.z", "headrace.broker.x.y")
    assert names["protocol/records/__init__.py"] == ("headrace.protocol.records",) * 2
    assert names["storage/log.py"] == ("headrace.storage.log", "headrace.storage")


def test_a_broker_loads_optional_libraries_only_when_it_uses_them():
    """What ``headrace serve`` imports before it listens is most of its start-up time: the
    libraries of features a broker may not use (SCRAM, the metrics endpoint, properties
    files, the ZooKeeper client) are imported where they are used, not by the broker's
    modules, and each API's module when that API is first asked for."""
    import subprocess
    import sys

    optional = (
        "scramp",
        "prometheus_client",
        "javaproperties",
        "aiohttp",
        "fastavro",
        "jsonschema",
        "proto_schema_parser",
        "google.protobuf",
        "pyiceberg",
        "pyarrow",
        "kazoo.client",
    )
    code = (
        "import sys, headrace.broker.app.cli, headrace.broker.app.server\n"
        "from headrace.broker.apis.registry import APIS\n"
        "apis = [f'headrace.broker.apis.{name}' for name, _, _ in APIS.values()]\n"
        f"print(' '.join(m for m in [*{optional!r}, *apis] if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
