"""The compiled parts, each optional (without a C compiler the install goes on and Python does
the work): Kafka's checks of the records in a batch (``headrace._record_check``; the Python
reference is ``headrace.record_check``), the records of batches into columns for Iceberg
tables (``headrace._record_columns``; the Python twin is in ``headrace.broker.iceberg.committed``),
a send step's sendfile loop (``headrace.pipeline._send``)
and the page-residency check of no-wait reads (``headrace.storage._pages``). Everything else
is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
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
