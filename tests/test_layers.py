"""The packages depend one way: broker -> pipeline -> protocol, broker -> storage."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "protocol": set(),
    "storage": set(),
    "pipeline": {"protocol"},
    "broker": {"protocol", "pipeline", "storage"},
}
SHARED_LEAF = "record_format"  # headrace.record_format, which every package may import


def project_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "headrace" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no Python files"
    for path in files:
        if package == "broker" and path.parent.name == "headrace":
            continue  # the top-level package's entry point
        wrong = project_imports(path) - ALLOWED[package] - {package, SHARED_LEAF}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_the_shared_leaf_imports_nothing_from_the_project():
    assert not project_imports(ROOT / "broker" / "headrace" / f"{SHARED_LEAF}.py")
