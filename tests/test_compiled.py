"""The produce path compiled by Cython (setup.py, ``headrace._compiled``): built by the install
wherever there is a C compiler, and an edited source imported from source until the next build."""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from headrace._compiled import MODULES, EditedSource


def test_the_install_compiled_the_produce_path():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the modules run from source")
    from_source = [
        name
        for name in MODULES
        if not importlib.import_module(name).__file__.endswith(tuple(EXTENSION_SUFFIXES))
    ]
    assert not from_source, (
        f"imported from source, not compiled: {from_source} (edited since the build? then "
        "`pip install -e .` compiles them again)"
    )


def test_an_edited_source_is_imported_from_source(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    compiled = tmp_path / f"mod{EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")  # (found, never loaded)
    os.utime(source, (1_000, 1_000))
    os.utime(compiled, (2_000, 2_000))
    assert EditedSource.find_spec("headrace.mod", [str(tmp_path)]) is None  # the compiled one
    os.utime(source, (3_000, 3_000))  # edited after the build
    spec = EditedSource.find_spec("headrace.mod", [str(tmp_path)])
    assert spec is not None and spec.origin == str(source)
    # other packages' modules and top-level imports are left to the usual finders
    assert EditedSource.find_spec("other.mod", [str(tmp_path)]) is None
    assert EditedSource.find_spec("headrace.mod", None) is None
