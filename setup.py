"""The compiled parts, each optional (without a C compiler the install goes on and Python does
the work): Kafka's checks of the records in a batch (``headrace._record_check``; the Python
reference is ``headrace.record_check``), the records of batches into columns for Iceberg
tables (``headrace._record_columns``; the Python twin is in ``headrace.broker.iceberg.committed``),
a send step's sendfile loop (``headrace.pipeline._send``)
and the page-residency check of no-wait reads (``headrace.storage._pages``); and the modules of
the produce path, from the connection to the log (``headrace._compiled.MODULES``), compiled
from their own source by Cython: the same code without the interpreter's dispatch, which cuts
the broker's CPU per produced byte by a fifth (bench/results/notes.md, "S4: the produce path
compiled"). Everything else is configured in pyproject.toml."""

import runpy

from setuptools import Extension, setup

COMPILED = runpy.run_path("broker/headrace/_compiled.py")["MODULES"]  # module -> source


def compiled() -> list[Extension]:
    """The ``COMPILED`` modules as optional extensions (none without Cython)."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    modules = cythonize(
        [Extension(name, [source]) for name, source in COMPILED.items()],
        build_dir="build/cython",
        quiet=True,
        # the annotations stay what they are in Python: documentation, not checks
        compiler_directives={"language_level": 3, "annotation_typing": False},
    )
    for m in modules:
        m.optional = True  # (cythonize does not carry it over)
    return modules


setup(
    options={"build_ext": {"parallel": 2}},
    ext_modules=compiled() + [
        Extension(
            "headrace._record_check",
            sources=["broker/headrace/_record_check.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "headrace._record_columns",
            sources=["broker/headrace/_record_columns.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "headrace.pipeline._send",
            sources=["pipeline/_send.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "headrace.storage._pages",
            sources=["storage/_pages.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
